package flagparse

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// MaxBytes is the largest size Bytes accepts, 4 EiB: far beyond any cache,
// and small enough that a program may add a few sizes without overflow.
const MaxBytes = 1 << 62

// byteUnits are the suffixes Bytes knows, in lower case, each checked
// before any suffix of it ("kib" before "b").
var byteUnits = []struct {
	suffix string
	mult   float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"b", 1},
}

// Bytes parses a size in bytes: a number, possibly fractional, with an
// optional unit, B, binary KiB, MiB, GiB, TiB (powers of 1024) or decimal
// KB, MB, GB, TB (powers of 1000), in any case and with or without a space
// before it: "4096", "128MiB", "1.5 GB". A whole number without a unit is
// read exactly; otherwise the bytes are truncated to an integer. The size
// must be between 1 and MaxBytes. A bad size is an error wrapping ErrSize.
func Bytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	num, mult := t, 1.0
	lower := strings.ToLower(t)
	for _, u := range byteUnits {
		if strings.HasSuffix(lower, u.suffix) {
			num, mult = strings.TrimSpace(t[:len(t)-len(u.suffix)]), u.mult
			break
		}
	}
	if n, err := strconv.ParseInt(num, 10, 64); err == nil && mult == 1 {
		if n < 1 || n > MaxBytes {
			return 0, fmt.Errorf("%w: %q is not between 1 byte and 4 EiB", ErrSize, s)
		}
		return n, nil
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%w: %q is not a number with an optional unit (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)", ErrSize, s)
	}
	if b := v * mult; !(b >= 1 && b <= MaxBytes) {
		return 0, fmt.Errorf("%w: %q is not between 1 byte and 4 EiB", ErrSize, s)
	}
	return int64(v * mult), nil
}
