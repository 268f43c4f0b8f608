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
// called only with 0 <= index < count. A weight must be finite and
// non-negative; [Recompute.Cost] reports anything else as an error.
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

// Validate reports whether the coefficients are finite and non-negative. The
// error wraps [ErrInvalidParameter].
func (r Recompute) Validate() error {
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

// Base returns the unweighted cost in seconds of recomputing a chunk that
// attends to contextTokens tokens: Alpha*contextTokens + Beta + NonAttention.
func (r Recompute) Base(contextTokens int64) float64 {
	return r.Alpha*float64(contextTokens) + r.Beta + r.NonAttention
}

// Cost returns the weighted recompute cost of u in seconds. It returns an
// error wrapping [ErrInvalidUnit] when u is malformed and one wrapping
// [ErrInvalidParameter] when a coefficient or a weight is negative or not
// finite.
func (r Recompute) Cost(u Unit) (float64, error) {
	if err := u.Validate(); err != nil {
		return 0, err
	}
	if err := r.Validate(); err != nil {
		return 0, err
	}
	c := r.Base(u.ContextTokens)
	if u.Layers > 0 {
		w := weight(r.LayerWeight, SeedLayerWeight, u.Layer, u.Layers)
		if err := checkNonNegative("layer weight", w); err != nil {
			return 0, err
		}
		c *= w
	}
	if u.Chunks > 0 {
		w := weight(r.PositionWeight, SeedPositionWeight, u.Chunk, u.Chunks)
		if err := checkNonNegative("position weight", w); err != nil {
			return 0, err
		}
		c *= w
	}
	return c, nil
}

func weight(f, def WeightFunc, index, count int) float64 {
	if f == nil {
		f = def
	}
	return f(index, count)
}

func checkNonNegative(name string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return fmt.Errorf("%w: %s %v must be finite and non-negative", ErrInvalidParameter, name, v)
	}
	return nil
}
