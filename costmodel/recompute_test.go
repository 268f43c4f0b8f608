package costmodel

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// seedExample is the worked example of kvtier's seed design: 2 layers, 2
// chunks of 32 tokens, alpha 0.001, beta 0.01, non-attention 0.005. A chunk's
// context is the tokens before it, so chunk 0 attends to 0 tokens and chunk 1
// to 32.
var seedExample = Recompute{Alpha: 0.001, Beta: 0.01, NonAttention: 0.005}

func seedUnit(layer, chunk int) Unit {
	return Unit{Layer: layer, Layers: 2, Chunk: chunk, Chunks: 2, ContextTokens: int64(32 * chunk)}
}

func TestSeedWorkedExample(t *testing.T) {
	for _, tc := range []struct {
		layer, chunk int
		want         float64
	}{
		{layer: 0, chunk: 0, want: 0.0075},
		{layer: 1, chunk: 0, want: 0.00375},
		{layer: 0, chunk: 1, want: 0.047},
		{layer: 1, chunk: 1, want: 0.0235},
	} {
		got, err := seedExample.Cost(seedUnit(tc.layer, tc.chunk))
		require.NoError(t, err)
		require.InDelta(t, tc.want, got, 1e-15, "layer %d chunk %d", tc.layer, tc.chunk)
	}
}

// TestSeedOrderFollowsNumbers pins the eviction order of the worked example.
// The seed's prose orders the units L1C0, L1C1, L0C1, L0C0, which its own
// numbers contradict; by cost (cheapest, so evicted first, to dearest) they
// are L1C0 (0.00375), L0C0 (0.0075), L1C1 (0.0235), L0C1 (0.047). We follow
// the numbers.
func TestSeedOrderFollowsNumbers(t *testing.T) {
	order := []Unit{seedUnit(1, 0), seedUnit(0, 0), seedUnit(1, 1), seedUnit(0, 1)}
	prev := -1.0
	for _, u := range order {
		c, err := seedExample.Cost(u)
		require.NoError(t, err)
		require.Greater(t, c, prev, "unit %+v", u)
		prev = c
	}
}

func TestFlatIsPlainPensieve(t *testing.T) {
	r := seedExample
	r.LayerWeight, r.PositionWeight = Flat, Flat
	for layer := 0; layer < 2; layer++ {
		for chunk := 0; chunk < 2; chunk++ {
			u := seedUnit(layer, chunk)
			got, err := r.Cost(u)
			require.NoError(t, err)
			require.Equal(t, r.Base(u.ContextTokens), got)
		}
	}
}

func TestCostLinearInContext(t *testing.T) {
	r := Recompute{Alpha: 2e-6, Beta: 1e-3, LayerWeight: Flat, PositionWeight: Flat}
	c1, err := r.Cost(Unit{ContextTokens: 1000})
	require.NoError(t, err)
	c2, err := r.Cost(Unit{ContextTokens: 2000})
	require.NoError(t, err)
	c3, err := r.Cost(Unit{ContextTokens: 3000})
	require.NoError(t, err)
	require.InDelta(t, c2-c1, c3-c2, 1e-15)
	require.InDelta(t, 2e-3, c2-c1, 1e-15)
}

func TestUnitsWithoutLayersOrChunksAreUnweighted(t *testing.T) {
	got, err := seedExample.Cost(Unit{ContextTokens: 32})
	require.NoError(t, err)
	require.InDelta(t, 0.047, got, 1e-15)
}

func TestCostRejectsBadInput(t *testing.T) {
	for name, tc := range map[string]struct {
		r    Recompute
		u    Unit
		want error
	}{
		"layer past end":    {seedExample, Unit{Layer: 2, Layers: 2}, ErrInvalidUnit},
		"negative layer":    {seedExample, Unit{Layer: -1, Layers: 2}, ErrInvalidUnit},
		"negative layers":   {seedExample, Unit{Layers: -2}, ErrInvalidUnit},
		"chunk past end":    {seedExample, Unit{Chunk: 3, Chunks: 3}, ErrInvalidUnit},
		"negative chunks":   {seedExample, Unit{Chunks: -1}, ErrInvalidUnit},
		"negative context":  {seedExample, Unit{ContextTokens: -1}, ErrInvalidUnit},
		"negative alpha":    {Recompute{Alpha: -1}, Unit{}, ErrInvalidParameter},
		"NaN beta":          {Recompute{Beta: math.NaN()}, Unit{}, ErrInvalidParameter},
		"inf non-attention": {Recompute{NonAttention: math.Inf(1)}, Unit{}, ErrInvalidParameter},
		"negative weight": {
			Recompute{Beta: 1, LayerWeight: func(int, int) float64 { return -1 }},
			Unit{Layers: 2}, ErrInvalidParameter,
		},
		"NaN position weight": {
			Recompute{Beta: 1, PositionWeight: func(int, int) float64 { return math.NaN() }},
			Unit{Chunks: 2}, ErrInvalidParameter,
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := tc.r.Cost(tc.u)
			require.ErrorIs(t, err, tc.want)
		})
	}
}

func TestErrorsNameTheBadValue(t *testing.T) {
	_, err := seedExample.Cost(Unit{Layer: 7, Layers: 2})
	require.ErrorContains(t, err, "Layer 7")
	_, err = Recompute{Alpha: -3}.Cost(Unit{})
	require.ErrorContains(t, err, "Alpha -3")
	require.True(t, errors.Is(err, ErrInvalidParameter))
}
