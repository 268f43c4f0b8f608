package costmodel

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRetention(t *testing.T) {
	v, err := Retention(0.5, 2*time.Second)
	require.NoError(t, err)
	require.Equal(t, 0.25, v)

	v, err = Retention(0.5, 0)
	require.NoError(t, err)
	require.True(t, math.IsInf(v, 1), "a unit used this instant is kept: got %v", v)

	v, err = Retention(0, 0)
	require.NoError(t, err)
	require.True(t, math.IsInf(v, 1), "zero inactivity wins over zero cost: got %v", v)

	_, err = Retention(1, -time.Nanosecond)
	require.ErrorIs(t, err, ErrNegativeDuration)
	require.ErrorContains(t, err, "-1ns")

	_, err = Retention(-1, time.Second)
	require.ErrorIs(t, err, ErrInvalidParameter)
}

func TestRetentionFallsWithInactivity(t *testing.T) {
	prev := math.Inf(1)
	for d := time.Millisecond; d < time.Hour; d *= 3 {
		v, err := Retention(1, d)
		require.NoError(t, err)
		require.Less(t, v, prev)
		prev = v
	}
}
