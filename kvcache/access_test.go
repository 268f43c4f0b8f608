package kvcache

import (
	"testing"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/layout"
	"github.com/stretchr/testify/require"
)

// accessCounter is an LRU that counts the Access calls per key.
type accessCounter struct {
	eviction.Policy[UnitID]
	accesses map[UnitID]int
}

func (p *accessCounter) Access(k UnitID) {
	p.accesses[k]++
	p.Policy.Access(k)
}

// TestHitsReachThePolicy: a unit found on the GPU is a hit for the policy
// too (eviction.Policy.Access), for a dense Acquire and a SparseAccess, and
// a failed operation reports none.
func TestHitsReachThePolicy(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	var gp *accessCounter
	factory := func(info PoolInfo) (eviction.Policy[UnitID], error) {
		p := &accessCounter{Policy: eviction.NewLRU[UnitID](), accesses: map[UnitID]int{}}
		if info.Tier == GPU {
			gp = p
		}
		return p, nil
	}
	c, err := New(Config{Layout: l, GPU: Capacity{Units: 6}, GPUPolicy: factory})
	require.NoError(t, err)
	prompt := seqTokens(8, 0)
	a, err := c.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	require.Empty(t, gp.accesses, "fresh units are not hits")
	b, err := c.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	require.Equal(t, 4, b.HitUnits)
	require.Len(t, gp.accesses, 4)
	for _, n := range gp.accesses {
		require.Equal(t, 1, n)
	}
	var res SparseResult
	require.NoError(t, c.SparseAccess(b.Seq, 1, [][]int64{{0}, nil, {1}, nil}, &res))
	require.Equal(t, 2, res.Hits)
	total := 0
	for _, n := range gp.accesses {
		total += n
	}
	require.Equal(t, 6, total)
	require.Equal(t, uint64(6), c.Stats().GPU.Hits)
	// Hits of an Acquire that fails with ErrNoSpace are not reported.
	_, err = c.Acquire(Request{Tokens: append(seqTokens(8, 0), seqTokens(8, 50)...)})
	require.ErrorIs(t, err, ErrNoSpace)
	total = 0
	for _, n := range gp.accesses {
		total += n
	}
	require.Equal(t, 6, total)
	require.NoError(t, c.Release(a.Seq))
	require.NoError(t, c.Release(b.Seq))
}

// TestS3FIFOKeepsAHitBlockThroughAScan: under S3-FIFO a block that was hit
// while in the small queue moves to the main queue and survives a scan of
// one-off blocks, which only churn the small queue. This needs the cache to
// report hits to the policy: S3-FIFO counts them in Access, not in Pin.
func TestS3FIFOKeepsAHitBlockThroughAScan(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil) // 2 units per block
	c, err := New(Config{Layout: l, GPU: Capacity{Units: 20},
		GPUPolicy: S3FIFOFactory(eviction.S3FIFOConfig{MoveToMainThreshold: 1})})
	require.NoError(t, err)
	once := func(base uint32) Plan {
		t.Helper()
		p, err := c.Acquire(Request{Tokens: seqTokens(4, base)})
		require.NoError(t, err)
		require.NoError(t, c.Release(p.Seq))
		return p
	}
	// Fill the GPU and start evicting, so that new units enter the small
	// queue.
	for i := range 11 {
		once(uint32(1000 + 10*i))
	}
	hot := uint32(7)
	require.Equal(t, 2, once(hot).FreshUnits)
	require.Equal(t, 2, once(hot).HitUnits)
	for i := range 20 {
		once(uint32(5000 + 10*i))
	}
	p := once(hot)
	require.Equal(t, 2, p.HitUnits, "the hot block survived the scan")
	require.Zero(t, p.FreshUnits)
}
