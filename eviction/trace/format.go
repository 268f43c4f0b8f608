package trace

import (
	"fmt"
	"os"
	"strings"
)

// Format names a trace file format.
type Format int

// The formats this package reads.
const (
	// OracleGeneral is libCacheSim's oracleGeneral binary format.
	OracleGeneral Format = iota + 1
	// Text is one object id per line.
	Text
	// CSV is delimited text with configurable columns.
	CSV
)

// String returns the name libCacheSim's cachesim uses for the format.
func (f Format) String() string {
	switch f {
	case OracleGeneral:
		return "oracleGeneral"
	case Text:
		return "txt"
	case CSV:
		return "csv"
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

// ParseFormat returns the format named s, case-insensitively:
// "oracleGeneral", "txt" (or "text", "plainTxt") or "csv". An unknown name
// returns an error wrapping [ErrInvalidConfig].
func ParseFormat(s string) (Format, error) {
	switch strings.ToLower(s) {
	case "oraclegeneral":
		return OracleGeneral, nil
	case "txt", "text", "plaintxt":
		return Text, nil
	case "csv":
		return CSV, nil
	}
	return 0, fmt.Errorf("%w: unknown trace format %q (want oracleGeneral, txt or csv)", ErrInvalidConfig, s)
}

// Options configures [OpenFile] for the text formats; OracleGeneral ignores
// it.
type Options struct {
	// CSV gives the columns of a CSV trace.
	CSV CSVConfig
	// HashIDs makes the Text reader hash its lines (see [TextConfig]). For
	// CSV, set CSV.HashIDs.
	HashIDs bool
}

// File is a [Reader] over a trace file opened by [OpenFile]. Close it when
// done. The zero File is not usable, and a File, like every Reader, is not
// safe for concurrent use.
type File struct {
	Reader
	f *os.File
}

// OpenFile opens the trace at path in the given format and returns a
// streaming reader over it. It returns an error wrapping [ErrInvalidConfig]
// for an unknown format or a bad CSV configuration, and the error of
// os.Open when the file cannot be opened.
func OpenFile(path string, format Format, opts Options) (*File, error) {
	switch format {
	case OracleGeneral, Text, CSV:
	default:
		return nil, fmt.Errorf("%w: unknown trace format %d", ErrInvalidConfig, int(format))
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	var r Reader
	switch format {
	case OracleGeneral:
		r = NewOracleGeneralReader(f)
	case Text:
		r = NewTextReader(f, TextConfig{HashIDs: opts.HashIDs})
	case CSV:
		cr, err := NewCSVReader(f, opts.CSV)
		if err != nil {
			f.Close()
			return nil, err
		}
		r = cr
	}
	return &File{Reader: r, f: f}, nil
}

// Close closes the underlying file.
func (f *File) Close() error {
	if err := f.f.Close(); err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	return nil
}
