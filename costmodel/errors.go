package costmodel

import "errors"

// Errors returned by this package. Each returned error wraps exactly one of
// these sentinels (test with errors.Is) and names the offending value.
var (
	// ErrInvalidParameter reports a coefficient, bandwidth or latency that is
	// negative, NaN or infinite.
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
