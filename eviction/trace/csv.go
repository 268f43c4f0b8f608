package trace

import (
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
// has the columns asked for. NextAccess is always -1. Create it with
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
	if cfg.Delimiter == 0 {
		cfg.Delimiter = ','
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cr := csv.NewReader(r)
	cr.Comma = cfg.Delimiter
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	return &CSVReader{r: cr, cfg: cfg, header: cfg.HasHeader}, nil
}

// Next reads the next record into *q. It returns io.EOF at the end of the
// input and an error wrapping [ErrMalformed] naming the line when a record
// cannot be parsed, lacks a column, or holds a bad id, time or size. Errors
// are sticky.
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
			if errors.As(err, &pe) {
				c.err = fmt.Errorf("%w: %w", ErrMalformed, err)
			} else {
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
