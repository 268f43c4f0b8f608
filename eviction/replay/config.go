package replay

import (
	"fmt"
	"time"

	"github.com/kvtier/kvtier/eviction"
)

// TimeSource says what the replay's clock reads during a request.
type TimeSource int

const (
	// VirtualTime moves the clock forward by Tick before every counted
	// request, so that on a clock starting at 0 the n-th request (from 0)
	// runs at (n+1)*Tick: time is the request count, as libCacheSim's
	// virtual time, and every request is at a distinct time.
	VirtualTime TimeSource = iota
	// TraceTime sets the clock to the request's trace timestamp times
	// TimeUnit. Requests with equal timestamps share a time, and a
	// timestamp below an earlier one leaves the clock where it is (a clock
	// never goes backwards).
	TraceTime
)

// String returns "virtual" or "trace".
func (s TimeSource) String() string {
	switch s {
	case VirtualTime:
		return "virtual"
	case TraceTime:
		return "trace"
	}
	return fmt.Sprintf("TimeSource(%d)", int(s))
}

// DefaultTick is the virtual duration of one request when Config.Tick is 0.
const DefaultTick = time.Microsecond

// Config describes the cache a replay simulates.
type Config struct {
	// Capacity is the cache size: bytes, or objects when IgnoreObjectSize
	// is set. It must be at least 1.
	Capacity int64
	// IgnoreObjectSize counts every object as size 1 (libCacheSim's
	// --ignore-obj-size): Capacity is then a number of objects and the
	// byte counts of the Result are request counts.
	IgnoreObjectSize bool
	// Clock, when not nil, is moved before every counted request as Time
	// says. Pass the clock the policy reads. It is only ever moved
	// forward, so a clock that already reads later than the trace stays
	// where it is until the trace catches up.
	Clock *eviction.ManualClock
	// Time chooses what Clock reads: VirtualTime (the default) or
	// TraceTime.
	Time TimeSource
	// Tick is how far the clock moves per request with VirtualTime. Zero
	// means DefaultTick (1µs).
	Tick time.Duration
	// TimeUnit is the duration of one unit of the trace's timestamps with
	// TraceTime. Zero means one second (libCacheSim's oracleGeneral time
	// unit).
	TimeUnit time.Duration
}

func (c Config) withDefaults() (Config, error) {
	if c.Tick == 0 {
		c.Tick = DefaultTick
	}
	if c.TimeUnit == 0 {
		c.TimeUnit = time.Second
	}
	switch {
	case c.Capacity < 1:
		return c, fmt.Errorf("%w: Capacity %d must be at least 1", ErrInvalidConfig, c.Capacity)
	case c.Tick < 0:
		return c, fmt.Errorf("%w: Tick %v is negative", ErrInvalidConfig, c.Tick)
	case c.TimeUnit < 0:
		return c, fmt.Errorf("%w: TimeUnit %v is negative", ErrInvalidConfig, c.TimeUnit)
	case c.Time != VirtualTime && c.Time != TraceTime:
		return c, fmt.Errorf("%w: unknown time source %v", ErrInvalidConfig, c.Time)
	}
	return c, nil
}
