package layout

import (
	"math"
	"math/bits"
)

// The helpers below do int64 arithmetic on non-negative operands and report
// overflow instead of wrapping. Every size in this package goes through them,
// so a size that does not fit in an int64 becomes ErrOverflow, never a
// negative or silently wrapped number.

// mul64 returns a*b for a, b >= 0 and whether it fits in an int64.
func mul64(a, b int64) (int64, bool) {
	if a < 0 || b < 0 {
		return 0, false
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return 0, false
	}
	return int64(lo), true
}

// add64 returns a+b for a, b >= 0 and whether it fits in an int64.
func add64(a, b int64) (int64, bool) {
	if a < 0 || b < 0 {
		return 0, false
	}
	s := a + b
	if s < a {
		return 0, false
	}
	return s, true
}

// product multiplies non-negative factors and reports whether the result
// fits in an int64.
func product(factors ...int64) (int64, bool) {
	p := int64(1)
	for _, f := range factors {
		var ok bool
		if p, ok = mul64(p, f); !ok {
			return 0, false
		}
	}
	return p, true
}

// ceilDiv returns ceil(a/b) for a >= 0, b > 0 without the a+b-1 overflow.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}
