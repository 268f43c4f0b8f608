package costmodel

import (
	"fmt"
	"math"
)

// Sample is one measurement of a recompute: the context it attended to and
// the seconds it took.
type Sample struct {
	// ContextTokens is the number of tokens the recomputed chunk attended to.
	ContextTokens int64
	// Seconds is the measured recompute time.
	Seconds float64
}

// Fit returns the Recompute whose Alpha and Beta minimise the squared error
// of Alpha*ContextTokens + Beta against the samples (ordinary least squares).
// The constant term absorbs all per-chunk work, so the result has
// NonAttention 0 and the default (seed) weights. Fit returns an error wrapping
// [ErrTooFewSamples] when the samples have fewer than two distinct context
// lengths, and one wrapping [ErrInvalidParameter] when a sample is negative or
// not finite, or when the fit itself is not finite (samples near the float64
// limit overflow the sums). The fitted coefficients are finite whenever the
// error is nil, but may come out negative on noisy data; it is up to the
// caller to judge them.
func Fit(samples []Sample) (Recompute, error) {
	if len(samples) == 0 {
		return Recompute{}, fmt.Errorf("%w: no samples", ErrTooFewSamples)
	}
	// Center the data before summing: it keeps the normal equations well
	// conditioned when context lengths are large (1e6 tokens squared).
	var mx, my float64
	for i, s := range samples {
		if s.ContextTokens < 0 {
			return Recompute{}, fmt.Errorf("%w: sample %d has ContextTokens %d", ErrInvalidParameter, i, s.ContextTokens)
		}
		if err := checkNonNegative(fmt.Sprintf("sample %d Seconds", i), s.Seconds); err != nil {
			return Recompute{}, err
		}
		mx += float64(s.ContextTokens)
		my += s.Seconds
	}
	n := float64(len(samples))
	mx /= n
	my /= n
	var sxx, sxy float64
	for _, s := range samples {
		dx := float64(s.ContextTokens) - mx
		sxx += dx * dx
		sxy += dx * (s.Seconds - my)
	}
	if sxx == 0 || math.IsNaN(sxx) {
		return Recompute{}, fmt.Errorf("%w: %d samples share one context length %d", ErrTooFewSamples, len(samples), samples[0].ContextTokens)
	}
	alpha := sxy / sxx
	beta := my - alpha*mx
	if math.IsNaN(alpha) || math.IsInf(alpha, 0) || math.IsNaN(beta) || math.IsInf(beta, 0) {
		return Recompute{}, fmt.Errorf("%w: fit of %d samples gives Alpha %v, Beta %v, not finite (the samples overflow float64)",
			ErrInvalidParameter, len(samples), alpha, beta)
	}
	return Recompute{Alpha: alpha, Beta: beta}, nil
}
