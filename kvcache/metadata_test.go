package kvcache

import (
	"math"
	"testing"

	"github.com/kvtier/kvtier/layout"
	"github.com/kvtier/kvtier/radix"
	"github.com/stretchr/testify/require"
)

// runTailPriority runs prompts that never repeat, each of blocks blocks
// whose last block has priority 100 (a prioritized LRU keeps it), on a GPU
// of gpu one-unit blocks, and returns the cache after n of them. Every other block of a
// prompt is dropped while its tail stays cached: before the budget, the
// tree kept them all (hollow, under a cached tail).
func runTailPriority(t *testing.T, gpu, maxBlocks, blocks, n int) (*Cache, map[uint64]bool) {
	t.Helper()
	l := tinyLayout(t, layout.AllLayers, nil) // one unit per block
	known := map[uint64]bool{}                // the tree as a router sees it
	c, err := New(Config{Layout: l, Tiers: tiersOf(Capacity{Units: int64(gpu)}, Capacity{}, PrioritizedLRUPolicy(), nil), MaxBlocks: maxBlocks, Events: func(e Event) {
		switch e.Kind {
		case BlockStored:
			known[e.Hash] = true
		case BlockRemoved:
			require.True(t, known[e.Hash], "removed before stored")
			delete(known, e.Hash)
		}
	}})
	require.NoError(t, err)
	B := c.BlockTokens()
	for i := range n {
		prompt := seqTokens(blocks*B, uint32(i*blocks*B))
		p, err := c.Acquire(Request{Tokens: prompt, Priorities: &Priorities{Default: 35,
			Ranges: []PriorityRange{{Start: (blocks - 1) * B, End: blocks * B, Priority: 100}}}})
		require.NoError(t, err)
		finish(t, c, p.Seq)
	}
	require.NoError(t, c.checkInvariants())
	return c, known
}

// TestMetadataBudgetBoundsTheTree reproduces unbounded metadata: with tails
// kept by priority, the tree grew by a prompt's depth per prompt (56x the
// GPU's blocks after 1,000 prompts in the report). With a budget it stays
// within it; pruned subtrees are reported to a router as removed.
func TestMetadataBudgetBoundsTheTree(t *testing.T) {
	unbounded, _ := runTailPriority(t, 64, math.MaxInt, 8, 200)
	st := unbounded.Stats()
	require.Greater(t, st.Blocks, 5*64, "without a budget: a prompt's depth per cached tail")
	require.Greater(t, st.HollowBlocks, 4*64)
	require.Zero(t, st.PrunedBlocks)

	c, known := runTailPriority(t, 64, 100, 8, 200)
	st = c.Stats()
	require.LessOrEqual(t, st.Blocks, 100)
	require.Positive(t, st.PrunedBlocks)
	require.Equal(t, st.Stored-st.Removed, uint64(st.Blocks))
	require.Len(t, known, st.Blocks, "a router replaying the events knows exactly the tree")
	require.Less(t, st.MetadataBytes, unbounded.Stats().MetadataBytes/2)
	require.Equal(t, st.BlockRecords, st.Blocks, "no private block is left")

	// The default budget derives from the tiers: here 1024 blocks (twice
	// the GPU's 256, raised to the minimum), against 240 tails of depth 16.
	d, _ := runTailPriority(t, 256, 0, 16, 400)
	require.LessOrEqual(t, d.Stats().Blocks, 1024)
	require.Positive(t, d.Stats().PrunedBlocks)
}

// TestPruningSparesLiveSequences: a block a live sequence references is
// never hollow, so pruning never removes it, even when everything else
// goes and the tree stays over its budget.
func TestPruningSparesLiveSequences(t *testing.T) {
	l := tinyLayout(t, layout.AllLayers, nil)
	c, err := New(Config{Layout: l, Tiers: tiersOf(Capacity{Units: 8}, Capacity{}, FIFOPolicy(), nil), MaxBlocks: 6}) // heads go first: hollow chains
	require.NoError(t, err)
	B := c.BlockTokens()
	x := seqTokens(4*B, 0)
	a, err := c.Acquire(Request{Tokens: x})
	require.NoError(t, err)
	finish(t, c, a.Seq)
	// A sparse sequence references x's blocks without pinning them.
	p, err := c.Acquire(Request{Tokens: x, Sparse: true})
	require.NoError(t, err)
	require.Equal(t, 4*B, p.Tokens)
	for i := range 20 {
		q, err := c.Acquire(Request{Tokens: seqTokens(3*B, uint32(1000+i*3*B))})
		require.NoError(t, err)
		finish(t, c, q.Seq)
	}
	st := c.Stats()
	require.Positive(t, st.PrunedBlocks)
	require.Zero(t, c.Stats().Tier(GPU).Pinned)
	c.mu.Lock()
	nodes, err := c.tree.Match(nil, radix.Keys{}, x, nil)
	c.mu.Unlock()
	require.NoError(t, err)
	require.Len(t, nodes, 4, "x's chain, dropped but referenced, stays known")
	require.NoError(t, c.checkInvariants())
	require.NoError(t, c.Release(p.Seq))
	require.NoError(t, c.checkInvariants())
	require.LessOrEqual(t, c.Stats().Blocks, 6, "released: x's hollow chain is pruned")
}
