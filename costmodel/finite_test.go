package costmodel

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// zeroWeight is a valid weight (finite, non-negative) that turns an
// infinite base cost into NaN if the base is not checked first.
func zeroWeight(int, int) float64 { return 0 }

// TestCostNeverReturnsNonFinite covers inputs whose cost overflows float64:
// each must be an error naming the overflowing terms, not +Inf or NaN with
// a nil error.
func TestCostNeverReturnsNonFinite(t *testing.T) {
	big := func(int, int) float64 { return 1e300 }
	for name, tc := range map[string]struct {
		r    Recompute
		u    Unit
		says []string
	}{
		"alpha times context": {
			Recompute{Alpha: 1e300, LayerWeight: Flat, PositionWeight: Flat},
			Unit{ContextTokens: math.MaxInt64},
			[]string{"Alpha 1e+300", "ContextTokens 9223372036854775807"},
		},
		"infinite base times a zero weight": {
			Recompute{Alpha: 1e300, LayerWeight: zeroWeight},
			Unit{Layers: 2, ContextTokens: math.MaxInt64},
			[]string{"Alpha 1e+300", "ContextTokens 9223372036854775807"},
		},
		"beta plus non-attention": {
			Recompute{Beta: math.MaxFloat64, NonAttention: math.MaxFloat64},
			Unit{},
			[]string{"Beta 1.7976931348623157e+308", "NonAttention 1.7976931348623157e+308"},
		},
		"huge layer weight": {
			Recompute{Beta: 1e300, LayerWeight: big},
			Unit{Layer: 1, Layers: 2},
			[]string{"LayerWeight(1, 2)", "1e+300"},
		},
		"huge position weight": {
			Recompute{Beta: 1e200, LayerWeight: Flat, PositionWeight: big},
			Unit{Layers: 2, Chunk: 3, Chunks: 4},
			[]string{"PositionWeight(3, 4)", "1e+300"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := tc.r.Cost(tc.u)
			require.ErrorIs(t, err, ErrInvalidParameter, "cost %v", c)
			require.Zero(t, c)
			for _, s := range tc.says {
				require.ErrorContains(t, err, s)
			}
			require.ErrorContains(t, err, "costmodel: ")
		})
	}
}

// TestCostIsFiniteOrError sweeps extreme coefficients, weights and units:
// every cost is finite and non-negative (not even -0) or comes with an
// error.
func TestCostIsFiniteOrError(t *testing.T) {
	coefs := []float64{0, math.Copysign(0, -1), 5e-324, 1e-300, 1, 1e300, math.MaxFloat64}
	weights := []WeightFunc{nil, Flat, zeroWeight, func(int, int) float64 { return 1e300 }, func(int, int) float64 { return 5e-324 }}
	units := []Unit{{}, {Layer: 1, Layers: 2, Chunk: 0, Chunks: 3, ContextTokens: math.MaxInt64}, {ContextTokens: 1 << 40}}
	for _, a := range coefs {
		for _, b := range coefs {
			for _, w := range weights {
				for _, u := range units {
					r := Recompute{Alpha: a, Beta: b, NonAttention: b, LayerWeight: w, PositionWeight: w}
					c, err := r.Cost(u)
					if err != nil {
						require.ErrorIs(t, err, ErrInvalidParameter)
						continue
					}
					require.False(t, math.IsNaN(c) || math.IsInf(c, 0) || c < 0 || math.Signbit(c),
						"Alpha %v Beta %v unit %+v: cost %v with a nil error", a, b, u, c)
				}
			}
		}
	}
}

// TestCostNamesTheBadWeightAtUse uses weights that are bad only at points
// Validate does not probe (count 40 is between the exhaustive small counts
// and the large ones), so the check at use is what catches them. The
// error names the function, the point and the value.
func TestCostNamesTheBadWeightAtUse(t *testing.T) {
	nanAt := func(index, count int) float64 {
		if index == 39 && count == 40 {
			return math.NaN()
		}
		return 1
	}
	r := Recompute{Beta: 1, LayerWeight: Flat, PositionWeight: nanAt}
	require.NoError(t, r.Validate())
	_, err := r.Cost(Unit{Chunk: 39, Chunks: 40})
	require.ErrorIs(t, err, ErrInvalidParameter)
	require.ErrorContains(t, err, "PositionWeight(39, 40) returned NaN")

	r = Recompute{Beta: 1, LayerWeight: func(index, count int) float64 { return -float64(index) }}
	_, err = r.Cost(Unit{Layer: 3, Layers: 4})
	require.ErrorIs(t, err, ErrInvalidParameter)
	require.ErrorContains(t, err, "LayerWeight(3, 4) returned -3")
}

// TestCostLetsAWeightPanicThrough: Cost does not recover a panic of a
// weight function at a point the probe missed; the caller sees it as it was
// raised (a cache that runs user code recovers it itself).
func TestCostLetsAWeightPanicThrough(t *testing.T) {
	r := Recompute{Beta: 1, PositionWeight: Flat, LayerWeight: func(index, count int) float64 {
		if count == 40 {
			panic("weight bug")
		}
		return 1
	}}
	require.NoError(t, r.Validate(), "the probe never tries count 40")
	require.PanicsWithValue(t, "weight bug", func() { _, _ = r.Cost(Unit{Layer: 39, Layers: 40}) })
}

// TestValidateProbesWeights: a weight function that is bad anywhere the
// probe looks is rejected by Validate, with the function, the point and
// the value in the error; a panic is an error too.
func TestValidateProbesWeights(t *testing.T) {
	for name, tc := range map[string]struct {
		r    Recompute
		says string
	}{
		"NaN layer weight": {
			Recompute{LayerWeight: func(int, int) float64 { return math.NaN() }},
			"LayerWeight(0, 1) returned NaN",
		},
		"negative position weight at one point": {
			Recompute{PositionWeight: func(index, count int) float64 {
				if index == 3 && count == 10 {
					return -0.5
				}
				return 1
			}},
			"PositionWeight(3, 10) returned -0.5",
		},
		"infinite only at the largest count": {
			Recompute{LayerWeight: func(index, count int) float64 {
				if count == math.MaxInt && index == math.MaxInt-1 {
					return math.Inf(1)
				}
				return 1
			}},
			"LayerWeight(9223372036854775806, 9223372036854775807) returned +Inf",
		},
		"panicking table lookup": {
			Recompute{PositionWeight: func(index, _ int) float64 { return []float64{}[index] }},
			"PositionWeight(0, 1) panicked",
		},
	} {
		t.Run(name, func(t *testing.T) {
			var err error
			require.NotPanics(t, func() { err = tc.r.Validate() })
			require.ErrorIs(t, err, ErrInvalidParameter)
			require.ErrorContains(t, err, tc.says)

			m := Model{Recompute: tc.r, Link: Link{BytesPerSecond: 1}}
			require.NotPanics(t, func() { err = m.Validate() })
			require.ErrorIs(t, err, ErrInvalidParameter, "Model.Validate probes too")
		})
	}
	for _, w := range []WeightFunc{nil, Flat, SeedLayerWeight, SeedPositionWeight, zeroWeight} {
		require.NoError(t, Recompute{LayerWeight: w, PositionWeight: w}.Validate())
	}
}

// TestValidateProbePoints pins the documented probe: every index of every
// count from 1 to 32, and five indices of each large count.
func TestValidateProbePoints(t *testing.T) {
	seen := map[[2]int]bool{}
	record := func(index, count int) float64 {
		seen[[2]int{index, count}] = true
		return 1
	}
	require.NoError(t, Recompute{LayerWeight: record}.Validate())
	for count := 1; count <= 32; count++ {
		for index := 0; index < count; index++ {
			require.True(t, seen[[2]int{index, count}], "(%d, %d) not probed", index, count)
		}
	}
	for _, count := range []int{64, 1000, 1 << 16, 1 << 20, math.MaxInt32, math.MaxInt} {
		for _, index := range []int{0, 1, count / 2, count - 2, count - 1} {
			require.True(t, seen[[2]int{index, count}], "(%d, %d) not probed", index, count)
		}
	}
	for p := range seen {
		require.True(t, p[0] >= 0 && p[0] < p[1], "probe %v outside 0 <= index < count", p)
	}
	require.False(t, seen[[2]int{39, 40}])
}

// TestRetentionIsNeverNaN sweeps extreme costs and inactivities: the value
// is never NaN or negative, and it is +Inf only at inactivity 0 or when the
// quotient leaves the float64 range, where +Inf still orders it right.
func TestRetentionIsNeverNaN(t *testing.T) {
	costs := []float64{0, math.Copysign(0, -1), 5e-324, 1, 1e299, 1e300, math.MaxFloat64}
	durations := []time.Duration{0, 1, time.Microsecond, time.Hour, math.MaxInt64}
	for _, c := range costs {
		for _, d := range durations {
			v, err := Retention(c, d)
			require.NoError(t, err)
			require.False(t, math.IsNaN(v) || v < 0, "Retention(%v, %v) = %v", c, d, v)
			if math.IsInf(v, 1) && d > 0 {
				require.Greater(t, c/math.MaxFloat64, d.Seconds()*(1-1e-15), "Retention(%v, %v) overflowed below the float64 range", c, d)
			}
		}
	}
	v, err := Retention(1e300, time.Nanosecond)
	require.NoError(t, err)
	require.True(t, math.IsInf(v, 1), "1e309 rounds to +Inf, above every finite value: got %v", v)
}

func TestLinkSecondsOverflowIsAnError(t *testing.T) {
	l := Link{BytesPerSecond: 5e-324}
	require.NoError(t, l.Validate())
	s, err := l.Seconds(1 << 40)
	require.ErrorIs(t, err, ErrInvalidParameter, "seconds %v", s)
	require.ErrorContains(t, err, "1099511627776 bytes")
	require.ErrorContains(t, err, "5e-324")

	m := Model{Recompute: Recompute{Beta: 1}, Link: l}
	_, err = m.Decide(Unit{}, 1<<40)
	require.ErrorIs(t, err, ErrInvalidParameter)

	m = Model{Recompute: Recompute{Alpha: 1e300}, Link: Link{BytesPerSecond: 1}}
	a, err := m.Decide(Unit{ContextTokens: math.MaxInt64}, 1)
	require.ErrorIs(t, err, ErrInvalidParameter, "action %v", a)
}

func TestFitOverflowIsAnError(t *testing.T) {
	r, err := Fit([]Sample{{ContextTokens: 0, Seconds: math.MaxFloat64}, {ContextTokens: 1, Seconds: math.MaxFloat64}})
	require.ErrorIs(t, err, ErrInvalidParameter, "fit %+v", r)
	require.ErrorContains(t, err, "not finite")

	_, err = Fit([]Sample{{ContextTokens: 0, Seconds: 0}, {ContextTokens: 1, Seconds: math.Inf(1)}})
	require.ErrorIs(t, err, ErrInvalidParameter)
	require.ErrorContains(t, err, "sample 1 Seconds +Inf")
}
