package costmodel

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLinkSeconds(t *testing.T) {
	pcie := Link{BytesPerSecond: 25e9, Latency: 10 * time.Microsecond}
	s, err := pcie.Seconds(1 << 20)
	require.NoError(t, err)
	require.InDelta(t, float64(1<<20)/25e9+10e-6, s, 1e-15)

	s, err = pcie.Seconds(0)
	require.NoError(t, err)
	require.InDelta(t, 10e-6, s, 1e-18)
}

func TestLinkRejectsBadInput(t *testing.T) {
	for _, l := range []Link{{}, {BytesPerSecond: -1}, {BytesPerSecond: math.NaN()}, {BytesPerSecond: math.Inf(1)}, {BytesPerSecond: 1, Latency: -1}} {
		_, err := l.Seconds(1)
		require.ErrorIs(t, err, ErrInvalidParameter, "%+v", l)
	}
	_, err := Link{BytesPerSecond: 1}.Seconds(-5)
	require.ErrorIs(t, err, ErrInvalidParameter)
	require.ErrorContains(t, err, "-5")
}

func TestChoose(t *testing.T) {
	require.Equal(t, Offload, Choose(1, 2))
	require.Equal(t, Drop, Choose(2, 1))
	require.Equal(t, Drop, Choose(1, 1), "a tie keeps the CPU tier free")
	require.Equal(t, "offload", Offload.String())
	require.Equal(t, "drop", Drop.String())
	require.Equal(t, "Action(9)", Action(9).String())
}

func TestModelDecide(t *testing.T) {
	m := Model{
		Recompute: Recompute{Alpha: 1e-6, Beta: 1e-3, LayerWeight: Flat, PositionWeight: Flat},
		Link:      Link{BytesPerSecond: 1e9},
	}
	require.NoError(t, m.Validate())
	// 1 MiB over 1 GB/s is about 1.05 ms; recomputing with 4096 tokens of
	// context costs about 5.1 ms: keep it.
	a, err := m.Decide(Unit{ContextTokens: 4096}, 1<<20)
	require.NoError(t, err)
	require.Equal(t, Offload, a)
	// 64 MiB costs about 67 ms to copy back: cheaper to recompute.
	a, err = m.Decide(Unit{ContextTokens: 4096}, 64<<20)
	require.NoError(t, err)
	require.Equal(t, Drop, a)

	_, err = m.Decide(Unit{Layer: 3, Layers: 1}, 1)
	require.ErrorIs(t, err, ErrInvalidUnit)
	_, err = Model{Recompute: m.Recompute}.Decide(Unit{}, 1)
	require.ErrorIs(t, err, ErrInvalidParameter)
	require.ErrorIs(t, Model{Recompute: Recompute{Beta: -1}, Link: m.Link}.Validate(), ErrInvalidParameter)
}
