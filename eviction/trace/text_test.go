package trace

import (
	"io"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/require"
)

func TestTextReader(t *testing.T) {
	in := "1\n  22 \r\n\n\t333\n18446744073709551615" // last line unterminated, max uint64
	got, err := Load(NewTextReader(strings.NewReader(in), TextConfig{}))
	require.NoError(t, err)
	require.Equal(t, []Request{
		{Time: 0, ID: 1, Size: 1, NextAccess: -1},
		{Time: 1, ID: 22, Size: 1, NextAccess: -1},
		{Time: 2, ID: 333, Size: 1, NextAccess: -1},
		{Time: 3, ID: 18446744073709551615, Size: 1, NextAccess: -1},
	}, got)
}

func TestTextReaderEmpty(t *testing.T) {
	for _, in := range []string{"", "\n", "\n \n\t\n", "  "} {
		r := NewTextReader(strings.NewReader(in), TextConfig{})
		var q Request
		require.ErrorIs(t, r.Next(&q), io.EOF, "%q", in)
	}
}

func TestTextReaderMalformed(t *testing.T) {
	cases := map[string]string{
		"1\n2\nabc\n":            "line 3",
		"1\n-5\n":                "line 2",
		"18446744073709551616\n": "line 1", // overflow
		"1 2\n":                  "line 1",
		"7\n" + strings.Repeat("9", maxLineBytes+10) + "\n": "line 2",
	}
	for in, where := range cases {
		r := NewTextReader(strings.NewReader(in), TextConfig{})
		_, err := Load(r)
		require.ErrorIs(t, err, ErrMalformed, "%.20q", in)
		require.Contains(t, err.Error(), where, "%.20q", in)
		var q Request
		require.ErrorIs(t, r.Next(&q), ErrMalformed, "errors are sticky")
	}
}

func TestTextReaderLongestLine(t *testing.T) {
	ok := strings.Repeat(" ", maxLineBytes-1) + "5"
	got, err := Load(NewTextReader(strings.NewReader(ok+"\n"+ok), TextConfig{}))
	require.NoError(t, err)
	require.Len(t, got, 2)
	_, err = Load(NewTextReader(strings.NewReader(" "+ok), TextConfig{}))
	require.ErrorIs(t, err, ErrMalformed)
}

func TestTextReaderHashIDs(t *testing.T) {
	got, err := Load(NewTextReader(strings.NewReader("alpha\n 42 \nalpha\n"), TextConfig{HashIDs: true}))
	require.NoError(t, err)
	require.Len(t, got, 3)
	require.Equal(t, xxhash.Sum64String("alpha"), got[0].ID)
	require.Equal(t, xxhash.Sum64String("42"), got[1].ID)
	require.Equal(t, got[0].ID, got[2].ID)
}

func TestParseUintInt(t *testing.T) {
	for in, want := range map[string]uint64{"0": 0, "007": 7, "18446744073709551615": 1<<64 - 1} {
		v, ok := parseUint(in)
		require.True(t, ok, in)
		require.Equal(t, want, v, in)
	}
	for _, in := range []string{"", "+1", "-1", "1_0", "18446744073709551616", "1.0"} {
		_, ok := parseUint(in)
		require.False(t, ok, in)
	}
	for in, want := range map[string]int64{"-9223372036854775808": -1 << 63, "+5": 5, "9223372036854775807": 1<<63 - 1} {
		v, ok := parseInt(in)
		require.True(t, ok, in)
		require.Equal(t, want, v, in)
	}
	for _, in := range []string{"-", "9223372036854775808", "-9223372036854775809"} {
		_, ok := parseInt(in)
		require.False(t, ok, in)
	}
}
