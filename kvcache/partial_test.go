package kvcache

import (
	"bytes"
	"testing"

	"github.com/kvtier/kvtier/costmodel"
	"github.com/kvtier/kvtier/layout"
	"github.com/stretchr/testify/require"
)

// fillBlock writes into every unit of block i of sequence id, on the GPU
// of store, bytes made of mark and the unit's slice.
func fillBlock(t *testing.T, c *Cache, store *MemoryStore, id SeqID, i int, mark byte) {
	t.Helper()
	for sl := range c.Layout().UnitsPerBlock() {
		table, err := c.BlockTable(nil, id, sl)
		require.NoError(t, err)
		buf := store.Bytes(GPU, c.SlicePool(sl), table[i])
		for j := range buf {
			buf[j] = mark + byte(sl)
		}
	}
}

// blockBytes returns the bytes of every unit of block i of sequence id.
func blockBytes(t *testing.T, c *Cache, store *MemoryStore, id SeqID, i int) [][]byte {
	t.Helper()
	var out [][]byte
	for sl := range c.Layout().UnitsPerBlock() {
		table, err := c.BlockTable(nil, id, sl)
		require.NoError(t, err)
		out = append(out, bytes.Clone(store.Bytes(GPU, c.SlicePool(sl), table[i])))
	}
	return out
}

// cachedBlockBytes returns the bytes of the second block of the prompt
// 0..7 that partialCache cached, acquired and released again.
func cachedBlockBytes(t *testing.T, c *Cache, store *MemoryStore) [][]byte {
	t.Helper()
	p, err := c.Acquire(Request{Tokens: seqTokens(8, 0)})
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Release(p.Seq)) }()
	return blockBytes(t, c, store, p.Seq, 1)
}

// partialCache returns a cache with PartialReuse over a MemoryStore (4-token
// blocks, two units per block) that holds the committed two-block prompt
// 0..7, its second block's units filled with mark 0x40.
func partialCache(t *testing.T, cfg Config) (*Cache, *MemoryStore) {
	t.Helper()
	l := tinyLayout(t, layout.PagedLayer, nil)
	if cfg.Tiers == nil {
		cfg.Tiers = GPUAndCPU(Capacity{Units: 16}, Capacity{Units: 16})
	}
	store, err := NewMemoryStore(l, cfg.Tiers)
	require.NoError(t, err)
	cfg.Layout, cfg.Mover, cfg.PartialReuse = l, store, true
	c, err := New(cfg)
	require.NoError(t, err)
	p, err := c.Acquire(Request{Tokens: seqTokens(8, 0)})
	require.NoError(t, err)
	fillBlock(t, c, store, p.Seq, 1, 0x40)
	require.NoError(t, c.Commit(p.Seq, 8))
	require.NoError(t, c.Release(p.Seq))
	return c, store
}

// TestPartialReuseCopiesTheTokensThatAgree: a prompt whose second block
// agrees with the cached one on 2 of its 4 tokens gets a private copy of
// it and computes from its third token; the copy holds the cached bytes.
// Without PartialReuse it computes the block whole.
func TestPartialReuseCopiesTheTokensThatAgree(t *testing.T) {
	c, store := partialCache(t, Config{})
	want := cachedBlockBytes(t, c, store)
	prompt := append(seqTokens(6, 0), 100, 101)
	p, err := c.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	require.Equal(t, 2, p.PartialTokens)
	require.Equal(t, []TokenRange{{6, 8}}, p.Compute)
	require.Equal(t, 6, p.ReusedTokens)
	require.Equal(t, c.Layout().UnitsPerBlock(), p.Copied)
	require.Equal(t, want, blockBytes(t, c, store, p.Seq, 1), "the copy holds the cached block's bytes")
	require.Equal(t, int64(2), c.Stats().PartialTokens)
	// The copy is the sequence's own: writing it leaves the cached block
	// as it was.
	fillBlock(t, c, store, p.Seq, 1, 0x70)
	require.NoError(t, c.Commit(p.Seq, 8))
	require.NoError(t, c.Release(p.Seq))
	require.NoError(t, c.checkInvariants())
	q, err := c.Acquire(Request{Tokens: seqTokens(8, 0)})
	require.NoError(t, err)
	require.Empty(t, q.Compute)
	require.Equal(t, want, blockBytes(t, c, store, q.Seq, 1))
	require.NoError(t, c.Release(q.Seq))

	off, _ := partialCache(t, Config{})
	off.partialReuse = false
	p, err = off.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	require.Zero(t, p.PartialTokens)
	require.Zero(t, p.Copied)
	require.Equal(t, []TokenRange{{4, 8}}, p.Compute)
}

// TestPartialReuseWithComputeLast: a prompt cached whole, with
// ComputeLast, copies the block of its last token up to the token before
// it, and computes that token alone.
func TestPartialReuseWithComputeLast(t *testing.T) {
	c, _ := partialCache(t, Config{})
	p, err := c.Acquire(Request{Tokens: seqTokens(8, 0), ComputeLast: true})
	require.NoError(t, err)
	require.Equal(t, 3, p.PartialTokens)
	require.Equal(t, []TokenRange{{7, 8}}, p.Compute)
	require.NoError(t, c.Release(p.Seq))
	// A prompt ending inside the block that agrees takes every token of
	// it that agrees, and its last one with ComputeLast.
	p, err = c.Acquire(Request{Tokens: seqTokens(6, 0)})
	require.NoError(t, err)
	require.Equal(t, 2, p.PartialTokens)
	require.Empty(t, p.Compute)
	require.NoError(t, c.Release(p.Seq))
	p, err = c.Acquire(Request{Tokens: seqTokens(6, 0), ComputeLast: true})
	require.NoError(t, err)
	require.Equal(t, 1, p.PartialTokens)
	require.Equal(t, []TokenRange{{5, 6}}, p.Compute)
	require.NoError(t, c.Release(p.Seq))
	// A prompt of one token in the block reuses nothing.
	p, err = c.Acquire(Request{Tokens: seqTokens(5, 0), ComputeLast: true})
	require.NoError(t, err)
	require.Zero(t, p.PartialTokens)
	require.Equal(t, []TokenRange{{4, 5}}, p.Compute)
	require.NoError(t, c.Release(p.Seq))
	require.NoError(t, c.checkInvariants())
}

// TestPartialReuseNeedsAWholeBlockWorthCopying: a cached block that lost
// its bytes, or whose load costs more than recomputing the tokens that
// agree, is not copied.
func TestPartialReuseNeedsAWholeBlockWorthCopying(t *testing.T) {
	// Dropped: no CPU tier, and other prompts fill the GPU.
	c, _ := partialCache(t, Config{Tiers: GPUAndCPU(Capacity{Units: 8}, Capacity{})})
	for base := uint32(1000); base < 1016; base += 8 {
		p, err := c.Acquire(Request{Tokens: seqTokens(8, base)})
		require.NoError(t, err)
		finish(t, c, p.Seq)
	}
	p, err := c.Acquire(Request{Tokens: append(seqTokens(6, 0), 100, 101)})
	require.NoError(t, err)
	require.Zero(t, p.PartialTokens)
	require.Zero(t, p.Copied)
	require.NoError(t, c.Release(p.Seq))

	// On the CPU (every victim moved down), behind a link slower than
	// recomputing two tokens; then back on the GPU, where the copy is
	// free.
	slow := GPUAndCPU(Capacity{Units: 8}, Capacity{Units: 16})
	slow[1].Link = costmodel.Link{BytesPerSecond: 1}
	c, _ = partialCache(t, Config{Tiers: slow, Recompute: &costmodel.Recompute{Beta: 1e-3},
		Decider: func(Victim) bool { return true }})
	for base := uint32(1000); base < 1016; base += 8 {
		p, err := c.Acquire(Request{Tokens: seqTokens(8, base)})
		require.NoError(t, err)
		finish(t, c, p.Seq)
	}
	prompt := append(seqTokens(6, 0), 100, 101)
	p, err = c.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	require.Zero(t, p.PartialTokens, "a load of seconds against a recompute of milliseconds")
	require.Equal(t, []TokenRange{{4, 8}}, p.Compute)
	require.NoError(t, c.Release(p.Seq))
	p, err = c.Acquire(Request{Tokens: seqTokens(8, 0)})
	require.NoError(t, err)
	require.NoError(t, c.Release(p.Seq))
	p, err = c.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	require.Equal(t, 2, p.PartialTokens, "on the GPU")
	require.NoError(t, c.Release(p.Seq))
	require.NoError(t, c.checkInvariants())
}

// TestPartialReuseInSteps: an Acquire that runs in steps (see slices.go)
// reuses part of a block as the one-step Acquire does, ComputeLast
// included; its copy holds the cached bytes, Admit predicts it, and the
// source stays whole through the steps before its block's.
func TestPartialReuseInSteps(t *testing.T) {
	c, store := partialCache(t, Config{})
	want := cachedBlockBytes(t, c, store)
	c.sliceUnits = 2 // a block a step
	for _, tc := range []struct {
		prompt      []uint32
		computeLast bool
		partial     int
		compute     []TokenRange
	}{
		{append(seqTokens(6, 0), 100, 101, 102, 103), false, 2, []TokenRange{{6, 10}}},
		{seqTokens(8, 0), true, 3, []TokenRange{{7, 8}}},
		{append(seqTokens(4, 0), 200, 201, 202, 203), false, 0, []TokenRange{{4, 8}}},
		{append(seqTokens(2, 0), 300, 301, 302, 303, 304, 305), false, 2, []TokenRange{{2, 8}}},
	} {
		adm, err := c.Admit(Request{Tokens: tc.prompt, ComputeLast: tc.computeLast})
		require.NoError(t, err)
		p, err := c.Acquire(Request{Tokens: tc.prompt, ComputeLast: tc.computeLast})
		require.NoError(t, err)
		require.Equal(t, tc.partial, p.PartialTokens, "%v", tc.prompt)
		require.Equal(t, tc.compute, p.Compute, "%v", tc.prompt)
		require.Equal(t, adm.ReusedTokens, p.ReusedTokens, "%v", tc.prompt)
		if tc.partial > 0 && len(tc.prompt) > 4 && tc.prompt[4] == 4 {
			require.Equal(t, want, blockBytes(t, c, store, p.Seq, 1))
		}
		require.NoError(t, c.Release(p.Seq))
		require.NoError(t, c.checkInvariants())
	}
}

// TestPartialReuseInStepsHoldsTheSource: a long Acquire whose earlier
// steps evict what the GPU's FIFO holds longest, the source of its partial
// copy first, still copies it: it holds the source from its first steps
// (without the hold the source is evicted, and dropped by a full CPU of
// claimed units). A long Acquire that fails midway lets the source go.
func TestPartialReuseInStepsHoldsTheSource(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	tiers := GPUAndCPU(Capacity{Units: 8}, Capacity{Units: 4})
	for i := range tiers {
		tiers[i].Policy = FIFOPolicy()
	}
	store, err := NewMemoryStore(l, tiers)
	require.NoError(t, err)
	c, err := New(Config{Layout: l, Tiers: tiers, Mover: store, PartialReuse: true})
	require.NoError(t, err)
	p, err := c.Acquire(Request{Tokens: seqTokens(12, 0)})
	require.NoError(t, err)
	fillBlock(t, c, store, p.Seq, 2, 0x50)
	want := blockBytes(t, c, store, p.Seq, 2)
	finish(t, c, p.Seq)
	for _, other := range [][]uint32{seqTokens(4, 1000), seqTokens(8, 2000)} {
		p, err := c.Acquire(Request{Tokens: other})
		require.NoError(t, err)
		finish(t, c, p.Seq)
	}
	// Blocks 0 and 1 are on the CPU (FIFO's first victims), block 2 on
	// the GPU, the oldest there.
	c.sliceUnits = 2
	prompt := append(seqTokens(10, 0), 100, 101)
	adm, err := c.Admit(Request{Tokens: prompt})
	require.NoError(t, err)
	p, err = c.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	require.Equal(t, 2, p.PartialTokens)
	require.Equal(t, adm.ReusedTokens, p.ReusedTokens)
	require.Equal(t, 4, p.Onboarded)
	require.Equal(t, want, blockBytes(t, c, store, p.Seq, 2))
	require.NoError(t, c.Release(p.Seq))
	require.NoError(t, c.checkInvariants())

	// Too long to fit: it fails, and nothing stays pinned or claimed.
	_, err = c.Acquire(Request{Tokens: append(seqTokens(10, 0), seqTokens(40, 500)...)})
	require.ErrorIs(t, err, ErrNoSpace)
	require.NoError(t, c.checkInvariants())
	require.Zero(t, c.Stats().Tiers[0].Pinned)
}
