package costmodel

import (
	"fmt"
	"math"
	"time"
)

// Retention returns Pensieve's retention value of a unit: its cost divided by
// the seconds it has been inactive. A low value marks a good victim: cheap to
// rebuild, or long unused. A unit used this instant (inactive == 0) is worth
// +Inf, so it is kept over anything that has aged. The value is never NaN and
// never negative: a negative inactive time returns an error wrapping
// [ErrNegativeDuration], and a negative or non-finite cost one wrapping
// [ErrInvalidParameter]. The quotient is rounded like any float64 division,
// so a value beyond the float64 range (a cost above about 1.8e299 seconds
// over a nanosecond) is +Inf too: that keeps the order, since such a unit is
// worth more than any finite value, and a caller that must tell it from a
// unit used this instant has inactive to look at.
func Retention(cost float64, inactive time.Duration) (float64, error) {
	if err := checkNonNegative("cost", cost); err != nil {
		return 0, err
	}
	if inactive < 0 {
		return 0, fmt.Errorf("%w: inactive %v", ErrNegativeDuration, inactive)
	}
	if inactive == 0 {
		return math.Inf(1), nil
	}
	return cost / inactive.Seconds(), nil
}
