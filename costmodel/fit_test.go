package costmodel

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFitExactLine(t *testing.T) {
	var s []Sample
	for _, n := range []int64{128, 512, 2048, 8192, 32768, 1 << 20} {
		s = append(s, Sample{ContextTokens: n, Seconds: 3e-7*float64(n) + 0.02})
	}
	r, err := Fit(s)
	require.NoError(t, err)
	require.InEpsilon(t, 3e-7, r.Alpha, 1e-9)
	require.InEpsilon(t, 0.02, r.Beta, 1e-9)
	require.Zero(t, r.NonAttention)
}

func TestFitNoisyRecoversCoefficients(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var s []Sample
	for i := 0; i < 2000; i++ {
		n := rng.Int64N(16384)
		s = append(s, Sample{ContextTokens: n, Seconds: 1e-5*float64(n) + 0.05 + rng.NormFloat64()*1e-3})
	}
	r, err := Fit(s)
	require.NoError(t, err)
	require.InEpsilon(t, 1e-5, r.Alpha, 0.01)
	require.InEpsilon(t, 0.05, r.Beta, 0.02)
}

func TestFitNeedsTwoDistinctPoints(t *testing.T) {
	_, err := Fit(nil)
	require.ErrorIs(t, err, ErrTooFewSamples)
	_, err = Fit([]Sample{{ContextTokens: 10, Seconds: 1}})
	require.ErrorIs(t, err, ErrTooFewSamples)
	_, err = Fit([]Sample{{ContextTokens: 10, Seconds: 1}, {ContextTokens: 10, Seconds: 2}})
	require.ErrorIs(t, err, ErrTooFewSamples)
	require.ErrorContains(t, err, "context length 10")
	r, err := Fit([]Sample{{ContextTokens: 0, Seconds: 1}, {ContextTokens: 10, Seconds: 2}})
	require.NoError(t, err)
	require.InDelta(t, 0.1, r.Alpha, 1e-15)
	require.InDelta(t, 1, r.Beta, 1e-15)
}

func TestFitRejectsBadSamples(t *testing.T) {
	_, err := Fit([]Sample{{ContextTokens: -1, Seconds: 1}, {ContextTokens: 2, Seconds: 1}})
	require.ErrorIs(t, err, ErrInvalidParameter)
	require.ErrorContains(t, err, "sample 0")
	_, err = Fit([]Sample{{ContextTokens: 1, Seconds: 1}, {ContextTokens: 2, Seconds: -1}})
	require.ErrorIs(t, err, ErrInvalidParameter)
	require.ErrorContains(t, err, "sample 1")
}
