package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// Selector decides which MoBA blocks a query head attends to at a decode
// step, besides the current block (the one holding the new token), which
// every head always reads. Implementations may keep state across steps
// (one Selector serves one sequence) and draw from their own random source,
// so the selections of a sequence depend only on the seed.
type Selector interface {
	// Pick appends to dst the earlier blocks query head head of layer
	// layer attends to at this step: k distinct blocks in [0, current),
	// or all of them when current <= k, in ascending order.
	Pick(dst []int32, layer, head, current, k int) []int32
}

// newSelector returns the selector named kind for one sequence of a model
// with the given layers and query heads, drawing from rng.
func newSelector(cfg *config, layers, heads int, rng *rand.Rand) (Selector, error) {
	switch cfg.selector {
	case "uniform":
		return uniform{rng: rng}, nil
	case "sticky":
		return &sticky{rng: rng, p: cfg.stickyP, heads: heads, prev: make([][]int32, layers*heads)}, nil
	case "sink":
		return sink{rng: rng, p: cfg.sinkP}, nil
	}
	return nil, fmt.Errorf("%w: unknown selector %q", errUsage, cfg.selector)
}

// uniform picks k distinct earlier blocks uniformly at random: attention
// with no locality at all, the worst case for a recency cache.
type uniform struct{ rng *rand.Rand }

func (u uniform) Pick(dst []int32, _, _, current, k int) []int32 {
	return sampleRange(dst, u.rng, 0, current, k)
}

// sampleRange appends k distinct values of [lo, hi) (all of them when the
// range is no larger), sorted, by Floyd's algorithm: k draws, no rejection.
func sampleRange(dst []int32, rng *rand.Rand, lo, hi, k int) []int32 {
	n := hi - lo
	start := len(dst)
	if n <= k {
		for b := lo; b < hi; b++ {
			dst = append(dst, int32(b))
		}
		return dst
	}
	for j := n - k; j < n; j++ {
		t := int32(lo + rng.IntN(j+1))
		if slices.Contains(dst[start:], t) {
			t = int32(lo + j)
		}
		dst = append(dst, t)
	}
	slices.Sort(dst[start:])
	return dst
}

// sticky keeps each of a head's previous picks with probability p and
// replaces the others uniformly: attention whose focus drifts slowly, as
// MoBA's gate tends to do between neighbouring tokens.
type sticky struct {
	rng   *rand.Rand
	p     float64
	heads int
	prev  [][]int32 // last picks per (layer, head)
}

func (s *sticky) Pick(dst []int32, layer, head, current, k int) []int32 {
	want := min(k, current)
	start := len(dst)
	prev := s.prev[layer*s.heads+head]
	for _, b := range prev {
		if int(b) < current && len(dst)-start < want && s.rng.Float64() < s.p {
			dst = append(dst, b)
		}
	}
	for len(dst)-start < want {
		b := int32(s.rng.IntN(current))
		if !slices.Contains(dst[start:], b) {
			dst = append(dst, b)
		}
	}
	slices.Sort(dst[start:])
	s.prev[layer*s.heads+head] = append(prev[:0], dst[start:]...)
	return dst
}

// sink picks the first block (the attention sink) with probability p and
// fills the rest uniformly from the other earlier blocks, so the first
// block is read far more often than any other.
type sink struct {
	rng *rand.Rand
	p   float64
}

func (s sink) Pick(dst []int32, _, _, current, k int) []int32 {
	if current == 0 || k == 0 {
		return dst
	}
	if s.rng.Float64() < s.p {
		dst = append(dst, 0)
		return sampleRange(dst, s.rng, 1, current, k-1)
	}
	return sampleRange(dst, s.rng, 1, current, k)
}
