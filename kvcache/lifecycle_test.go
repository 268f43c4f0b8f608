package kvcache

import (
	"testing"

	"github.com/kvtier/kvtier/layout"
	"github.com/stretchr/testify/require"
)

// lifecycleCache is a paged cache (two units per block) over a MemoryStore,
// with its events.
func lifecycleCache(t *testing.T, gpu, cpu Capacity) (*Cache, *MemoryStore, *[]Event) {
	t.Helper()
	l := tinyLayout(t, layout.PagedLayer, nil)
	store, err := NewMemoryStore(l, GPUAndCPU(gpu, cpu))
	require.NoError(t, err)
	events := &[]Event{}
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(gpu, cpu), Mover: store, Events: func(e Event) { *events = append(*events, e) }})
	require.NoError(t, err)
	return c, store, events
}

// TestDroppedPrefillIsNeverShared reproduces the request a server drops
// before its prefill runs (the forward pass failed, the client went away):
// a second request with the same prompt used to "reuse" blocks whose slots
// held zeros. Nothing a sequence has not committed is ever shared: not
// while it lives, not after Release or Abort.
func TestDroppedPrefillIsNeverShared(t *testing.T) {
	for _, end := range []string{"release", "abort"} {
		t.Run(end, func(t *testing.T) {
			c, _, events := lifecycleCache(t, Capacity{Units: 16}, Capacity{})
			prompt := seqTokens(10, 0) // two full blocks and a partial one
			a, err := c.Acquire(Request{Tokens: prompt})
			require.NoError(t, err)
			b, err := c.Acquire(Request{Tokens: prompt})
			require.NoError(t, err)
			require.Zero(t, b.Hits, "a's blocks are not written yet")
			require.Equal(t, []TokenRange{{0, 10}}, b.Compute)
			require.Equal(t, 8, b.BeingWrittenTokens)
			if end == "abort" {
				require.NoError(t, c.Abort(a.Seq))
				require.Equal(t, uint64(1), c.Stats().Aborted)
			} else {
				require.NoError(t, c.Release(a.Seq))
			}
			require.Empty(t, *events, "no block was ever stored")
			require.Zero(t, c.Stats().Blocks)
			d, err := c.Acquire(Request{Tokens: prompt})
			require.NoError(t, err)
			require.Zero(t, d.Hits)
			require.Equal(t, 8, d.BeingWrittenTokens, "b is writing them now")
			require.NoError(t, c.checkInvariants())
		})
	}
}

// TestChunkedPrefillSharesCommittedChunks: a long prompt computed over
// several steps is shared chunk by chunk, as the server commits each; a
// request arriving meanwhile reuses what is committed and is told how much
// more is being written.
func TestChunkedPrefillSharesCommittedChunks(t *testing.T) {
	c, _, events := lifecycleCache(t, Capacity{Units: 32}, Capacity{})
	prompt := seqTokens(16, 0) // four blocks
	a, err := c.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	require.NoError(t, c.Commit(a.Seq, 6)) // the first chunk, tokens [0, 6), ran
	require.Len(t, *events, 1, "one full block committed")
	require.Equal(t, BlockStored, (*events)[0].Kind)
	b, err := c.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	require.Equal(t, 4, b.ReusedTokens)
	require.Equal(t, []TokenRange{{4, 16}}, b.Compute)
	require.Equal(t, 12, b.BeingWrittenTokens)
	adm, err := c.Admit(Request{Tokens: prompt})
	require.NoError(t, err)
	require.Equal(t, 4, adm.ReusedTokens)
	require.Equal(t, 12, adm.BeingWrittenTokens)
	require.NoError(t, c.Commit(a.Seq, 4), "committing less is a no-op")
	require.NoError(t, c.Commit(a.Seq, 16))
	require.Len(t, *events, 4)
	d, err := c.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	require.Equal(t, 16, d.ReusedTokens)
	require.Zero(t, d.BeingWrittenTokens)
	// b, which computed its own copy, adopts the committed blocks when it
	// commits, freeing its slots.
	used := c.Stats().Tier(GPU).Capacity - c.Stats().Tier(GPU).Free
	require.NoError(t, c.Commit(b.Seq, 16))
	require.Equal(t, used-6, c.Stats().Tier(GPU).Capacity-c.Stats().Tier(GPU).Free)
	require.NoError(t, c.checkInvariants())
	_, err = c.Admit(Request{Tokens: prompt})
	require.NoError(t, err)
	require.ErrorIs(t, c.Commit(a.Seq, 17), ErrOutOfRange)
	require.ErrorIs(t, c.Commit(a.Seq, -1), ErrOutOfRange)
	require.ErrorIs(t, c.Commit(99, 1), ErrUnknownSequence)
}

// TestTruncatedBeforeCommitIsNeverShared: speculative tokens truncated
// before they were committed never reach the tree.
func TestTruncatedBeforeCommitIsNeverShared(t *testing.T) {
	c, _, events := lifecycleCache(t, Capacity{Units: 16}, Capacity{})
	a, err := c.Acquire(Request{Tokens: seqTokens(4, 0)})
	require.NoError(t, err)
	_, err = c.Append(a.Seq, 50, 51, 52, 53) // commits block 0; block 1 is a draft
	require.NoError(t, err)
	require.Len(t, *events, 1)
	_, err = c.Truncate(a.Seq, 3)
	require.NoError(t, err)
	_, err = c.Append(a.Seq, 60, 61, 62) // commits [0, 5): no new full block
	require.NoError(t, err)
	require.Len(t, *events, 1)
	b, err := c.Acquire(Request{Tokens: append(seqTokens(4, 0), 50, 51, 52, 53)})
	require.NoError(t, err)
	require.Equal(t, 4, b.ReusedTokens, "the rejected draft block was never shared")
	require.NoError(t, c.checkInvariants())
}

// TestRecomputeIsPrivateUntilCommitted: a request that recomputes a cached
// block with a dropped unit writes a private copy; until it commits, the
// cached block still lacks the unit for everyone else, and if it is
// aborted the block is as before.
func TestRecomputeIsPrivateUntilCommitted(t *testing.T) {
	c, _, _ := lifecycleCache(t, Capacity{Units: 7}, Capacity{})
	prompt := seqTokens(12, 0) // three blocks, six units
	a, err := c.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	finish(t, c, a.Seq)
	// Under LRU with tail-first release, a later request evicts one unit
	// of the last block; the block stays known, lacking it.
	x, err := c.Acquire(Request{Tokens: seqTokens(4, 100)})
	require.NoError(t, err)
	require.Equal(t, 1, x.Dropped)
	require.NoError(t, c.Abort(x.Seq))
	r, err := c.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	require.Equal(t, []TokenRange{{8, 12}}, r.Compute)
	c.mu.Lock()
	last := c.seqs[r.Seq].blocks[2]
	require.Nil(t, c.units.blk(last).node, "the recompute is a private copy")
	require.GreaterOrEqual(t, c.units.blk(last).twin, int32(0))
	c.mu.Unlock()
	other, err := c.Acquire(Request{Tokens: prompt})
	require.ErrorIs(t, err, ErrNoSpace) // r pins 6 units; one is evictable
	require.Zero(t, other.Seq)
	adm, err := c.Admit(Request{Tokens: prompt})
	require.NoError(t, err)
	require.Equal(t, 8, adm.ReusedTokens, "the third block still lacks its units")
	require.NoError(t, c.Abort(r.Seq))
	adm, err = c.Admit(Request{Tokens: prompt})
	require.NoError(t, err)
	require.Equal(t, 8, adm.ReusedTokens)
	require.NoError(t, c.checkInvariants())
	r, err = c.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	require.NoError(t, c.Commit(r.Seq, 12))
	require.NoError(t, c.checkInvariants())
	adm, err = c.Admit(Request{Tokens: prompt})
	require.NoError(t, err)
	require.Equal(t, 12, adm.ReusedTokens, "committed: restored for everyone")
}

// TestSparseRestoreUndeclaredIsDropped: units a SparseAccess restored into
// a cached block are shared at once (the layer's kernel writes them in the
// same step), but a sequence that ends before declaring them written
// (Commit, Append) drops them again: they may never have been written.
func TestSparseRestoreUndeclaredIsDropped(t *testing.T) {
	l := tinyLayout(t, layout.BSA, nil) // 4 units per block
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: 8}, Capacity{})})
	require.NoError(t, err)
	prompt := seqTokens(8, 0)
	a, err := c.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	finish(t, c, a.Seq)
	// A second prompt evicts block 1 (tail first) and then block 0.
	x, err := c.Acquire(Request{Tokens: seqTokens(4, 100)})
	require.NoError(t, err)
	require.NoError(t, c.Abort(x.Seq))
	s, err := c.Acquire(Request{Tokens: seqTokens(4, 0), Sparse: true})
	require.NoError(t, err)
	require.Equal(t, 4, s.Tokens, "block 0 holds all its units")
	_, err = c.Append(s.Seq, 4, 5, 6, 7) // block 1 refilled: private until committed
	require.NoError(t, err)
	require.NoError(t, c.Commit(s.Seq, 8))
	var res SparseResult
	// Evict block 0's units, then select it: restored.
	y, err := c.Acquire(Request{Tokens: seqTokens(4, 200)})
	require.NoError(t, err)
	require.NoError(t, c.Abort(y.Seq))
	require.NoError(t, c.SparseAccess(s.Seq, byQueryHeads(c.Layout(), 0, [][]int64{{0}, nil, {0}, nil}), &res))
	restored := 0
	for _, u := range res.Units {
		if u.From == Dropped {
			restored++
		}
	}
	require.Equal(t, 2, restored, "layer 0's two heads of block 0")
	held := c.Stats()
	require.NoError(t, c.Abort(s.Seq))
	after := c.Stats()
	require.Equal(t, held.Tier(GPU).Free+2, after.Tier(GPU).Free, "the restored units were dropped")
	require.Equal(t, int64(4), after.Tier(GPU).Cached, "block 1, committed, stays")
	require.NoError(t, c.checkInvariants())
}

// TestTruncatePinsTheWindowOfItsRecompute: a Truncate that moves a
// sliding window back re-pins blocks whose windowed units were evicted; it
// recomputes them, and the recompute of a block reads the window before
// it, so every layer must pin from the window of the first recomputed
// token. Before, Plan.Compute named tokens that the windowed layer's table
// had no slot for (-1).
func TestTruncatePinsTheWindowOfItsRecompute(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, []int{6, 0})                                  // layer 0: window 6; two pools
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: 16}, Capacity{})}) // 8 slots per pool
	require.NoError(t, err)
	s, err := c.Acquire(Request{Tokens: seqTokens(8, 0)})
	require.NoError(t, err)
	_, err = c.Append(s.Seq, seqTokens(8, 100)...)
	require.NoError(t, err)
	_, err = c.Append(s.Seq, 7) // window of token 16: layer 0 unpins blocks 0, 1
	require.NoError(t, err)
	y, err := c.Acquire(Request{Tokens: seqTokens(8, 300)})
	require.NoError(t, err)
	finish(t, c, y.Seq) // cached, used after s's blocks 0 and 1 were
	x, err := c.Acquire(Request{Tokens: seqTokens(12, 500)})
	require.NoError(t, err)
	require.Equal(t, 4, x.Dropped, "layer 0 of s's blocks 0 and 1, both layers of y's block")
	p, err := c.Truncate(s.Seq, 7) // 10 tokens: the window of token 10 starts in block 1
	require.NoError(t, err)
	require.Equal(t, []TokenRange{{0, 8}}, p.Compute, "blocks 0 and 1 lack layer 0: recomputed")
	require.Equal(t, 8, p.RecomputeTokens)
	for sl := range 2 {
		table, err := c.BlockTable(nil, s.Seq, sl)
		require.NoError(t, err)
		require.NotContains(t, table, int32(-1), "slice %d: a slot for every token to compute", sl)
	}
	require.NoError(t, c.checkInvariants())
}

// TestSparseAccessKeep: a SparseAccess with Selection.Keep adds its pins
// to those of the calls before it (a server restoring a unit of layer 1
// reruns the block's tokens through layer 0 meanwhile), leaves their
// restores undeclared, and the next SparseAccess without Keep releases
// them all.
func TestSparseAccessKeep(t *testing.T) {
	l := tinyLayout(t, layout.BSA, nil) // 2 layers x 2 KV heads: 4 units per block
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: 8}, Capacity{})})
	require.NoError(t, err)
	a, err := c.Acquire(Request{Tokens: seqTokens(8, 0)})
	require.NoError(t, err)
	finish(t, c, a.Seq)
	s, err := c.Acquire(Request{Tokens: seqTokens(8, 0), Sparse: true})
	require.NoError(t, err)
	require.Equal(t, 8, s.Tokens)
	// Evict both blocks: whatever SparseAccess selects is restored.
	x, err := c.Acquire(Request{Tokens: seqTokens(8, 100)})
	require.NoError(t, err)
	require.NoError(t, c.Abort(x.Seq))

	pinned := func(block, layer int) bool {
		t.Helper()
		sl, err := l.SliceOf(layer, 0)
		require.NoError(t, err)
		loc, err := c.Locate(s.Seq, block, sl)
		require.NoError(t, err)
		return loc.Pinned
	}
	all := func(b int64) [][]int64 { return [][]int64{{b}, {b}, {b}, {b}} }
	var res SparseResult
	require.NoError(t, c.SparseAccess(s.Seq, byQueryHeads(l, 1, all(1)), &res))
	require.Equal(t, 2, res.Computed, "layer 1 of block 1 is restored")
	keep := byQueryHeads(l, 0, all(1))
	keep.Keep = true
	require.NoError(t, c.SparseAccess(s.Seq, keep, &res))
	require.Equal(t, 2, res.Computed, "layer 0 of block 1 is restored too")
	require.True(t, pinned(1, 1), "layer 1's selection stays pinned")
	require.True(t, pinned(1, 0))
	require.NoError(t, c.checkInvariants())
	keep = byQueryHeads(l, 0, all(1))
	keep.Keep = true
	require.NoError(t, c.SparseAccess(s.Seq, keep, &res), "a unit pinned twice by the sequence")
	require.NoError(t, c.checkInvariants())

	// Ending the sequence before declaring the restores drops all four again.
	held := c.Stats().Tier(GPU)
	require.NoError(t, c.Abort(s.Seq))
	after := c.Stats().Tier(GPU)
	require.Equal(t, held.Free+4, after.Free, "every restore of the kept calls was undeclared")
	require.NoError(t, c.checkInvariants())

	// Without Keep, the next call replaces the pins.
	a, err = c.Acquire(Request{Tokens: seqTokens(8, 0)}) // computed again
	require.NoError(t, err)
	finish(t, c, a.Seq)
	s, err = c.Acquire(Request{Tokens: seqTokens(8, 0), Sparse: true})
	require.NoError(t, err)
	require.Equal(t, 8, s.Tokens)
	require.NoError(t, c.SparseAccess(s.Seq, byQueryHeads(l, 1, all(0)), &res))
	keep = byQueryHeads(l, 0, all(0))
	keep.Keep = true
	require.NoError(t, c.SparseAccess(s.Seq, keep, &res))
	require.NoError(t, c.SparseAccess(s.Seq, byQueryHeads(l, 0, all(1)), &res))
	require.False(t, pinned(0, 1), "the kept pins are released")
	require.False(t, pinned(0, 0))
	require.True(t, pinned(1, 0))
	require.NoError(t, c.checkInvariants())
}
