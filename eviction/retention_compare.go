package eviction

import (
	"math"
	"math/bits"
)

// This file holds the exact arithmetic behind the retention order. Two
// retention values c1/d1 and c2/d2 (cost in seconds, inactivity in
// nanoseconds) are compared by cross-multiplying, c1*d2 against c2*d1, and
// the products are formed exactly in 128 bits: a float64 is m*2^e with a
// 53-bit integer m, and a duration is an integer below 2^63, so m*d fits in
// 116 bits. Rounding never decides an order, which is what lets the kinetic
// tournament and an exhaustive scan agree on every victim.

// splitFloat returns m and e with c == m * 2^e exactly, for a finite c >= 0.
func splitFloat(c float64) (m uint64, e int) {
	b := math.Float64bits(c)
	exp := int(b>>52) & 0x7ff
	m = b & (1<<52 - 1)
	if exp == 0 {
		// Zero or subnormal: no implicit leading bit.
		return m, -1074
	}
	return m | 1<<52, exp - 1075
}

// len128 returns the number of significant bits of hi*2^64 + lo.
func len128(hi, lo uint64) int {
	if hi != 0 {
		return 64 + bits.Len64(hi)
	}
	return bits.Len64(lo)
}

// shl128 shifts hi*2^64 + lo left by s in [0, 128); the caller guarantees
// that no set bit is shifted out.
func shl128(hi, lo uint64, s int) (uint64, uint64) {
	switch {
	case s == 0:
		return hi, lo
	case s >= 64:
		return lo << (s - 64), 0
	default:
		return hi<<s | lo>>(64-s), lo << s
	}
}

// compareScaled returns -1, 0 or +1 as c1*x1 is less than, equal to or
// greater than c2*x2, computed exactly. c1 and c2 must be finite and
// non-negative, x1 and x2 non-negative.
func compareScaled(c1 float64, x1 int64, c2 float64, x2 int64) int {
	// Fast path: each float product is within a relative 2u of the exact
	// one (u = 2^-53: one rounding converting x, one multiplying) as long
	// as it neither underflows nor overflows. Products further apart than
	// that compare the same as the exact ones.
	p1, p2 := c1*float64(x1), c2*float64(x2)
	if p1 >= minFastProduct && p2 >= minFastProduct && p1 <= math.MaxFloat64 && p2 <= math.MaxFloat64 {
		switch {
		case p1 < p2*(1-fastMargin):
			return -1
		case p2 < p1*(1-fastMargin):
			return 1
		}
	}
	return compareScaledExact(c1, x1, c2, x2)
}

// fastMargin is the relative gap beyond which rounded products are trusted:
// 2^-50, four times the worst relative error of two products combined.
const fastMargin = 0x1p-50

// minFastProduct keeps the fast path away from subnormal products, whose
// rounding error is not relative.
const minFastProduct = 0x1p-1000

// compareScaledExact is compareScaled without the fast path.
func compareScaledExact(c1 float64, x1 int64, c2 float64, x2 int64) int {
	m1, e1 := splitFloat(c1)
	m2, e2 := splitFloat(c2)
	h1, l1 := bits.Mul64(m1, uint64(x1))
	h2, l2 := bits.Mul64(m2, uint64(x2))
	z1, z2 := h1|l1 == 0, h2|l2 == 0
	switch {
	case z1 && z2:
		return 0
	case z1:
		return -1
	case z2:
		return 1
	}
	// Compare magnitudes first: the position of the leading bit.
	n1, n2 := len128(h1, l1)+e1, len128(h2, l2)+e2
	if n1 != n2 {
		if n1 < n2 {
			return -1
		}
		return 1
	}
	// Same leading bit: align the exponents. The operand with the larger
	// exponent has the shorter integer part, so shifting it left by the
	// exponent difference brings it to the other's length, at most 128 bits.
	if e1 > e2 {
		h1, l1 = shl128(h1, l1, e1-e2)
	} else if e2 > e1 {
		h2, l2 = shl128(h2, l2, e2-e1)
	}
	switch {
	case h1 != h2:
		if h1 < h2 {
			return -1
		}
		return 1
	case l1 != l2:
		if l1 < l2 {
			return -1
		}
		return 1
	}
	return 0
}
