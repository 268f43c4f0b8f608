package eviction

import (
	"sync/atomic"
	"time"
)

// Clock tells policies the time, as a monotonic duration since an epoch of
// the clock's choosing. Only differences between two readings of the same
// clock mean anything. Implementations must be safe for concurrent use and
// never go backwards.
type Clock interface {
	Now() time.Duration
}

// SystemClock reads the process's monotonic clock. Create it with
// [NewSystemClock]; it is safe for concurrent use.
type SystemClock struct {
	start time.Time
}

// NewSystemClock returns a clock whose epoch is the moment of the call.
func NewSystemClock() *SystemClock {
	return &SystemClock{start: time.Now()}
}

// Now returns the time elapsed since the clock was created, read from the
// monotonic clock.
func (c *SystemClock) Now() time.Duration {
	return time.Since(c.start)
}

// ManualClock is a clock that moves only when told, for tests and for
// simulations that run on virtual time. The zero ManualClock reads 0 and is
// ready to use; it is safe for concurrent use.
type ManualClock struct {
	now atomic.Int64
}

// Now returns the clock's current reading.
func (c *ManualClock) Now() time.Duration {
	return time.Duration(c.now.Load())
}

// Advance moves the clock forward by d. A negative d is ignored, so the
// clock never goes backwards.
func (c *ManualClock) Advance(d time.Duration) {
	if d > 0 {
		c.now.Add(int64(d))
	}
}

// Set moves the clock to t if t is later than the current reading; an
// earlier t is ignored.
func (c *ManualClock) Set(t time.Duration) {
	for {
		cur := c.now.Load()
		if int64(t) <= cur || c.now.CompareAndSwap(cur, int64(t)) {
			return
		}
	}
}
