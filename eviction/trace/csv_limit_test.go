package trace

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// endless yields head, then body repeated until n bytes in all, without
// holding them: a huge input costs the test no memory, so the allocation
// measured is the reader's.
type endless struct {
	head, body string
	n, read    int
}

func (e *endless) Read(p []byte) (int, error) {
	if e.read >= e.n {
		return 0, io.EOF
	}
	k := 0
	for k < len(p) && e.read < e.n {
		var b byte
		if e.read < len(e.head) {
			b = e.head[e.read]
		} else {
			b = e.body[(e.read-len(e.head))%len(e.body)]
		}
		p[k] = b
		k++
		e.read++
	}
	return k, nil
}

// allocated returns the bytes f allocates on the heap.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestCSVReaderBoundsRecordMemory feeds records far longer than the limit
// (an unterminated quoted field, one spanning many lines, a long unquoted
// line) and checks that the reader fails with ErrMalformed naming the limit
// and the line, after reading and allocating only a small multiple of the
// limit.
func TestCSVReaderBoundsRecordMemory(t *testing.T) {
	const size = 16 << 20
	cases := map[string]*endless{
		"unterminated quoted field":  {head: "1,2,3\n4,\"", body: "a", n: size},
		"quoted field of many lines": {head: "1,2,3\n4,\"", body: "abc\n", n: size},
		"long unquoted line":         {head: "1,2,3\n4,", body: "5", n: size},
	}
	for name, src := range cases {
		t.Run(name, func(t *testing.T) {
			r, err := NewCSVReader(src, CSVConfig{TimeColumn: 1, IDColumn: 2, SizeColumn: 3})
			require.NoError(t, err)
			var got []Request
			var lerr error
			alloc := allocated(func() { got, lerr = Load(r) })
			t.Logf("read %d bytes, allocated %d bytes: %v", src.read, alloc, lerr)
			require.Less(t, alloc, uint64(16*maxLineBytes), "allocated %d bytes for a %d-byte record", alloc, size)
			require.Less(t, src.read, 2*maxLineBytes, "the reader stops reading soon after the limit")
			require.ErrorIs(t, lerr, ErrMalformed)
			require.ErrorContains(t, lerr, fmt.Sprintf("longer than %d bytes", maxLineBytes))
			require.ErrorContains(t, lerr, "line 2")
			require.Equal(t, []Request{{Time: 1, ID: 2, Size: 3, NextAccess: -1}}, got)
		})
	}
}

// TestCSVReaderRecordLimitIsExact: a record of maxLineBytes bytes (not
// counting its newline, as for a text line) is read; one more byte is too
// many. A quoted field's newlines count, since they are part of the record.
func TestCSVReaderRecordLimitIsExact(t *testing.T) {
	cfg := CSVConfig{IDColumn: 1, SizeColumn: 2}
	pad := func(prefix, suffix string, n int) string {
		return prefix + strings.Repeat("0", n-len(prefix)-len(suffix)) + suffix
	}
	for name, tc := range map[string]struct {
		in string
		ok bool
	}{
		"unquoted at the limit":       {pad("", ",1", maxLineBytes) + "\n7,1\n", true},
		"unquoted over the limit":     {pad("", ",1", maxLineBytes+1) + "\n7,1\n", false},
		"CRLF at the limit":           {pad("", ",1\r", maxLineBytes) + "\n7,1\n", true},
		"last line at the limit":      {"7,1\n" + pad("", ",1", maxLineBytes), true},
		"last line over the limit":    {"7,1\n" + pad("", ",1", maxLineBytes+1), false},
		"quoted lines at the limit":   {"7,1\n" + pad("7,1,\"a\n", "\nb\"", maxLineBytes) + "\n", true},
		"quoted lines over the limit": {"7,1\n" + pad("7,1,\"a\n", "\nb\"", maxLineBytes+1) + "\n", false},
		"many short records":          {strings.Repeat("7,1\n\n", 4*maxLineBytes/5), true},
	} {
		t.Run(name, func(t *testing.T) {
			r, err := NewCSVReader(strings.NewReader(tc.in), cfg)
			require.NoError(t, err)
			_, err = Load(r)
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrMalformed)
			require.ErrorContains(t, err, fmt.Sprintf("longer than %d bytes", maxLineBytes))
		})
	}
}

// TestCSVRecordLimitWideDelimiter: with a delimiter of several bytes, a
// quote after it still opens a quoted field, whose newlines belong to the
// record; a limiter that missed the delimiter would restart its count at
// each of those newlines and let the record grow without bound.
func TestCSVRecordLimitWideDelimiter(t *testing.T) {
	cfg := CSVConfig{Delimiter: '；', IDColumn: 1}
	r, err := newCSVReader(strings.NewReader("1；\"a\nb\nc\nd\ne\"\n2\n"), cfg, 9)
	require.NoError(t, err)
	_, err = Load(r)
	require.ErrorIs(t, err, ErrMalformed)
	require.ErrorContains(t, err, "record at line 1 is longer than 9 bytes")

	r, err = newCSVReader(strings.NewReader("1；\"a\nb\"\n2；x\n"), cfg, 9)
	require.NoError(t, err)
	got, err := Load(r)
	require.NoError(t, err)
	require.Len(t, got, 2)
}
