package costmodel

import (
	"fmt"
	"math"
	"time"
)

// Link is a copy path between two tiers, for example PCIe between CPU and GPU
// memory. The zero Link is invalid: it has no bandwidth.
type Link struct {
	// BytesPerSecond is the sustained copy bandwidth. It must be positive.
	BytesPerSecond float64
	// Latency is the fixed cost of one copy. It must not be negative.
	Latency time.Duration
}

// Validate reports whether l has a positive finite bandwidth and a
// non-negative latency. The error wraps [ErrInvalidParameter].
func (l Link) Validate() error {
	if math.IsNaN(l.BytesPerSecond) || math.IsInf(l.BytesPerSecond, 0) || l.BytesPerSecond <= 0 {
		return fmt.Errorf("%w: BytesPerSecond %v must be positive and finite", ErrInvalidParameter, l.BytesPerSecond)
	}
	if l.Latency < 0 {
		return fmt.Errorf("%w: Latency %v is negative", ErrInvalidParameter, l.Latency)
	}
	return nil
}

// Seconds returns the time to copy n bytes over l: n/BytesPerSecond +
// Latency, finite and non-negative whenever the error is nil. It returns an
// error wrapping [ErrInvalidParameter] when l is invalid, n is negative, or
// the time overflows float64 (a bandwidth so small, such as a subnormal,
// that n bytes would take more than 1.8e308 seconds).
func (l Link) Seconds(n int64) (float64, error) {
	if err := l.Validate(); err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, fmt.Errorf("%w: byte count %d is negative", ErrInvalidParameter, n)
	}
	s := float64(n)/l.BytesPerSecond + l.Latency.Seconds()
	if math.IsInf(s, 0) {
		return 0, fmt.Errorf("%w: copying %d bytes at BytesPerSecond %v overflows float64", ErrInvalidParameter, n, l.BytesPerSecond)
	}
	return s, nil
}

// Action is what to do with a unit that leaves the GPU.
type Action int

const (
	// Drop frees the unit's bytes; it is recomputed if needed again.
	Drop Action = iota
	// Offload copies the unit to CPU memory, to be copied back if needed.
	Offload
)

// String returns "drop" or "offload".
func (a Action) String() string {
	switch a {
	case Drop:
		return "drop"
	case Offload:
		return "offload"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Choose compares the two ways of getting a unit back and returns [Offload]
// when copying it back (transferSeconds) is strictly cheaper than recomputing
// it (recomputeSeconds), and [Drop] otherwise. Only the way back is counted:
// the offload copy itself runs off the critical path of the request that will
// need the unit again, while the copy back or the recompute is on it.
// A NaN on either side compares false, so it gives [Drop]; [Model.Decide]
// never passes one.
func Choose(transferSeconds, recomputeSeconds float64) Action {
	if transferSeconds < recomputeSeconds {
		return Offload
	}
	return Drop
}

// Model joins a recompute cost and the link units travel over when they are
// offloaded and onboarded. It is a plain value, safe for concurrent use.
type Model struct {
	// Recompute is the cost of rebuilding a unit by prefill.
	Recompute Recompute
	// Link is the path a unit is offloaded and onboarded over.
	Link Link
}

// Validate reports whether both parts of m are valid: [Recompute.Validate]
// (which probes the weight functions) and [Link.Validate].
func (m Model) Validate() error {
	if err := m.Recompute.Validate(); err != nil {
		return err
	}
	return m.Link.Validate()
}

// Decide returns whether a unit of the given size and position should be
// offloaded or dropped when it leaves the GPU: [Choose] applied to the time
// to copy bytes over m.Link and the recompute cost of u. It returns [Drop] and
// the error of [Link.Seconds] or [Recompute.Cost] when either cannot be
// computed as a finite number of seconds, so no NaN or infinity decides.
func (m Model) Decide(u Unit, bytes int64) (Action, error) {
	t, err := m.Link.Seconds(bytes)
	if err != nil {
		return Drop, err
	}
	c, err := m.Recompute.Cost(u)
	if err != nil {
		return Drop, err
	}
	return Choose(t, c), nil
}
