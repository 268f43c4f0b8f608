package eviction

import "errors"

// Errors returned by policies and constructors in this package. A returned
// error wraps one of these (test with errors.Is) and names the bad value.
var (
	// ErrInvalidEntry reports an Entry that fails [Entry.Validate].
	ErrInvalidEntry = errors.New("eviction: invalid entry")
	// ErrKeyExists reports an Insert of a key that is already tracked.
	ErrKeyExists = errors.New("eviction: key already tracked")
	// ErrInvalidConfig reports a policy constructor given a bad parameter
	// (for example a non-positive capacity or a ratio outside (0, 1)).
	ErrInvalidConfig = errors.New("eviction: invalid config")
)
