package kvcache

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/kvtier/kvtier/layout"
	"github.com/stretchr/testify/require"
)

// queueEngine is a TransferEngine whose transfers wait until the test
// completes them, in the order it chooses.
type queueEngine struct {
	store   *MemoryStore
	started []startedTransfer
	total   int
	// stores makes it say that it keeps the tiers below the GPU in
	// stores (Stores), so that the cache counts what they lack.
	stores bool
}

func (e *queueEngine) Stores(t Tier) bool { return e.stores && t > GPU }

func (e *queueEngine) Start(copies []Copy, done func(error)) {
	e.total++
	e.started = append(e.started, startedTransfer{copies: slices.Clone(copies), done: done})
}

// complete finishes started transfer i: its copies on success; with err,
// every destination is overwritten with garbage first.
func (e *queueEngine) complete(t *testing.T, i int, err error) {
	t.Helper()
	tr := e.started[i]
	e.started = slices.Delete(e.started, i, i+1)
	if err != nil {
		for _, cp := range tr.copies {
			for j, dst := 0, e.store.Bytes(cp.To, cp.Pool, cp.ToSlot); j < len(dst); j++ {
				dst[j] = 0xEE
			}
		}
	} else {
		require.NoError(t, e.store.Copy(tr.copies))
	}
	tr.done(err)
}

// completeAll finishes every started transfer, and those they start,
// successfully.
func (e *queueEngine) completeAll(t *testing.T, c *Cache) {
	t.Helper()
	for range 1000 {
		for len(e.started) > 0 {
			e.complete(t, 0, nil)
		}
		_, err := c.Poll()
		require.NoError(t, err)
		if len(e.started) == 0 {
			return
		}
	}
	t.Fatal("transfers never drain")
}

// asyncCache is a paged cache (two units per block, one per layer) over a
// MemoryStore moved by a queueEngine, with its events.
func asyncCache(t *testing.T, gpu, cpu Capacity) (*Cache, *queueEngine, *[]Event) {
	t.Helper()
	l := tinyLayout(t, layout.PagedLayer, nil)
	store, err := NewMemoryStore(l, GPUAndCPU(gpu, cpu))
	require.NoError(t, err)
	e := &queueEngine{store: store}
	events := &[]Event{}
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(gpu, cpu), Engine: e, Events: func(ev Event) { *events = append(*events, ev) }})
	require.NoError(t, err)
	return c, e, events
}

// pattern is the byte a server writes at offset o of slice sl of the
// block of prompt that starts at token first.
func pattern(first uint32, sl int, o int) byte { return byte(first*31 + uint32(sl)*7 + uint32(o)) }

// writeBlocks plays the server: it writes blocks [from, to) of sequence id,
// whose tokens are prompt, in every slice.
func writeBlocks(t *testing.T, c *Cache, store *MemoryStore, id SeqID, prompt []uint32, from, to int) {
	t.Helper()
	for sl := range c.Layout().UnitsPerBlock() {
		table, err := c.BlockTable(nil, id, sl)
		require.NoError(t, err)
		for i := from; i < to; i++ {
			buf := store.Bytes(GPU, c.SlicePool(sl), table[i])
			for o := range buf {
				buf[o] = pattern(prompt[i*c.BlockTokens()], sl, o)
			}
		}
	}
}

// requireBlocks checks that every block of sequence id holds what
// writeBlocks wrote for prompt.
func requireBlocks(t *testing.T, c *Cache, store *MemoryStore, id SeqID, prompt []uint32) {
	t.Helper()
	for sl := range c.Layout().UnitsPerBlock() {
		table, err := c.BlockTable(nil, id, sl)
		require.NoError(t, err)
		for i, slot := range table {
			buf := store.Bytes(GPU, c.SlicePool(sl), slot)
			for o := range buf {
				require.Equal(t, pattern(prompt[i*c.BlockTokens()], sl, o), buf[o], "block %d slice %d byte %d", i, sl, o)
			}
		}
	}
}

// cachedOnCPU makes prompt's blocks cached on the CPU: computed by one
// sequence, then pushed down by another prompt of the same length.
func cachedOnCPU(t *testing.T, c *Cache, e *queueEngine, prompt, other []uint32) {
	t.Helper()
	for _, p := range [][]uint32{prompt, other} {
		plan, err := c.Acquire(Request{Tokens: p})
		require.NoError(t, err)
		e.completeAll(t, c)
		writeBlocks(t, c, e.store, plan.Seq, p, 0, len(p)/c.BlockTokens())
		require.NoError(t, c.Commit(plan.Seq, len(p)))
		require.NoError(t, c.Release(plan.Seq))
	}
	e.completeAll(t, c)
	require.Equal(t, int64(len(prompt)/c.BlockTokens()*c.Layout().UnitsPerBlock()), c.Stats().Tier(CPU).Cached)
}

// TestAsyncLoadIsLayerWiseAndAFailedLoadIsRecomputed onboards a cached
// prompt from the CPU: the plan returns before any byte moves, one
// transfer per KV layer; layer 0 is ready before layer 1; layer 1's
// transfer fails, so its units are reported dropped and their blocks are
// the sequence's to recompute. Once it declares them written, another
// request hits every unit and reads the right bytes.
func TestAsyncLoadIsLayerWiseAndAFailedLoadIsRecomputed(t *testing.T) {
	c, e, events := asyncCache(t, Capacity{Units: 4}, Capacity{Units: 8})
	prompt, other := seqTokens(8, 100), seqTokens(8, 200)
	cachedOnCPU(t, c, e, prompt, other)
	*events = (*events)[:0]

	plan, err := c.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	require.Equal(t, 4, plan.Onboarded)
	require.Equal(t, 4, plan.Loading)
	require.Empty(t, plan.Compute)
	require.Len(t, e.started, 2, "one transfer per KV layer")
	for _, tr := range e.started {
		// Each moves the other prompt's two units of its layer down,
		// each followed by the load into its slot.
		require.Len(t, tr.copies, 4)
		require.Equal(t, []Tier{CPU, GPU, CPU, GPU}, []Tier{tr.copies[0].To, tr.copies[1].To, tr.copies[2].To, tr.copies[3].To})
	}
	var r Readiness
	require.NoError(t, c.Readiness(plan.Seq, &r))
	require.Equal(t, Readiness{Layers: []bool{false, false}, Pending: 2, Recompute: r.Recompute[:0]}, r)

	e.complete(t, 0, nil) // layer 0
	require.NoError(t, c.Readiness(plan.Seq, &r))
	require.Equal(t, []bool{true, false}, r.Layers, "layer 0 may run while layer 1 loads")
	require.Equal(t, 1, r.Pending)

	e.complete(t, 0, errors.New("link down")) // layer 1
	require.NoError(t, c.Readiness(plan.Seq, &r))
	require.Equal(t, []bool{true, true}, r.Layers)
	require.Zero(t, r.Pending)
	require.Equal(t, []TokenRange{{0, 8}}, r.Recompute, "both blocks lack their layer-1 unit")
	require.NoError(t, c.Readiness(plan.Seq, &r))
	require.Equal(t, []TokenRange{{0, 8}}, r.Recompute, "reported again until written: a scheduler polling and a worker waiting both see it")
	got, err := c.WaitReady(context.Background(), plan.Seq, -1)
	require.NoError(t, err)
	require.Equal(t, []TokenRange{{0, 8}}, got, "WaitReady sees it too")
	st := c.Stats()
	require.Equal(t, uint64(2), st.Tier(GPU).Failed)
	require.Equal(t, uint64(4), st.Onboards, "counted as planned")
	dropped := 0
	for _, ev := range *events {
		if ev.Kind == UnitMoved && ev.From == GPU && ev.To == Dropped {
			dropped++
			require.Equal(t, 1, ev.Slice)
		}
	}
	require.Equal(t, 2, dropped, "the failed units are reported dropped")
	require.NoError(t, c.checkInvariants())

	// Meanwhile another request for the prompt does not reuse the blocks
	// whose units have no bytes.
	other2, err := c.Admit(Request{Tokens: prompt})
	require.NoError(t, err)
	require.Zero(t, other2.ReusedTokens)

	// The server recomputes layer 1 (here: every layer) and commits.
	writeBlocks(t, c, e.store, plan.Seq, prompt, 0, 2)
	require.NoError(t, c.Commit(plan.Seq, 4))
	require.NoError(t, c.Readiness(plan.Seq, &r))
	require.Equal(t, []TokenRange{{4, 8}}, r.Recompute, "a Commit declares written only the blocks it covers")
	require.NoError(t, c.Commit(plan.Seq, 8))
	require.NoError(t, c.Readiness(plan.Seq, &r))
	require.Empty(t, r.Recompute, "declared written: no longer owed")
	restored := 0
	for _, ev := range *events {
		if ev.Kind == UnitMoved && ev.From == Dropped && ev.To == GPU {
			restored++
		}
	}
	require.Equal(t, 2, restored)
	requireBlocks(t, c, e.store, plan.Seq, prompt)
	b, err := c.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	require.Equal(t, 4, b.Hits)
	require.Zero(t, b.Loading)
	requireBlocks(t, c, e.store, b.Seq, prompt)
	require.NoError(t, c.checkInvariants())
}

// TestAsyncFailedMoveDownDropsTheVictim: a victim whose move down fails is
// dropped (reported, counted in the lower tier's Failed), and the next
// request for it recomputes it.
func TestAsyncFailedMoveDownDropsTheVictim(t *testing.T) {
	c, e, events := asyncCache(t, Capacity{Units: 2}, Capacity{Units: 4})
	p1, p2 := seqTokens(4, 10), seqTokens(4, 20)
	a, err := c.Acquire(Request{Tokens: p1})
	require.NoError(t, err)
	require.Empty(t, e.started, "fresh units in free slots need no transfer")
	writeBlocks(t, c, e.store, a.Seq, p1, 0, 1)
	require.NoError(t, c.Commit(a.Seq, 4))
	require.NoError(t, c.Release(a.Seq))

	b, err := c.Acquire(Request{Tokens: p2})
	require.NoError(t, err)
	require.Equal(t, 2, b.Offloaded)
	require.Len(t, e.started, 2)
	var r Readiness
	require.NoError(t, c.Readiness(b.Seq, &r))
	require.Equal(t, 2, r.Pending, "b's fresh units are in the victims' slots: not writable before they left")
	st := c.Stats().Tier(CPU)
	require.Equal(t, int64(2), st.Pinned, "the victims are pinned on the CPU until their bytes are there")
	for len(e.started) > 0 {
		e.complete(t, 0, errors.New("disk full"))
	}
	require.NoError(t, c.Readiness(b.Seq, &r))
	require.Zero(t, r.Pending)
	require.Empty(t, r.Recompute, "b computes its units anyway")
	st = c.Stats().Tier(CPU)
	require.Equal(t, uint64(2), st.Failed)
	require.Zero(t, st.Cached+st.Pinned, "the victims are dropped")
	require.Equal(t, []string{"offloaded", "offloaded", "dropped", "dropped", "removed"}, whats(*events)[1:], "the block is gone")
	require.NoError(t, c.checkInvariants())

	writeBlocks(t, c, e.store, b.Seq, p2, 0, 1)
	require.NoError(t, c.Commit(b.Seq, 4))
	require.NoError(t, c.Release(b.Seq))
	again, err := c.Acquire(Request{Tokens: p1})
	require.NoError(t, err)
	require.Equal(t, []TokenRange{{0, 4}}, again.Compute)
	require.Zero(t, again.Onboarded)
}

// TestAsyncLoadBackWhileMovingDown: a request needs a victim whose move
// down is still in flight; its load starts when the move is done, and
// fails without starting when the move fails. When the move's failure
// says a unit is missing from the store, the load that fails with it does
// not count its own unit missing: it never asked the store.
func TestAsyncLoadBackWhileMovingDown(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{{"ok", nil}, {"move fails", errors.New("disk full")}, {"move fails as missing", fmt.Errorf("%w: evicted", ErrUnitMissing)}} {
		fail := tc.err != nil
		t.Run(tc.name, func(t *testing.T) {
			c, e, _ := asyncCache(t, Capacity{Units: 4}, Capacity{Units: 4})
			e.stores = true
			p1, p2, p3 := seqTokens(4, 10), seqTokens(4, 20), seqTokens(4, 30)
			a, err := c.Acquire(Request{Tokens: p1})
			require.NoError(t, err)
			writeBlocks(t, c, e.store, a.Seq, p1, 0, 1)
			require.NoError(t, c.Commit(a.Seq, 4))
			require.NoError(t, c.Release(a.Seq))
			x, err := c.Acquire(Request{Tokens: p2}) // fills the GPU
			require.NoError(t, err)
			b, err := c.Acquire(Request{Tokens: p3}) // moves p1 down
			require.NoError(t, err)
			require.Equal(t, 2, b.Offloaded)
			require.Len(t, e.started, 2)
			require.NoError(t, c.Abort(x.Seq)) // frees two GPU slots at once

			d, err := c.Acquire(Request{Tokens: p1})
			require.NoError(t, err)
			require.Equal(t, 2, d.Onboarded)
			require.Equal(t, 2, e.total, "d's loads wait for p1's moves down: not started")
			require.NoError(t, c.checkInvariants())
			var r Readiness
			require.NoError(t, c.Readiness(d.Seq, &r))
			require.Equal(t, 2, r.Pending)
			e.complete(t, 1, tc.err) // layer 1's move down
			e.complete(t, 0, nil)    // layer 0's
			_, err = c.Poll()
			require.NoError(t, err)
			if fail {
				require.Len(t, e.started, 1, "the load that reads the failed move never starts")
			} else {
				require.Len(t, e.started, 2)
			}
			e.completeAll(t, c)
			require.NoError(t, c.Readiness(d.Seq, &r))
			require.Zero(t, r.Pending)
			if fail {
				require.Equal(t, []TokenRange{{0, 4}}, r.Recompute)
				writeBlocks(t, c, e.store, d.Seq, p1, 0, 1)
			} else {
				require.Empty(t, r.Recompute)
			}
			requireBlocks(t, c, e.store, d.Seq, p1)
			require.Zero(t, c.Stats().Tier(CPU).Missing)
			require.NoError(t, c.checkInvariants())
		})
	}
}

// TestAsyncMaxLoadTokens: a request's loads go to the engine in pieces of
// at most MaxLoadTokens tokens, one after the other.
func TestAsyncMaxLoadTokens(t *testing.T) {
	for _, capTokens := range []int{0, 4, 8} {
		c, e, _ := asyncCache(t, Capacity{Units: 8}, Capacity{Units: 16})
		prompt, other := seqTokens(16, 100), seqTokens(16, 200)
		cachedOnCPU(t, c, e, prompt, other)
		total := e.total
		plan, err := c.Acquire(Request{Tokens: prompt, MaxLoadTokens: capTokens})
		require.NoError(t, err)
		require.Equal(t, 8, plan.Loading)
		pieces := 0
		for len(e.started) > 0 {
			if capTokens > 0 {
				require.Len(t, e.started, 1, "cap %d: one piece at a time", capTokens)
				loads := 0
				for _, cp := range e.started[0].copies {
					if cp.To == GPU {
						loads++
					}
				}
				require.LessOrEqual(t, loads, capTokens/c.BlockTokens(), "cap %d: loads of one piece", capTokens)
			} else {
				require.Len(t, e.started, 2, "one transfer per layer, both at once")
			}
			pieces += len(e.started)
			for len(e.started) > 0 {
				e.complete(t, 0, nil)
			}
			_, err := c.Poll()
			require.NoError(t, err)
		}
		require.Equal(t, map[int]int{0: 2, 4: 8, 8: 4}[capTokens], e.total-total, "cap %d", capTokens)
		require.Equal(t, e.total-total, pieces)
		requireBlocks(t, c, e.store, plan.Seq, prompt)
		require.NoError(t, c.checkInvariants())
	}
	c, _, _ := asyncCache(t, Capacity{Units: 8}, Capacity{Units: 16})
	_, err := c.Acquire(Request{Tokens: seqTokens(4, 0), MaxLoadTokens: -1})
	require.ErrorIs(t, err, ErrInvalidRequest)
	require.ErrorContains(t, err, "-1")
}

// TestAsyncEndWhileInFlight: a sequence released or aborted while its
// transfers run leaves nothing behind once they are done.
func TestAsyncEndWhileInFlight(t *testing.T) {
	for _, end := range []string{"release", "abort"} {
		c, e, _ := asyncCache(t, Capacity{Units: 4}, Capacity{Units: 8})
		prompt, other := seqTokens(8, 100), seqTokens(8, 200)
		cachedOnCPU(t, c, e, prompt, other)
		plan, err := c.Acquire(Request{Tokens: prompt})
		require.NoError(t, err)
		_, err = c.Acquire(Request{Tokens: seqTokens(4, 300)})
		require.ErrorIs(t, err, ErrNoSpace, "every GPU slot is held by a transfer or a pin")
		if end == "abort" {
			require.NoError(t, c.Abort(plan.Seq))
		} else {
			require.NoError(t, c.Release(plan.Seq))
		}
		require.NoError(t, c.checkInvariants())
		require.ErrorIs(t, c.Clear(), ErrBusy, "transfers in flight")
		e.complete(t, 1, errors.New("boom"))
		e.completeAll(t, c)
		require.NoError(t, c.checkInvariants())
		st := c.Stats()
		require.Zero(t, st.Tier(GPU).Pinned)
		require.Zero(t, st.Tier(CPU).Pinned)
		require.Equal(t, int64(2), st.Tier(GPU).Cached, "the loaded layer-0 units are cached, the failed ones dropped")
		require.NoError(t, c.Clear())
	}
}

// TestMoverEngineCompletesAtSubmission: a Mover as a TransferEngine
// finishes every transfer before the call returns.
func TestMoverEngineCompletesAtSubmission(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	tiers := GPUAndCPU(Capacity{Units: 4}, Capacity{Units: 8})
	store, err := NewMemoryStore(l, tiers)
	require.NoError(t, err)
	c, err := New(Config{Layout: l, Tiers: tiers, Engine: MoverEngine(store)})
	require.NoError(t, err)
	_, err = New(Config{Layout: l, Tiers: tiers, Engine: MoverEngine(store), Mover: store})
	require.ErrorIs(t, err, ErrInvalidConfig)
	prompt, other := seqTokens(8, 100), seqTokens(8, 200)
	for _, p := range [][]uint32{prompt, other, prompt} {
		plan, err := c.Acquire(Request{Tokens: p})
		require.NoError(t, err)
		var r Readiness
		require.NoError(t, c.Readiness(plan.Seq, &r))
		require.Zero(t, r.Pending)
		require.Equal(t, []bool{true, true}, r.Layers)
		if len(plan.Compute) > 0 {
			writeBlocks(t, c, store, plan.Seq, p, 0, 2)
		}
		requireBlocks(t, c, store, plan.Seq, p)
		require.NoError(t, c.Commit(plan.Seq, len(p)))
		require.NoError(t, c.Release(plan.Seq))
	}
	require.Equal(t, uint64(4), c.Stats().Onboards)
	require.NoError(t, c.checkInvariants())
}

// TestPrefetch brings a prefix cached on the CPU up ahead of its request:
// the request then hits every unit (waiting for the loads still in
// flight), and a prefix larger than the GPU is prefetched in part.
func TestPrefetch(t *testing.T) {
	c, e, _ := asyncCache(t, Capacity{Units: 4}, Capacity{Units: 8})
	prompt, other := seqTokens(8, 100), seqTokens(8, 200)
	cachedOnCPU(t, c, e, prompt, other)
	k, err := c.Prefetch(Request{Tokens: prompt})
	require.NoError(t, err)
	require.Equal(t, Counts{Onboarded: 4, Offloaded: 4}, k)
	require.Len(t, e.started, 2)
	require.Zero(t, c.Stats().Tier(GPU).Hits, "a prefetch is not a lookup")
	plan, err := c.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	require.Equal(t, 4, plan.Hits)
	require.Zero(t, plan.Onboarded)
	var r Readiness
	require.NoError(t, c.Readiness(plan.Seq, &r))
	require.Equal(t, 2, r.Pending, "the request waits for the prefetch's loads")
	e.completeAll(t, c)
	require.NoError(t, c.Readiness(plan.Seq, &r))
	require.Zero(t, r.Pending)
	requireBlocks(t, c, e.store, plan.Seq, prompt)
	require.Equal(t, uint64(4), c.Stats().Onboards)
	require.NoError(t, c.Release(plan.Seq))

	// Nothing to do for a prefix on the GPU already or an unknown one; a
	// cap of one block takes one.
	k, err = c.Prefetch(Request{Tokens: prompt})
	require.NoError(t, err)
	require.Equal(t, Counts{Hits: 4}, k)
	k, err = c.Prefetch(Request{Tokens: seqTokens(8, 900)})
	require.NoError(t, err)
	require.Zero(t, k)
	k, err = c.Prefetch(Request{Tokens: other, MaxLoadTokens: 4})
	require.NoError(t, err)
	require.Equal(t, 2, k.Onboarded)
	e.completeAll(t, c)
	_, err = c.Prefetch(Request{Tokens: other, MaxLoadTokens: -4})
	require.ErrorIs(t, err, ErrInvalidRequest)

	// A prefix whose missing units do not fit beside a running request
	// (its first block on the GPU is not evicted for them): the longest
	// part that fits, here the first block, and no error.
	c2, e2, _ := asyncCache(t, Capacity{Units: 6}, Capacity{Units: 16})
	long := seqTokens(12, 300)
	a, err := c2.Acquire(Request{Tokens: long})
	require.NoError(t, err)
	writeBlocks(t, c2, e2.store, a.Seq, long, 0, 3)
	require.NoError(t, c2.Commit(a.Seq, 12))
	require.NoError(t, c2.Release(a.Seq))
	x, err := c2.Acquire(Request{Tokens: seqTokens(8, 400)}) // pins 4 units, moves long's last two blocks down
	require.NoError(t, err)
	require.Equal(t, 4, x.Offloaded)
	e2.completeAll(t, c2)
	k, err = c2.Prefetch(Request{Tokens: long})
	require.NoError(t, err)
	require.Equal(t, Counts{Hits: 2}, k)
	require.Empty(t, e2.started)
	require.Equal(t, int64(4), c2.Stats().Tier(CPU).Cached)
	require.NoError(t, c2.checkInvariants())
}
