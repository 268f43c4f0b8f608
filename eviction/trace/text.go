package trace

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/cespare/xxhash/v2"
)

// maxLineBytes bounds one line of a text trace and one record of a CSV trace
// (without the newline that ends it). A longer line or record is reported
// as malformed rather than buffered without limit.
const maxLineBytes = 64 << 10

// TextConfig configures a [TextReader]. The zero value reads decimal ids.
type TextConfig struct {
	// HashIDs accepts any non-blank line as an object name and uses its
	// 64-bit xxhash as the id (libCacheSim's obj_id_is_num=false). When
	// false, every line must be a decimal uint64.
	HashIDs bool
}

// TextReader reads a plain-text trace: one object id per line. Every request
// has Size 1, NextAccess -1 and Time equal to its 0-based index. Leading and
// trailing blanks (spaces, tabs, a Windows '\r') are ignored and blank lines
// are skipped. Create it with [NewTextReader]; it is not safe for concurrent
// use.
type TextReader struct {
	r     *bufio.Reader
	cfg   TextConfig
	line  int64 // 1-based number of the last line read
	index int64 // requests returned so far
	err   error // sticky error
}

// NewTextReader returns a reader of the text trace in r.
func NewTextReader(r io.Reader, cfg TextConfig) *TextReader {
	return &TextReader{r: bufio.NewReaderSize(r, maxLineBytes+1), cfg: cfg}
}

// Next reads the next non-blank line into *q. It returns io.EOF at the end
// of the input and an error wrapping [ErrMalformed] that names the line when
// a line is not a decimal uint64 (without HashIDs) or is longer than 64 KiB.
// Errors are sticky: once Next fails (io.EOF included) it keeps returning
// the same error.
func (t *TextReader) Next(q *Request) error {
	if t.err != nil {
		return t.err
	}
	for {
		raw, err := readLine(t.r)
		if err == io.EOF && len(raw) == 0 {
			t.err = io.EOF
			return io.EOF
		}
		t.line++
		if errors.Is(err, bufio.ErrBufferFull) {
			t.err = fmt.Errorf("%w: line %d is longer than %d bytes", ErrMalformed, t.line, maxLineBytes)
			return t.err
		}
		if err != nil && err != io.EOF {
			t.err = fmt.Errorf("trace: reading line %d: %w", t.line, err)
			return t.err
		}
		field := bytes.TrimSpace(raw)
		if len(field) == 0 {
			if err == io.EOF {
				t.err = io.EOF
				return io.EOF
			}
			continue
		}
		var id uint64
		if t.cfg.HashIDs {
			id = xxhash.Sum64(field)
		} else {
			var ok bool
			if id, ok = parseUint(field); !ok {
				t.err = fmt.Errorf("%w: line %d: id %q is not a decimal uint64", ErrMalformed, t.line, clip(field))
				return t.err
			}
		}
		*q = Request{Time: t.index, ID: id, Size: 1, NextAccess: -1}
		t.index++
		return nil
	}
}

// Line returns the 1-based number of the last line read.
func (t *TextReader) Line() int64 { return t.line }

// readLine returns the next line without its '\n'. At the end of the input
// it returns the last unterminated line (possibly empty) with io.EOF.
func readLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if err == nil {
		return line[:len(line)-1], nil
	}
	return line, err
}

// parseUint parses a decimal uint64 without allocating. It accepts only
// digits (no sign, no underscores) and rejects overflow.
func parseUint[T ~string | ~[]byte](b T) (uint64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var v uint64
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

// parseInt parses a decimal int64 with an optional leading sign.
func parseInt[T ~string | ~[]byte](b T) (int64, bool) {
	neg := false
	if len(b) > 0 && (b[0] == '-' || b[0] == '+') {
		neg = b[0] == '-'
		b = b[1:]
	}
	u, ok := parseUint(b)
	if !ok {
		return 0, false
	}
	if neg {
		if u > 1<<63 {
			return 0, false
		}
		return -int64(u), true // -int64(1<<63) wraps to MinInt64, as wanted
	}
	if u > math.MaxInt64 {
		return 0, false
	}
	return int64(u), true
}

// clip shortens a bad field for an error message.
func clip[T ~string | ~[]byte](b T) T {
	const max = 40
	if len(b) > max {
		return b[:max]
	}
	return b
}
