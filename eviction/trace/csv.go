package trace

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"
)

// CSVConfig says where a [CSVReader] finds each field. Columns are numbered
// from 1, as in libCacheSim's csv reader parameters (time-col, obj-id-col,
// obj-size-col); 0 means the trace has no such column.
type CSVConfig struct {
	// Delimiter separates fields. Zero means ','. It must be a valid rune
	// other than '"', '\r' and '\n'.
	Delimiter rune
	// HasHeader skips the first record.
	HasHeader bool
	// TimeColumn holds the timestamp: an integer, or a decimal number that
	// is truncated toward zero. Zero means none: Time is then the request's
	// 0-based index.
	TimeColumn int
	// IDColumn holds the object id; it is required (at least 1).
	IDColumn int
	// SizeColumn holds the object size in bytes, a non-negative integer.
	// Zero means none: every Size is 1.
	SizeColumn int
	// HashIDs accepts any non-empty id field as an object name and uses its
	// 64-bit xxhash as the id. When false, ids must be decimal uint64s.
	HashIDs bool
}

func (c CSVConfig) validate() error {
	switch {
	case c.IDColumn < 1:
		return fmt.Errorf("%w: CSV IDColumn %d must be at least 1", ErrInvalidConfig, c.IDColumn)
	case c.TimeColumn < 0:
		return fmt.Errorf("%w: CSV TimeColumn %d is negative", ErrInvalidConfig, c.TimeColumn)
	case c.SizeColumn < 0:
		return fmt.Errorf("%w: CSV SizeColumn %d is negative", ErrInvalidConfig, c.SizeColumn)
	case c.Delimiter == '"' || c.Delimiter == '\r' || c.Delimiter == '\n' ||
		c.Delimiter == utf8.RuneError || c.Delimiter < 0 || !utf8.ValidRune(c.Delimiter):
		return fmt.Errorf("%w: CSV Delimiter %q cannot separate fields", ErrInvalidConfig, c.Delimiter)
	}
	return nil
}

// CSVReader reads a delimited-text trace with the fields in the columns a
// [CSVConfig] names. Quoting follows RFC 4180 (encoding/csv); blank lines
// are skipped; records may have different numbers of fields as long as each
// has the columns asked for. A record is at most 64 KiB, not counting the
// newline that ends it, like a line of a [TextReader]; a quoted field's
// newlines are part of its record. NextAccess is always -1. Create it with
// [NewCSVReader]; it is not safe for concurrent use.
type CSVReader struct {
	r      *csv.Reader
	cfg    CSVConfig
	header bool  // header still to skip
	index  int64 // requests returned so far
	err    error // sticky error
}

// NewCSVReader returns a reader of the CSV trace in r. It returns an error
// wrapping [ErrInvalidConfig] when cfg is unusable.
func NewCSVReader(r io.Reader, cfg CSVConfig) (*CSVReader, error) {
	return newCSVReader(r, cfg, maxLineBytes)
}

// newCSVReader is NewCSVReader with records limited to maxRecord bytes.
func newCSVReader(r io.Reader, cfg CSVConfig, maxRecord int) (*CSVReader, error) {
	if cfg.Delimiter == 0 {
		cfg.Delimiter = ','
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cr := csv.NewReader(newRecordLimiter(r, cfg.Delimiter, maxRecord))
	cr.Comma = cfg.Delimiter
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	return &CSVReader{r: cr, cfg: cfg, header: cfg.HasHeader}, nil
}

// Next reads the next record into *q. It returns io.EOF at the end of the
// input and an error wrapping [ErrMalformed] naming the line when a record
// cannot be parsed, is longer than 64 KiB, lacks a column, or holds a bad id,
// time or size. Errors are sticky: once Next fails (io.EOF included) it
// keeps returning the same error.
func (c *CSVReader) Next(q *Request) error {
	if c.err != nil {
		return c.err
	}
	for {
		rec, err := c.r.Read()
		if err == io.EOF {
			c.err = io.EOF
			return io.EOF
		}
		if err != nil {
			var pe *csv.ParseError
			switch {
			case errors.Is(err, ErrMalformed): // a record over the limit; the error names it
				c.err = err
			case errors.As(err, &pe):
				c.err = fmt.Errorf("%w: %w", ErrMalformed, err)
			default:
				c.err = fmt.Errorf("trace: reading CSV: %w", err)
			}
			return c.err
		}
		line, _ := c.r.FieldPos(0)
		if c.header {
			c.header = false
			continue
		}
		if err := c.parse(rec, line, q); err != nil {
			c.err = err
			return err
		}
		c.index++
		return nil
	}
}

func (c *CSVReader) parse(rec []string, line int, q *Request) error {
	field := func(col int, name string) (string, error) {
		if col > len(rec) {
			return "", fmt.Errorf("%w: line %d has %d fields, no %s column %d", ErrMalformed, line, len(rec), name, col)
		}
		return rec[col-1], nil
	}
	*q = Request{Time: c.index, Size: 1, NextAccess: -1}

	idField, err := field(c.cfg.IDColumn, "id")
	if err != nil {
		return err
	}
	id := strings.TrimSpace(idField)
	if c.cfg.HashIDs {
		if len(id) == 0 {
			return fmt.Errorf("%w: line %d: empty id", ErrMalformed, line)
		}
		q.ID = xxhash.Sum64String(id)
	} else {
		v, ok := parseUint(id)
		if !ok {
			return fmt.Errorf("%w: line %d: id %q is not a decimal uint64", ErrMalformed, line, clip(id))
		}
		q.ID = v
	}

	if c.cfg.TimeColumn > 0 {
		f, err := field(c.cfg.TimeColumn, "time")
		if err != nil {
			return err
		}
		t, ok := parseTime(strings.TrimSpace(f))
		if !ok {
			return fmt.Errorf("%w: line %d: time %q is not a number in the int64 range", ErrMalformed, line, clip(f))
		}
		q.Time = t
	}

	if c.cfg.SizeColumn > 0 {
		f, err := field(c.cfg.SizeColumn, "size")
		if err != nil {
			return err
		}
		s, ok := parseInt(strings.TrimSpace(f))
		if !ok || s < 0 {
			return fmt.Errorf("%w: line %d: size %q is not a non-negative integer", ErrMalformed, line, clip(f))
		}
		q.Size = s
	}
	return nil
}

// parseTime accepts an integer, or a finite decimal number truncated toward
// zero (many CSV traces carry fractional seconds).
func parseTime(b string) (int64, bool) {
	if v, ok := parseInt(b); ok {
		return v, true
	}
	f, err := strconv.ParseFloat(b, 64)
	if err != nil || math.IsNaN(f) || f >= math.MaxInt64 || f < math.MinInt64 {
		return 0, false
	}
	return int64(f), true
}

// recordLimiter sits between a CSVReader's input and encoding/csv, which
// buffers a whole record however long it is (an unterminated quoted field
// runs to the end of the input). It follows the record boundaries the way
// encoding/csv finds them with the options NewCSVReader sets (RFC 4180
// quotes, no lazy quotes, no comments, no trimming of leading space) and
// fails the read that would take a record past limit bytes, newline
// excluded. encoding/csv then never receives more than limit bytes of a
// record, plus what its 4 KiB read buffer holds of the next ones, so its
// record buffers stay within a small multiple of limit whatever the input.
//
// On input that encoding/csv rejects (a bare or stray quote), the two may
// disagree about where a record ends; that does not matter, because
// encoding/csv reports its error on bytes it has already received and reads
// no further.
type recordLimiter struct {
	r     io.Reader
	delim []byte // the delimiter's UTF-8 encoding
	limit int
	n     int   // bytes of the current record so far
	line  int64 // 1-based line of the next byte
	start int64 // line where the current record starts
	err   error // sticky

	// inQuotes is where scanByteDelim (one-byte delimiter) stands.
	inQuotes bool
	// state, match and prepaid are where scan (multi-byte delimiter)
	// stands: the state, the leading bytes of delim seen so far when
	// match > 0, and how many of the bytes still to come of the delim
	// being matched n counts already.
	state   csvState
	match   int
	prepaid int
}

// csvState is where a recordLimiter stands inside a record.
type csvState uint8

const (
	fieldStart csvState = iota // at the start of a field: a quote opens a quoted field
	unquoted                   // inside an unquoted field
	quoted                     // inside a quoted field: newlines and delimiters are data
	quoteEnd                   // just after a quote in a quoted field: it closes the field unless another quote follows
)

func newRecordLimiter(r io.Reader, delim rune, limit int) *recordLimiter {
	return &recordLimiter{r: r, delim: utf8.AppendRune(nil, delim), limit: limit, line: 1, start: 1}
}

// Read reads from the input and scans what it got. When a record goes over
// the limit, it returns the bytes before the one that did with an error
// wrapping ErrMalformed, and that error from then on.
func (l *recordLimiter) Read(p []byte) (int, error) {
	if l.err != nil {
		return 0, l.err
	}
	n, err := l.r.Read(p)
	if cut := l.scanAll(p[:n]); cut >= 0 {
		l.err = fmt.Errorf("%w: record at line %d is longer than %d bytes", ErrMalformed, l.start, l.limit)
		return cut, l.err
	}
	return n, err
}

// scanAll scans p and returns the index of the byte that takes a record
// past the limit, or -1.
func (l *recordLimiter) scanAll(p []byte) int {
	if len(l.delim) == 1 {
		return l.scanByteDelim(p)
	}
	for i, b := range p {
		if !l.scan(b) {
			return i
		}
	}
	return -1
}

// scanByteDelim is scanAll for a one-byte delimiter, the common case, done
// a run at a time with bytes.IndexByte so that the limiter costs little next
// to encoding/csv's own parsing. It does not look at the delimiter at all:
// in a record encoding/csv accepts, a quote only opens a field, closes it
// or is half of an escaped "", so a newline is inside a quoted field exactly
// when an odd number of quotes precede it in the record. (A one-byte
// delimiter cannot be a quote or a line end, so it never matters; a
// multi-byte one does, see scan.)
func (l *recordLimiter) scanByteDelim(p []byte) int {
	limit, n, line, start, inQuotes := l.limit, l.n, l.line, l.start, l.inQuotes
	cut := -1
	next := -1 // index of the next newline at or after i, len(p) if none, -1 if not searched yet
	for i := 0; i < len(p); {
		var k int // bytes p[i:i+k] join the current record
		if inQuotes {
			// Data up to and including the next quote, newlines included.
			k = len(p) - i
			if j := bytes.IndexByte(p[i:], '"'); j >= 0 {
				k = j + 1
			}
			if k > limit-n {
				cut = i + limit - n
				break
			}
			line += int64(bytes.Count(p[i:i+k], newline))
			inQuotes = p[i+k-1] != '"'
		} else {
			if next < i {
				if next = bytes.IndexByte(p[i:], '\n'); next < 0 {
					next = len(p)
				} else {
					next += i
				}
			}
			// Data up to the newline, or up to and including a quote that
			// comes first and opens a quoted field.
			k = next - i
			if j := bytes.IndexByte(p[i:next], '"'); j >= 0 {
				k, inQuotes = j+1, true
			}
			if k > limit-n {
				cut = i + limit - n
				break
			}
		}
		n += k
		i += k
		if !inQuotes && i == next && next < len(p) {
			// The newline ends the record; see scan.
			line++
			start, n = line, 0
			i++
		}
	}
	l.n, l.line, l.start, l.inQuotes = n, line, start, inQuotes
	return cut
}

var newline = []byte{'\n'}

// scan advances over one byte of input whose delimiter is several bytes
// long, and reports whether the current record is still within the limit.
func (l *recordLimiter) scan(b byte) bool {
	if l.state == quoted {
		if b == '"' {
			l.state = quoteEnd
		}
		return l.grow(b)
	}
	if l.match > 0 {
		if b == l.delim[l.match] {
			if l.match++; l.match == len(l.delim) {
				l.match, l.state = 0, fieldStart
			}
			if l.prepaid > 0 {
				l.prepaid--
				return true
			}
			return l.grow(b)
		}
		// The bytes matched were the start of another rune: field data.
		// UTF-8 never starts a rune with a continuation byte, so b cannot
		// be the middle of a delimiter and is scanned afresh.
		l.match, l.prepaid, l.state = 0, 0, unquoted
	}
	switch {
	case b == '\n':
		// Outside quotes a newline ends the record (encoding/csv reads a
		// "\r\n" ending as "\n"; the '\r' counts toward the record, as it
		// does toward a text line). An empty line is an empty record here
		// and skipped by encoding/csv; either way the next record starts on
		// the next line.
		l.line++
		l.start, l.n, l.state = l.line, 0, fieldStart
		return true
	case b == l.delim[0]:
		l.match = 1
		if l.state == quoteEnd {
			// After a closing quote only a quote, the delimiter or a line
			// end is valid, so this is the delimiter. A cut inside it would
			// leave encoding/csv a partial rune after the quote, which it
			// reports as a stray quote instead of the length; counting the
			// delimiter whole puts the cut before it.
			l.prepaid = len(l.delim) - 1
			l.n += l.prepaid
		}
	case b == '"' && (l.state == fieldStart || l.state == quoteEnd):
		l.state = quoted // opens a quoted field, or is the second quote of ""
	default:
		l.state = unquoted
	}
	return l.grow(b)
}

// grow counts one more byte of the current record.
func (l *recordLimiter) grow(b byte) bool {
	if b == '\n' {
		l.line++ // a newline inside a quoted field
	}
	l.n++
	return l.n <= l.limit
}
