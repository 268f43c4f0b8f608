package flagparse

import (
	"errors"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

func errorsIsAny(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

func TestBytes(t *testing.T) {
	for s, want := range map[string]int64{
		"4096":                4096,
		"1.5":                 1,
		"128MiB":              128 << 20,
		"128mib":              128 << 20,
		"1GB":                 1e9,
		" 1.5 GiB ":           3 << 29,
		"2KB":                 2000,
		"3KiB":                3072,
		"1TB":                 1e12,
		"2TiB":                2 << 40,
		"512B":                512,
		"512 b":               512,
		"1e3":                 1000,
		"9007199254740993":    9007199254740993, // 2^53+1: read exactly
		"4611686018427387904": MaxBytes,
	} {
		got, err := Bytes(s)
		require.NoError(t, err, "%q", s)
		require.Equal(t, want, got, "%q", s)
	}
	for _, s := range []string{"", "0", "-1", "0.5", "x", "1XB", "MiB", "NaN", "Inf", "4611686018427387905", "4194305TiB", "1e30"} {
		_, err := Bytes(s)
		require.ErrorIs(t, err, ErrSize, "%q", s)
	}
}

// FuzzBytes: any input either fails with ErrSize or gives a size in
// [1, MaxBytes]; a whole number in that range is read exactly.
func FuzzBytes(f *testing.F) {
	f.Add("128MiB")
	f.Add("1.5 gb")
	f.Add("4096")
	f.Add("b")
	f.Fuzz(func(t *testing.T, s string) {
		n, err := Bytes(s)
		if err != nil {
			require.ErrorIs(t, err, ErrSize)
		} else {
			require.True(t, n >= 1 && n <= MaxBytes, "%q gave %d", s, n)
		}
		if v, perr := strconv.ParseInt(s, 10, 64); perr == nil && v >= 1 && v <= MaxBytes {
			require.NoError(t, err)
			require.Equal(t, v, n)
		}
	})
}
