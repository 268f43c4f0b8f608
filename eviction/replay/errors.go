package replay

import "errors"

// Errors returned by this package. A returned error wraps one of these, or
// the trace reader's error (for example trace.ErrMalformed), and names the
// request where it happened.
var (
	// ErrInvalidConfig reports a Config that cannot run: a capacity below
	// 1, a negative tick or time unit, an unknown time source.
	ErrInvalidConfig = errors.New("replay: invalid config")
	// ErrInvalidRequest reports a request with a negative size.
	ErrInvalidRequest = errors.New("replay: invalid request")
	// ErrPolicy reports a policy that broke its contract during the replay:
	// Insert of an absent key failed, Evict found no victim while keys were
	// cached and none is pinned, or Evict returned a key that is not
	// cached.
	ErrPolicy = errors.New("replay: policy misbehaved")
)
