package svgplot

import (
	"math"
	"strconv"
)

// axis maps data values to pixels along one direction and knows its ticks.
type axis struct {
	lo, hi     float64 // data range
	p0, p1     float64 // pixel range: lo maps to p0, hi to p1
	ticks      []float64
	tickDigits int
}

// niceStep returns a round step (1, 2 or 5 times a power of ten) that cuts
// span into about n intervals, and the decimals a tick label needs.
func niceStep(span float64, n int) (float64, int) {
	raw := span / float64(n)
	exp := math.Floor(math.Log10(raw))
	base := math.Pow(10, exp)
	var step float64
	switch f := raw / base; {
	case f <= 1:
		step = base
	case f <= 2:
		step = 2 * base
	case f <= 5:
		step = 5 * base
	default:
		step = 10 * base
		exp++
	}
	return step, max(0, int(-exp))
}

// newAxis builds an axis over data [dmin, dmax] (or the fixed range r) onto
// pixels [p0, p1]. An automatic range is widened to whole tick steps, so
// the curve never touches a frame it does not need to.
func newAxis(dmin, dmax float64, r Range, p0, p1 float64) axis {
	lo, hi := dmin, dmax
	if !r.auto() {
		lo, hi = r.Min, r.Max
	}
	if lo == hi {
		// One distinct value: give it room on both sides.
		d := math.Max(math.Abs(lo)*0.5, 1)
		lo, hi = lo-d, hi+d
	}
	step, digits := niceStep(hi-lo, 5)
	if r.auto() {
		lo = math.Floor(lo/step) * step
		hi = math.Ceil(hi/step) * step
	}
	a := axis{lo: lo, hi: hi, p0: p0, p1: p1, tickDigits: digits}
	// Ticks are multiples of step inside [lo, hi]; the tolerance absorbs
	// the rounding of repeated additions.
	eps := step * 1e-9
	for t := math.Ceil((lo-eps)/step) * step; t <= hi+eps; t += step {
		a.ticks = append(a.ticks, t)
		if len(a.ticks) > 50 { // unreachable with n=5; a guard against bad floats
			break
		}
	}
	return a
}

// pos maps v to a pixel, clamped to the axis' pixel range.
func (a axis) pos(v float64) float64 {
	f := (v - a.lo) / (a.hi - a.lo)
	f = math.Max(0, math.Min(1, f))
	return a.p0 + f*(a.p1-a.p0)
}

// label formats tick value v.
func (a axis) label(v float64) string {
	s := strconv.FormatFloat(v, 'f', a.tickDigits, 64)
	if s == "-0" || (len(s) > 1 && s[0] == '-' && isZero(s[1:])) {
		s = s[1:]
	}
	return s
}

// isZero reports whether a formatted number is all zeros ("0", "0.00").
func isZero(s string) bool {
	for _, c := range s {
		if c != '0' && c != '.' {
			return false
		}
	}
	return true
}

// num formats a pixel coordinate with one decimal: enough for a screen,
// short enough to keep files small, and deterministic.
func num(v float64) string {
	s := strconv.FormatFloat(v, 'f', 1, 64)
	if s == "-0.0" {
		return "0.0"
	}
	return s
}
