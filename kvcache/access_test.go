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

// gpuPolicy returns a factory of the policies newPolicy makes and where
// the GPU arena's is once the cache is built: a test's instrumented
// policy, looked at through the GPU's.
func gpuPolicy[P eviction.Policy[UnitID]](newPolicy func() P) (PolicyFactory, *P) {
	gp := new(P)
	return func(info PoolInfo) (eviction.Policy[UnitID], error) {
		p := newPolicy()
		if info.Tier == GPU {
			*gp = p
		}
		return p, nil
	}, gp
}

// gpuAccessCounter returns a factory of accessCounters and where the GPU
// arena's is once the cache is built.
func gpuAccessCounter() (PolicyFactory, **accessCounter) {
	return gpuPolicy(func() *accessCounter {
		return &accessCounter{Policy: eviction.NewLRU[UnitID](), accesses: map[UnitID]int{}}
	})
}

// TestHitsReachThePolicy: a unit found on the GPU is a hit for the policy
// too (eviction.Policy.Access), for a dense Acquire and a SparseAccess, and
// a failed operation reports none.
func TestHitsReachThePolicy(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	factory, gpp := gpuAccessCounter()
	c, err := New(Config{Layout: l, Tiers: tiersOf(Capacity{Units: 6}, Capacity{}, factory, nil)})
	require.NoError(t, err)
	prompt := seqTokens(8, 0)
	a, err := c.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	require.Empty(t, (*gpp).accesses, "fresh units are not hits")
	require.NoError(t, c.Commit(a.Seq, len(prompt))) // the prefill ran
	b, err := c.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	require.Equal(t, 4, b.Hits)
	require.Len(t, (*gpp).accesses, 4)
	for _, n := range (*gpp).accesses {
		require.Equal(t, 1, n)
	}
	var res SparseResult
	require.NoError(t, c.SparseAccess(b.Seq, byQueryHeads(c.Layout(), 1, [][]int64{{0}, nil, {1}, nil}), &res))
	require.Equal(t, 2, res.Hits)
	total := 0
	for _, n := range (*gpp).accesses {
		total += n
	}
	require.Equal(t, 6, total)
	require.Equal(t, uint64(6), c.Stats().Tier(GPU).Hits)
	// Hits of an Acquire that fails with ErrNoSpace are not reported.
	_, err = c.Acquire(Request{Tokens: append(seqTokens(8, 0), seqTokens(8, 50)...)})
	require.ErrorIs(t, err, ErrNoSpace)
	total = 0
	for _, n := range (*gpp).accesses {
		total += n
	}
	require.Equal(t, 6, total)
	finish(t, c, a.Seq)
	finish(t, c, b.Seq)
}

// TestS3FIFOKeepsAHitBlockThroughAScan: under S3-FIFO a block that was hit
// while in the small queue moves to the main queue and survives a scan of
// one-off blocks, which only churn the small queue. This needs the cache to
// report hits to the policy: S3-FIFO counts them in Access, not in Pin.
func TestS3FIFOKeepsAHitBlockThroughAScan(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil) // 2 units per block
	c, err := New(Config{Layout: l, Tiers: tiersOf(Capacity{Units: 20}, Capacity{}, S3FIFOPolicy(eviction.S3FIFOConfig{MoveToMainThreshold: 1}), nil)})
	require.NoError(t, err)
	once := func(base uint32) Plan {
		t.Helper()
		p, err := c.Acquire(Request{Tokens: seqTokens(4, base)})
		require.NoError(t, err)
		finish(t, c, p.Seq)
		return p
	}
	// Fill the GPU and start evicting, so that new units enter the small
	// queue.
	for i := range 11 {
		once(uint32(1000 + 10*i))
	}
	hot := uint32(7)
	require.Equal(t, 2, once(hot).Computed)
	require.Equal(t, 2, once(hot).Hits)
	for i := range 20 {
		once(uint32(5000 + 10*i))
	}
	p := once(hot)
	require.Equal(t, 2, p.Hits, "the hot block survived the scan")
	require.Zero(t, p.Computed)
}

// entryRecorder is an LRU that remembers the last Entry inserted per key.
type entryRecorder struct {
	eviction.Policy[UnitID]
	entries map[UnitID]eviction.Entry
}

func (p *entryRecorder) Insert(k UnitID, e eviction.Entry) error {
	p.entries[k] = e
	return p.Policy.Insert(k, e)
}

// TestPositionWeightCountsThePrompt: a unit's Chunks is the larger of its
// sequence's prompt blocks and its blocks after the call that made it, so
// the blocks of a sparse prompt fed block by block are weighted against the
// whole prompt (not each as the last chunk), a dense prompt's against the
// prompt, and decoded blocks as the latest chunk.
func TestPositionWeightCountsThePrompt(t *testing.T) {
	l := tinyLayout(t, layout.AllLayers, nil) // one unit per block
	factory, gpp := gpuPolicy(func() *entryRecorder {
		return &entryRecorder{Policy: eviction.NewLRU[UnitID](), entries: map[UnitID]eviction.Entry{}}
	})
	c, err := New(Config{Layout: l, Tiers: tiersOf(Capacity{Units: 32}, Capacity{}, factory, nil)})
	require.NoError(t, err)
	gp := *gpp
	chunks := func(seq SeqID, n int) []int {
		var out []int
		for b := range n {
			c.mu.Lock()
			e := gp.entries[c.units.id(c.seqs[seq].blocks[b], 0)]
			c.mu.Unlock()
			require.Equal(t, b, e.Chunk)
			require.Equal(t, int64(4*b), e.ContextTokens)
			out = append(out, e.Chunks)
		}
		return out
	}

	prompt := seqTokens(20, 0) // 5 blocks of 4 tokens
	sp, err := c.Acquire(Request{Tokens: prompt, Sparse: true})
	require.NoError(t, err)
	require.Equal(t, 20, sp.Pending)
	for i := 0; i < 20; i += 4 {
		_, err := c.Append(sp.Seq, prompt[i:i+4]...)
		require.NoError(t, err)
	}
	for i := range 5 { // decode 5 tokens: blocks 5 and 6
		_, err := c.Append(sp.Seq, uint32(100+i))
		require.NoError(t, err)
	}
	require.Equal(t, []int{5, 5, 5, 5, 5, 6, 7}, chunks(sp.Seq, 7))

	d, err := c.Acquire(Request{Tokens: seqTokens(10, 50)}) // 3 blocks
	require.NoError(t, err)
	for i := range 4 { // decode into blocks 2 (partial) and 3
		_, err := c.Append(d.Seq, uint32(200+i))
		require.NoError(t, err)
	}
	require.Equal(t, []int{3, 3, 3, 4}, chunks(d.Seq, 4))

	// A sequence that starts empty and appends its prompt in one call.
	e, err := c.Acquire(Request{})
	require.NoError(t, err)
	_, err = c.Append(e.Seq, seqTokens(12, 300)...)
	require.NoError(t, err)
	require.Equal(t, []int{3, 3, 3}, chunks(e.Seq, 3))
}

// unpinRecorder is an LRU that records the keys it is told to Unpin.
type unpinRecorder struct {
	eviction.Policy[UnitID]
	unpins []UnitID
}

func (p *unpinRecorder) Unpin(k UnitID) {
	p.unpins = append(p.unpins, k)
	p.Policy.Unpin(k)
}

// TestStepPinsReleaseTailFirst: the units a SparseAccess pinned are
// unpinned from the last block to the first, by the next call of the
// sequence and by Release (merged there with its other blocks), so that a
// recency policy evicts a step's selection from its tail.
func TestStepPinsReleaseTailFirst(t *testing.T) {
	l := tinyLayout(t, layout.BSA, nil) // 4 units per block: (layer, KV head)
	factory, gpp := gpuPolicy(func() *unpinRecorder { return &unpinRecorder{Policy: eviction.NewLRU[UnitID]()} })
	c, err := New(Config{Layout: l, Tiers: tiersOf(Capacity{Units: 64}, Capacity{}, factory, nil)})
	require.NoError(t, err)
	gp := *gpp
	prompt := seqTokens(16, 0) // 4 blocks
	p, err := c.Acquire(Request{Tokens: prompt, Sparse: true})
	require.NoError(t, err)
	for i := 0; i < 16; i += 4 {
		_, err := c.Append(p.Seq, prompt[i:i+4]...)
		require.NoError(t, err)
	}
	_, err = c.Append(p.Seq, 99) // block 4, partial: pinned by Append
	require.NoError(t, err)
	// The block index of each unit of the sequence, taken before Release
	// frees its partial block's record.
	index := map[UnitID]int{}
	c.mu.Lock()
	for i, b := range c.seqs[p.Seq].blocks {
		for sl := range c.geom.slices {
			index[c.units.id(b, sl)] = i
		}
	}
	c.mu.Unlock()
	blocksOf := func(us []UnitID) []int {
		var out []int
		for _, u := range us {
			i, ok := index[u]
			require.True(t, ok, "unit %d is not the sequence's", u)
			out = append(out, i)
		}
		return out
	}
	every := [][]int64{{0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}}
	var res SparseResult
	require.NoError(t, c.SparseAccess(p.Seq, byQueryHeads(c.Layout(), 0, every), &res)) // layer 0, both KV heads: 8 units
	require.Equal(t, 8, res.Hits)
	gp.unpins = gp.unpins[:0]
	_, err = c.Append(p.Seq, 100) // still block 4: only the step's pins go
	require.NoError(t, err)
	require.Equal(t, []int{3, 3, 2, 2, 1, 1, 0, 0}, blocksOf(gp.unpins))

	require.NoError(t, c.SparseAccess(p.Seq, byQueryHeads(c.Layout(), 1, every), &res))
	gp.unpins = gp.unpins[:0]
	finish(t, c, p.Seq)
	require.Equal(t, []int{4, 4, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0}, blocksOf(gp.unpins))
}
