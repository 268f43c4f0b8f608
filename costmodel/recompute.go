package costmodel

import (
	"fmt"
	"math"
)

// Unit describes where a KV-cache unit sits, as far as its recompute cost is
// concerned. The zero Unit has no layer and no position (both weights are 1)
// and no context, so it costs Beta + NonAttention.
type Unit struct {
	// Layer is the unit's layer index, in [0, Layers). It is ignored when
	// Layers is 0 (a unit that spans all layers).
	Layer int
	// Layers is the number of layers of the model, or 0 when the unit holds
	// every layer.
	Layers int
	// Chunk is the unit's position: the index of its token block in the
	// sequence, in [0, Chunks). It is ignored when Chunks is 0.
	Chunk int
	// Chunks is the number of token blocks in the sequence, or 0 when unknown.
	Chunks int
	// ContextTokens is the number of tokens the unit's block attends to when
	// it is recomputed: the tokens before it in the sequence.
	ContextTokens int64
}

// Validate reports whether u is well formed: non-negative counts, Layer in
// [0, Layers) when Layers > 0 and Chunk in [0, Chunks) when Chunks > 0. The
// error wraps [ErrInvalidUnit].
func (u Unit) Validate() error {
	switch {
	case u.Layers < 0:
		return fmt.Errorf("%w: Layers %d is negative", ErrInvalidUnit, u.Layers)
	case u.Layers > 0 && (u.Layer < 0 || u.Layer >= u.Layers):
		return fmt.Errorf("%w: Layer %d is outside [0, %d)", ErrInvalidUnit, u.Layer, u.Layers)
	case u.Chunks < 0:
		return fmt.Errorf("%w: Chunks %d is negative", ErrInvalidUnit, u.Chunks)
	case u.Chunks > 0 && (u.Chunk < 0 || u.Chunk >= u.Chunks):
		return fmt.Errorf("%w: Chunk %d is outside [0, %d)", ErrInvalidUnit, u.Chunk, u.Chunks)
	case u.ContextTokens < 0:
		return fmt.Errorf("%w: ContextTokens %d is negative", ErrInvalidUnit, u.ContextTokens)
	}
	return nil
}

// WeightFunc maps an index among count items (a layer among the model's
// layers, a chunk among a sequence's chunks) to a multiplicative weight. It is
// called only with 0 <= index < count, and must return a finite,
// non-negative weight for every such pair without panicking: a cost model is
// shared by every unit, so a weight that is defined only for some counts is a
// bug waiting for the first unit outside them. [Recompute.Validate] probes a
// weight function at a fixed set of points and reports a bad weight or a
// panic there as an error; [Recompute.Cost] checks every weight it uses and
// reports a bad one as an error, but lets a panic through.
type WeightFunc func(index, count int) float64

// SeedLayerWeight is the default layer weight, (count-index)/count: 1 for the
// first layer, 1/count for the last. It comes from kvtier's seed design, not
// from Pensieve: errors in early layers propagate through every later layer,
// so early layers are dearer to lose.
func SeedLayerWeight(index, count int) float64 {
	return float64(count-index) / float64(count)
}

// SeedPositionWeight is the default position weight, (index+1)/count: 1 for
// the last chunk, 1/count for the first. It comes from kvtier's seed design,
// not from Pensieve.
func SeedPositionWeight(index, count int) float64 {
	return float64(index+1) / float64(count)
}

// Flat is a weight of 1 everywhere. Using it for both weights of a
// [Recompute] gives plain Pensieve.
func Flat(index, count int) float64 { return 1 }

// Recompute is the cost of rebuilding a unit by prefill:
//
//	Cost(u) = (Alpha*u.ContextTokens + Beta + NonAttention) * LayerWeight(u.Layer, u.Layers) * PositionWeight(u.Chunk, u.Chunks)
//
// The linear base is Pensieve's; the two weights are kvtier's seed design
// (see the package documentation). A weight is taken as 1 when its count
// (Layers or Chunks) is 0. The zero Recompute costs nothing and uses the seed
// weights. Recompute is a plain value, safe for concurrent use.
type Recompute struct {
	// Alpha is the attention cost in seconds per context token.
	Alpha float64
	// Beta is the fixed cost in seconds of recomputing one chunk.
	Beta float64
	// NonAttention is the cost in seconds of the non-attention work (MLP,
	// projections) of one chunk.
	NonAttention float64
	// LayerWeight weights a unit by its layer. Nil means [SeedLayerWeight].
	LayerWeight WeightFunc
	// PositionWeight weights a unit by its chunk. Nil means
	// [SeedPositionWeight].
	PositionWeight WeightFunc
}

// probeSmallCounts is the largest count whose every index Validate probes.
const probeSmallCounts = 32

// probeLargeCounts are the counts Validate probes beyond probeSmallCounts,
// at the indices 0, 1, count/2, count-2 and count-1: long sequences of
// chunks, and the ends of the int32 and int ranges, where index arithmetic
// in a weight function overflows if it is going to.
var probeLargeCounts = [...]int{64, 1000, 1 << 16, 1 << 20, math.MaxInt32, math.MaxInt}

// Validate reports whether r can price units: the coefficients are finite
// and non-negative, and each non-nil weight function returns a finite,
// non-negative weight without panicking at every probe point. The probe
// points are every index of every count from 1 to 32, and the indices 0, 1,
// count/2, count-2 and count-1 of the counts 64, 1000, 2^16, 2^20,
// 2^31-1 and math.MaxInt. A weight function that is bad only elsewhere
// passes Validate and is caught by [Recompute.Cost] at use. The error wraps
// [ErrInvalidParameter] and names the coefficient, or the weight function,
// the point and what it returned (or why it panicked).
func (r Recompute) Validate() error {
	if err := r.validateCoefficients(); err != nil {
		return err
	}
	for _, w := range [...]struct {
		name string
		f    WeightFunc
	}{{"LayerWeight", r.LayerWeight}, {"PositionWeight", r.PositionWeight}} {
		if w.f == nil {
			continue // the seed weights are finite and non-negative everywhere
		}
		if err := probeWeight(w.name, w.f); err != nil {
			return err
		}
	}
	return nil
}

// validateCoefficients is the part of Validate that Cost repeats at every
// call: probing the weight functions there would cost hundreds of calls per
// unit.
func (r Recompute) validateCoefficients() error {
	for _, p := range [...]struct {
		name string
		v    float64
	}{{"Alpha", r.Alpha}, {"Beta", r.Beta}, {"NonAttention", r.NonAttention}} {
		if err := checkNonNegative(p.name, p.v); err != nil {
			return err
		}
	}
	return nil
}

// probeWeight calls f at the probe points documented on Validate. A weight
// function is user code run inside the library; a panic at a probe point is
// returned as an error naming that point, so that a bad cost model is
// refused where it is configured rather than crashing whoever validates it.
func probeWeight(name string, f WeightFunc) (err error) {
	var index, count int
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %s(%d, %d) panicked: %v", ErrInvalidParameter, name, index, count, p)
		}
	}()
	for count = 1; count <= probeSmallCounts; count++ {
		for index = 0; index < count; index++ {
			if err := checkWeight(name, f(index, count), index, count); err != nil {
				return err
			}
		}
	}
	for _, count = range probeLargeCounts {
		for _, index = range [...]int{0, 1, count / 2, count - 2, count - 1} {
			if err := checkWeight(name, f(index, count), index, count); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkWeight reports a weight w = name(index, count) that is negative or
// not finite, naming the function, the point and the value.
func checkWeight(name string, w float64, index, count int) error {
	if math.IsNaN(w) || math.IsInf(w, 0) || w < 0 {
		return fmt.Errorf("%w: %s(%d, %d) returned %v; a weight must be finite and non-negative", ErrInvalidParameter, name, index, count, w)
	}
	return nil
}

// Base returns the unweighted cost in seconds of recomputing a chunk that
// attends to contextTokens tokens: Alpha*contextTokens + Beta + NonAttention.
// It is the bare formula: it checks nothing and may return +Inf when the
// terms overflow float64; [Recompute.Cost] reports that as an error.
func (r Recompute) Base(contextTokens int64) float64 {
	return r.Alpha*float64(contextTokens) + r.Beta + r.NonAttention
}

// Cost returns the weighted recompute cost of u in seconds: finite and
// non-negative whenever the error is nil. It returns an error wrapping
// [ErrInvalidUnit] when u is malformed, and one wrapping
// [ErrInvalidParameter] when a coefficient is negative or not finite, when a
// weight function returns a negative or non-finite weight at u's layer or
// chunk (the error names the function, the point and the value), or when the
// cost overflows float64 (the error names the terms).
// Cost checks the coefficients but does not repeat Validate's probe of the
// weight functions; it checks the weights it uses instead. Unlike Validate,
// it does not recover a panic of a weight function: the panic reaches the
// caller unchanged.
func (r Recompute) Cost(u Unit) (float64, error) {
	if err := u.Validate(); err != nil {
		return 0, err
	}
	if err := r.validateCoefficients(); err != nil {
		return 0, err
	}
	c := r.Base(u.ContextTokens)
	if math.IsInf(c, 0) {
		// Checked before weighting: an infinite base times a zero weight
		// would come out NaN.
		return 0, fmt.Errorf("%w: Alpha %v × ContextTokens %d + Beta %v + NonAttention %v overflows float64",
			ErrInvalidParameter, r.Alpha, u.ContextTokens, r.Beta, r.NonAttention)
	}
	if u.Layers > 0 {
		var err error
		if c, err = weigh(c, "LayerWeight", r.LayerWeight, SeedLayerWeight, u.Layer, u.Layers); err != nil {
			return 0, err
		}
	}
	if u.Chunks > 0 {
		var err error
		if c, err = weigh(c, "PositionWeight", r.PositionWeight, SeedPositionWeight, u.Chunk, u.Chunks); err != nil {
			return 0, err
		}
	}
	if c == 0 {
		c = 0 // a -0 coefficient gives -0; callers that key on the bits see one zero
	}
	return c, nil
}

// weigh multiplies the cost c by the weight of f (def when f is nil) at
// (index, count), and reports a bad weight or an overflowing product. A
// panic of f is not recovered here: Cost runs on its caller's hot path, and
// the caller (a cache that contains user code) decides what a panic means.
func weigh(c float64, name string, f, def WeightFunc, index, count int) (float64, error) {
	if f == nil {
		f = def
	}
	w := f(index, count)
	if err := checkWeight(name, w, index, count); err != nil {
		return 0, err
	}
	p := c * w
	if math.IsInf(p, 0) {
		return 0, fmt.Errorf("%w: cost %v × %s(%d, %d) = %v overflows float64", ErrInvalidParameter, c, name, index, count, w)
	}
	return p, nil
}

func checkNonNegative(name string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return fmt.Errorf("%w: %s %v must be finite and non-negative", ErrInvalidParameter, name, v)
	}
	return nil
}
