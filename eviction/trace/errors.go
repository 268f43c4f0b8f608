package trace

import "errors"

// Errors returned by this package. A returned error wraps one of these (test
// with errors.Is) and names the bad value and where it was found.
var (
	// ErrMalformed reports a text or CSV record that does not parse: an id
	// that is not a number, a negative size, a missing column.
	ErrMalformed = errors.New("trace: malformed record")
	// ErrTruncated reports a binary trace that ends inside a record.
	ErrTruncated = errors.New("trace: truncated record")
	// ErrInvalidConfig reports a reader configuration that cannot work, such
	// as a CSV id column below 1, or an unknown format name.
	ErrInvalidConfig = errors.New("trace: invalid config")
)
