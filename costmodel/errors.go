package costmodel

import "errors"

// Errors returned by this package. Each returned error wraps exactly one of
// these sentinels (test with errors.Is) and names the offending value.
var (
	// ErrInvalidParameter reports a coefficient, bandwidth, latency or sample
	// that is negative, NaN or infinite; a weight function that returns such
	// a weight (or panics while Validate probes it); or a cost, copy time or
	// fit that overflows float64, which would otherwise come out as +Inf or
	// NaN.
	ErrInvalidParameter = errors.New("costmodel: invalid parameter")
	// ErrInvalidUnit reports a unit whose layer or chunk is out of range, or
	// whose context length is negative.
	ErrInvalidUnit = errors.New("costmodel: invalid unit")
	// ErrNegativeDuration reports an inactivity time below zero, which would
	// mean a unit was used in the future.
	ErrNegativeDuration = errors.New("costmodel: negative duration")
	// ErrTooFewSamples reports a fit attempted with fewer than two distinct
	// context lengths, which cannot determine a line.
	ErrTooFewSamples = errors.New("costmodel: too few samples")
)
