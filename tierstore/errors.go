package tierstore

import "errors"

// Errors returned by this package and the stores built on it, besides
// kvcache.ErrUnitMissing and kvcache.ErrUnitCorrupt (see Store). Each wraps
// exactly one of them and names the offending value.
var (
	// ErrInvalidConfig reports options a constructor cannot use.
	ErrInvalidConfig = errors.New("tierstore: invalid config")
	// ErrUnavailable reports a store that could not be reached or failed
	// an operation (a network error, a timeout, a full disk). The copies
	// of the batch failed; the store may work again later.
	ErrUnavailable = errors.New("tierstore: store unavailable")
	// ErrClosed reports a call on a closed Engine or store.
	ErrClosed = errors.New("tierstore: closed")
	// ErrNoKey reports a copy to or from a store handed to Engine.Start,
	// which has no unit identity: the cache calls StartKeyed.
	ErrNoKey = errors.New("tierstore: copy to a store without a unit key")
)
