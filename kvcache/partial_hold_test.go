package kvcache

import (
	"testing"

	"github.com/kvtier/kvtier/layout"
	"github.com/stretchr/testify/require"
)

// longAcquireWithSource builds: X holds the committed prompt 0..7 (blocks 0
// and 1, block 1 a leaf only X references); Y is a long Acquire whose
// second block agrees with X's block 1 on 2 tokens. hook runs once, between
// two of Y's steps, once Y's claimSource pinned the source.
func longAcquireWithSource(t *testing.T, hook func(c *Cache, x SeqID, src int32)) (*Cache, Plan, error) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	tiers := GPUAndCPU(Capacity{Units: 32}, Capacity{Units: 32})
	store, err := NewMemoryStore(l, tiers)
	require.NoError(t, err)
	c, err := New(Config{Layout: l, Tiers: tiers, Mover: store, PartialReuse: true})
	require.NoError(t, err)
	x, err := c.Acquire(Request{Tokens: seqTokens(8, 0)})
	require.NoError(t, err)
	require.NoError(t, c.Commit(x.Seq, 8))
	src := c.seqs[x.Seq].blocks[1]
	c.sliceUnits = 2 // a block a step: Y runs in steps
	fired := false
	c.afterStep = func(call string) {
		if fired || call != "Acquire" {
			return
		}
		if c.units.of(c.units.id(src, 0)).pins < 2 {
			return // claimSource has not run yet
		}
		fired = true
		saved := c.afterStep
		c.afterStep = nil
		hook(c, x.Seq, src)
		c.afterStep = saved
	}
	prompt := append(seqTokens(6, 0), 100, 101, 102, 103, 104, 105)
	p, err := c.Acquire(Request{Tokens: prompt})
	c.afterStep = nil
	require.True(t, fired, "the hook never ran")
	return c, p, err
}

// TestPartialSourceTruncatedBetweenSteps: between Y's claimSource and the
// step that places its block 1, X, the source's only other user, truncates
// into it and is released. Y's reference makes the Truncate copy on write
// (the source stays in the tree) and keeps the record: Y still copies it,
// and every pin count is exact after Y.
func TestPartialSourceTruncatedBetweenSteps(t *testing.T) {
	c, p, err := longAcquireWithSource(t, func(c *Cache, x SeqID, src int32) {
		_, err := c.Truncate(x, 2)
		require.NoError(t, err)
		require.NotNil(t, c.units.blk(src).node, "the source, referenced by Y, was copied on write, not taken out of the tree")
		require.NoError(t, c.Release(x))
	})
	require.NoError(t, err)
	require.Equal(t, 2, p.PartialTokens)
	require.NoError(t, c.checkInvariants())
	require.NoError(t, c.Release(p.Seq))
	require.NoError(t, c.checkInvariants())
}

// TestPartialSourceRecordKeptBetweenSteps: the same, and another sequence
// Z acquires a block before Y's place step: Z's block never gets the
// source's record, so Y's unpins of the source leave Z's pins alone.
func TestPartialSourceRecordKeptBetweenSteps(t *testing.T) {
	var z SeqID
	var zsrc int32
	c, p, err := longAcquireWithSource(t, func(c *Cache, x SeqID, src int32) {
		z, zsrc = truncateAndTakeRecord(t, c, x)
		require.NotEqual(t, src, zsrc, "the source's record, referenced, is not reused")
	})
	require.NoError(t, err)
	t.Logf("after Y: Z's unit pins %d", c.units.of(c.units.id(zsrc, 0)).pins)
	require.Equal(t, int32(1), int32(c.units.of(c.units.id(zsrc, 0)).pins), "Z still pins its unit once")
	require.NoError(t, c.checkInvariants())
	require.NoError(t, c.Release(p.Seq))
	require.NoError(t, c.Release(z))
	require.NoError(t, c.checkInvariants())
}

// TestPartialSourceHoldKeepsPinsExact: the same, seen as a caller would
// see a wrong unpin (live units counted evictable, then an Acquire that
// passes the capacity check, finds no victim and poisons the cache): with
// every GPU unit pinned by a live sequence, an Acquire fails with
// ErrNoSpace.
func TestPartialSourceHoldKeepsPinsExact(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	tiers := GPUAndCPU(Capacity{Units: 16}, Capacity{})
	store, err := NewMemoryStore(l, tiers)
	require.NoError(t, err)
	c, err := New(Config{Layout: l, Tiers: tiers, Mover: store, PartialReuse: true})
	require.NoError(t, err)
	x, err := c.Acquire(Request{Tokens: seqTokens(8, 0)})
	require.NoError(t, err)
	require.NoError(t, c.Commit(x.Seq, 8))
	src := c.seqs[x.Seq].blocks[1]
	c.sliceUnits = 2
	fired := false
	c.afterStep = func(call string) {
		if fired || call != "Acquire" || c.units.of(c.units.id(src, 0)).pins < 2 {
			return
		}
		fired = true
		c.afterStep = nil
		_, err := c.Truncate(x.Seq, 2)
		require.NoError(t, err)
		require.NoError(t, c.Release(x.Seq))
		_, err = c.Acquire(Request{Tokens: seqTokens(4, 5000)}) // Z: 2 units, live
		require.NoError(t, err)
	}
	y, err := c.Acquire(Request{Tokens: append(seqTokens(6, 0), 100, 101, 102, 103, 104, 105)})
	require.NoError(t, err)
	require.True(t, fired)
	require.NoError(t, c.Release(y.Seq))
	c.sliceUnits = defaultSliceUnits
	// W pins the 14 other units; Z pins 2. Nothing is evictable.
	w, err := c.Acquire(Request{Tokens: seqTokens(28, 20000)})
	require.NoError(t, err)
	_ = w
	adm, err := c.Admit(Request{Tokens: seqTokens(4, 30000)})
	require.NoError(t, err)
	t.Logf("Admit with every GPU unit pinned by a live sequence: %+v", adm)
	_, err = c.Acquire(Request{Tokens: seqTokens(4, 30000)})
	require.ErrorIs(t, err, ErrNoSpace, "every GPU unit is pinned by a live sequence")
}

// TestPartialSourceHoldUndone: Y fails at reserveSlots after X truncated
// into the source and Z acquired a block; Y's undo lets the source go and
// leaves Z's pins alone.
func TestPartialSourceHoldUndone(t *testing.T) {
	var zb int32
	c, _, err := longAcquireWithSource(t, func(c *Cache, x SeqID, src int32) {
		_, zb = truncateAndTakeRecord(t, c, x)
		require.NotEqual(t, src, zb, "the source's record, referenced, is not reused")
		saved := c.sliceUnits
		c.sliceUnits = defaultSliceUnits
		_, err := c.Acquire(Request{Tokens: seqTokens(52, 40000)}) // 26 units, live
		require.NoError(t, err)
		c.sliceUnits = saved
	})
	require.ErrorIs(t, err, ErrNoSpace)
	require.Equal(t, int32(1), int32(c.units.of(c.units.id(zb, 0)).pins), "Z still pins its unit once")
	require.NoError(t, c.checkInvariants())
}

// TestPartialReuseGivesWayToRoom: a prompt that fits without
// PartialReuse fits with it: when the copy's source holds the only
// evictable units, the block is computed whole instead (Admit agrees).
func TestPartialReuseGivesWayToRoom(t *testing.T) {
	for _, on := range []bool{false, true} {
		l := tinyLayout(t, layout.PagedLayer, nil)
		tiers := GPUAndCPU(Capacity{Units: 8}, Capacity{})
		store, err := NewMemoryStore(l, tiers)
		require.NoError(t, err)
		c, err := New(Config{Layout: l, Tiers: tiers, Mover: store, PartialReuse: on})
		require.NoError(t, err)
		x, err := c.Acquire(Request{Tokens: seqTokens(8, 0)})
		require.NoError(t, err)
		finish(t, c, x.Seq)                                     // blocks 0 and 1 cached, evictable
		_, err = c.Acquire(Request{Tokens: seqTokens(8, 1000)}) // W: live, 4 units
		require.NoError(t, err)
		prompt := append(seqTokens(6, 0), 100, 101)
		adm, err := c.Admit(Request{Tokens: prompt})
		require.NoError(t, err)
		p, err := c.Acquire(Request{Tokens: prompt})
		require.NoError(t, err, "PartialReuse %v", on)
		require.True(t, adm.Fits, "PartialReuse %v", on)
		require.Zero(t, p.PartialTokens, "the source's units are the room the prompt needs")
		require.Equal(t, adm.ReusedTokens, p.ReusedTokens)
	}
}

// TestPartialReuseSkipsUnwrittenRestores: a sparse sequence A restores
// the dropped units of a committed block S it shares (SparseAccess, From
// Dropped); A's server writes them only with the layer's kernel that
// follows. A dense Acquire planned in between must not copy S: its slots
// hold old bytes until A declares them written.
func TestPartialReuseSkipsUnwrittenRestores(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	tiers := GPUAndCPU(Capacity{Units: 8}, Capacity{})
	store, err := NewMemoryStore(l, tiers)
	require.NoError(t, err)
	c, err := New(Config{Layout: l, Tiers: tiers, Mover: store, PartialReuse: true})
	require.NoError(t, err)
	x, err := c.Acquire(Request{Tokens: seqTokens(8, 0)})
	require.NoError(t, err)
	fillBlock(t, c, store, x.Seq, 0, 0x10)
	fillBlock(t, c, store, x.Seq, 1, 0x40)
	truth := blockBytes(t, c, store, x.Seq, 1)
	finish(t, c, x.Seq)
	a, err := c.Acquire(Request{Tokens: seqTokens(8, 0), Sparse: true})
	require.NoError(t, err)
	require.Equal(t, 8, a.ReusedTokens)
	// Other prompts drop S's units (no CPU tier), and write their slots.
	for base := uint32(1000); base < 1024; base += 8 {
		p, err := c.Acquire(Request{Tokens: seqTokens(8, base)})
		require.NoError(t, err)
		fillBlock(t, c, store, p.Seq, 0, 0x90)
		fillBlock(t, c, store, p.Seq, 1, 0x90)
		finish(t, c, p.Seq)
	}
	// A restores blocks 0 and 1 at both layers (layer 1 with Keep).
	var res SparseResult
	sel := func(layer int, keep bool) Selection {
		return Selection{Layer: layer, Blocks: [][]int{{0, 1}, {0, 1}}, Keep: keep}
	}
	require.NoError(t, c.SparseAccess(a.Seq, sel(0, false), &res))
	require.NoError(t, c.SparseAccess(a.Seq, sel(1, true), &res))
	restored := 0
	for _, u := range res.Units {
		if u.From == Dropped {
			restored++
		}
	}
	t.Logf("units restored by A: %d (of %d touched)", restored, len(res.Units))
	// P, before A's kernels run: a partial copy of S.
	p, err := c.Acquire(Request{Tokens: append(seqTokens(6, 0), 100, 101)})
	require.NoError(t, err)
	t.Logf("P: partial %d, copied %d, compute %v", p.PartialTokens, p.Copied, p.Compute)
	// A's kernels now write the restored units (the bytes they had).
	for _, u := range res.Units {
		if u.From == Dropped {
			buf := store.Bytes(GPU, u.Pool, u.Slot)
			for j := range buf {
				buf[j] = byte(0x10*(1+3*u.Block)) + byte(u.Slice) // 0x10 block 0, 0x40 block 1
			}
		}
	}
	if p.PartialTokens > 0 {
		require.Equal(t, truth, blockBytes(t, c, store, p.Seq, 1), "P's copy of S's first tokens")
	}
}

// truncateAndTakeRecord is the hook of longAcquireWithSource that most
// tests use: X, the source's other user, truncates into it and is
// released, and a new sequence Z acquires one block, which would take the
// source's record were it freed. It returns Z and its block.
func truncateAndTakeRecord(t *testing.T, c *Cache, x SeqID) (SeqID, int32) {
	t.Helper()
	_, err := c.Truncate(x, 2)
	require.NoError(t, err)
	require.NoError(t, c.Release(x))
	q, err := c.Acquire(Request{Tokens: seqTokens(4, 5000)})
	require.NoError(t, err)
	return q.Seq, c.seqs[q.Seq].blocks[0]
}
