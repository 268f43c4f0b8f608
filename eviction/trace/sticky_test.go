package trace

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// failOnce returns err from its first Read and io.EOF after that, as a
// flaky network or disk read can: a reader that does not remember the
// error would then report a clean end of the trace.
type failOnce struct {
	err    error
	failed bool
}

func (f *failOnce) Read([]byte) (int, error) {
	if f.failed {
		return 0, io.EOF
	}
	f.failed = true
	return 0, f.err
}

// TestReadersErrorsAreSticky: once Next has returned an error other than
// io.EOF, every later call returns that same error, for every reader and
// every kind of failure. A truncated or failed trace must never end up
// looking complete.
func TestReadersErrorsAreSticky(t *testing.T) {
	boom := errors.New("disk on fire")
	oracle := encode(t, randomRequests(rand.New(rand.NewPCG(5, 6)), 2))
	csvCfg := CSVConfig{TimeColumn: 1, IDColumn: 2, SizeColumn: 3}
	newCSV := func(r io.Reader) Reader {
		c, err := NewCSVReader(r, csvCfg)
		require.NoError(t, err)
		return c
	}
	cases := map[string]struct {
		r    func() Reader
		want error
	}{
		"oracleGeneral truncated": {func() Reader {
			return NewOracleGeneralReader(bytes.NewReader(oracle[:len(oracle)-5]))
		}, ErrTruncated},
		"oracleGeneral read error": {func() Reader {
			return NewOracleGeneralReader(io.MultiReader(bytes.NewReader(oracle[:24]), &failOnce{err: boom}))
		}, boom},
		"text malformed": {func() Reader {
			return NewTextReader(strings.NewReader("1\nx\n2\n"), TextConfig{})
		}, ErrMalformed},
		"text long line": {func() Reader {
			return NewTextReader(strings.NewReader(strings.Repeat("7", maxLineBytes+1)+"\n3\n"), TextConfig{})
		}, ErrMalformed},
		"text read error": {func() Reader {
			return NewTextReader(io.MultiReader(strings.NewReader("1\n"), &failOnce{err: boom}), TextConfig{})
		}, boom},
		"CSV malformed": {func() Reader {
			return newCSV(strings.NewReader("1,2,3\n1,x,3\n1,2,3\n"))
		}, ErrMalformed},
		"CSV long record": {func() Reader {
			return newCSV(strings.NewReader("1,\"" + strings.Repeat("7", maxLineBytes+1) + "\",3\n1,2,3\n"))
		}, ErrMalformed},
		"CSV read error": {func() Reader {
			return newCSV(io.MultiReader(strings.NewReader("1,2,3\n"), &failOnce{err: boom}))
		}, boom},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := tc.r()
			var q Request
			var err error
			for range 10 {
				if err = r.Next(&q); err != nil {
					break
				}
			}
			require.ErrorIs(t, err, tc.want)
			for i := range 3 {
				again := r.Next(&q)
				require.True(t, again == err, "call %d after the error returned %v, not %v", i+1, again, err)
			}
		})
	}
}

// TestReadersEOFIsSticky: after io.EOF, every reader keeps returning
// io.EOF.
func TestReadersEOFIsSticky(t *testing.T) {
	csv, err := NewCSVReader(strings.NewReader("1\n"), CSVConfig{IDColumn: 1})
	require.NoError(t, err)
	for name, r := range map[string]Reader{
		"oracleGeneral": NewOracleGeneralReader(bytes.NewReader(make([]byte, 24))),
		"text":          NewTextReader(strings.NewReader("1\n"), TextConfig{}),
		"CSV":           csv,
		"slice":         NewSliceReader([]Request{{Size: 1}}),
	} {
		var q Request
		require.NoError(t, r.Next(&q), name)
		for range 3 {
			require.Equal(t, io.EOF, r.Next(&q), name)
		}
	}
}
