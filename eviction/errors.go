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
	// ErrKeyOutOfRange reports an Insert of a key that the policy's
	// [Index] cannot hold: for a [DenseIndex], a negative key or one above
	// its maximum. The default map index takes every key.
	ErrKeyOutOfRange = errors.New("eviction: key outside the index's range")
)
