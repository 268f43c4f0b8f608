package kvcache

import (
	"testing"

	"github.com/kvtier/kvtier/layout"
	"github.com/stretchr/testify/require"
)

func tinyLayout(t testing.TB, kind layout.Kind, windows []int) *layout.Layout {
	t.Helper()
	m := layout.Model{Name: "tiny", Layers: 2, QueryHeads: 4, KVHeads: 2, HeadDim: 4, ElemBytes: 1, Windows: windows}
	l, err := layout.New(m, kind, 4)
	require.NoError(t, err)
	return l
}

func TestSmokeAcquireAppendRelease(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	c, err := New(Config{Layout: l, GPU: Capacity{Units: 8}, CPU: Capacity{Units: 8}})
	require.NoError(t, err)
	p, err := c.Acquire(Request{Tokens: []uint32{1, 2, 3, 4, 5, 6}})
	require.NoError(t, err)
	require.Equal(t, 4, p.FreshUnits)
	require.Equal(t, []TokenRange{{0, 6}}, p.Compute)
	require.NoError(t, c.checkInvariants())
	p2, err := c.Acquire(Request{Tokens: []uint32{1, 2, 3, 4, 9}})
	require.NoError(t, err)
	require.Equal(t, 2, p2.HitUnits)
	require.Equal(t, 2, p2.FreshUnits)
	require.Equal(t, []TokenRange{{4, 5}}, p2.Compute)
	require.NoError(t, c.checkInvariants())
	_, err = c.Append(p.Seq, 7, 8, 10)
	require.NoError(t, err)
	require.NoError(t, c.checkInvariants())
	require.NoError(t, c.Release(p.Seq))
	require.NoError(t, c.checkInvariants())
	require.NoError(t, c.Release(p2.Seq))
	require.NoError(t, c.checkInvariants())
	st := c.Stats()
	require.Equal(t, int64(0), st.GPU.Pinned)
	require.Equal(t, 2, st.Blocks)
	// Fill the GPU with another prefix: old blocks get offloaded.
	p3, err := c.Acquire(Request{Tokens: []uint32{20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32}})
	require.NoError(t, err)
	require.NoError(t, c.checkInvariants())
	require.Positive(t, p3.OffloadedUnits)
	require.NoError(t, c.Release(p3.Seq))
	p4, err := c.Acquire(Request{Tokens: []uint32{1, 2, 3, 4, 5, 6, 7, 8}})
	require.NoError(t, err)
	require.NoError(t, c.checkInvariants())
	t.Logf("%+v", p4)
	require.Positive(t, p4.OnboardedUnits)
}
