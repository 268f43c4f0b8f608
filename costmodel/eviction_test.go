package costmodel_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvtier/kvtier/costmodel"
	"github.com/kvtier/kvtier/eviction"
)

// TestEvictionRetentionRejectsNonFiniteCosts checks, from the consumer's
// side, that eviction.Retention no longer stores a NaN or +Inf cost: its
// Insert prices the unit with Recompute.Cost and must get an error.
func TestEvictionRetentionRejectsNonFiniteCosts(t *testing.T) {
	zero := func(int, int) float64 { return 0 }
	for name, cost := range map[string]costmodel.Recompute{
		"+Inf": {Alpha: 1e300, LayerWeight: costmodel.Flat, PositionWeight: costmodel.Flat},
		"NaN":  {Alpha: 1e300, LayerWeight: zero, PositionWeight: costmodel.Flat},
	} {
		t.Run(name, func(t *testing.T) {
			r, err := eviction.NewRetention[int](&eviction.ManualClock{}, cost)
			require.NoError(t, err)
			e := eviction.NewEntry(1)
			e.Unit = costmodel.Unit{Layers: 1, ContextTokens: math.MaxInt64}
			err = r.Insert(1, e)
			require.ErrorIs(t, err, eviction.ErrInvalidEntry)
			require.ErrorIs(t, err, costmodel.ErrInvalidParameter)
			require.Zero(t, r.Len())
		})
	}
}

// TestEvictionNewRetentionProbesWeights: a weight function that is NaN
// everywhere is refused when the policy is built, not at the first Insert.
func TestEvictionNewRetentionProbesWeights(t *testing.T) {
	cost := costmodel.Recompute{Beta: 1, PositionWeight: func(int, int) float64 { return math.NaN() }}
	_, err := eviction.NewRetention[int](&eviction.ManualClock{}, cost)
	require.ErrorIs(t, err, eviction.ErrInvalidConfig)
	require.ErrorIs(t, err, costmodel.ErrInvalidParameter)
	require.ErrorContains(t, err, "PositionWeight(0, 1) returned NaN")
}
