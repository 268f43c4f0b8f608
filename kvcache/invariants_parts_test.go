package kvcache

import (
	"testing"

	"github.com/kvtier/kvtier/layout"
	"github.com/stretchr/testify/require"
)

// TestPartChecksCatchCorruption: each part's own invariant check (the
// arena's, the unit table's, the transfers', the tier set's, the
// transaction's, the event log's) finds a corruption of its
// state, and checkInvariants reports it (first the part's, or first the
// stale Stats snapshot the same corruption shows in).
func TestPartChecksCatchCorruption(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	c, _, e := jobCache(t, l, GPUAndCPU(Capacity{Units: 16}, Capacity{Units: 16}), nil)
	p, err := c.Acquire(Request{Tokens: seqTokens(8, 0)})
	require.NoError(t, err)
	e.drain(t, c, map[int]bool{})
	finish(t, c, p.Seq)
	// A second prompt moves the first down to the CPU: it waits on that
	// transfer, held by the engine.
	q, err := c.Acquire(Request{Tokens: seqTokens(32, 100)})
	require.NoError(t, err)
	require.NoError(t, c.checkInvariants())

	c.mu.Lock()
	s := c.seqs[q.Seq]
	c.mu.Unlock()
	require.NotEmpty(t, s.waits, "setup: the sequence waits on no transfer")

	for _, tc := range []struct {
		name    string
		corrupt func() (undo func())
		part    func() error // the part's own check
		want    string
	}{
		{"transfer forgets a waiter", func() func() {
			tr := c.xfer.byID[s.waits[0]]
			saved := tr.waiters
			tr.waiters = nil
			return func() { tr.waiters = saved }
		}, func() error { return c.xfer.check(c.seqs) }, "does not list it"},
		{"transfer counted twice in flight", func() func() {
			c.xfer.inFlight++
			return func() { c.xfer.inFlight-- }
		}, func() error { return c.xfer.check(c.seqs) }, "transfers in flight"},
		{"arena lists a free slot twice", func() func() {
			a := c.tiers.arena(CPU, 0)
			require.GreaterOrEqual(t, len(a.free), 2, "setup: the CPU has fewer than 2 free slots")
			saved := a.free[1]
			a.free[1] = a.free[0]
			return func() { a.free[1] = saved }
		}, func() error { return c.accounting(true) }, "duplicated"},
		{"unit table miscounts its free records", func() func() {
			c.units.freeLen++
			return func() { c.units.freeLen-- }
		}, func() error { return c.units.check(c.units.live() + 1) }, "on the free list"},
		{"transaction left with an undo record", func() func() {
			c.tx.log(undoRec{})
			return func() { c.tx.undo = c.tx.undo[:0] }
		}, func() error { return c.tx.check(&c.tiers) }, "undo records"},
		{"tier set holds an arena of another tier", func() func() {
			l := &c.tiers.levels[0]
			saved := l.arenas[0]
			l.arenas[0] = c.tiers.arena(CPU, 0)
			return func() { l.arenas[0] = saved }
		}, func() error { return c.tiers.check(len(c.geom.pools)) }, "of another tier"},
		{"event log keeps an ended operation's events", func() func() {
			c.events.running = append(c.events.running, Event{Kind: BlockStored})
			return func() { c.events.running = c.events.running[:0] }
		}, func() error { return c.events.check(c.geom.slices, c.tiers.last()) }, "not published"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.mu.Lock()
			undo := tc.corrupt()
			part, all := tc.part(), c.accounting(true)
			undo()
			c.mu.Unlock()
			require.ErrorContains(t, part, tc.want)
			require.Error(t, all)
			require.NoError(t, c.checkInvariants())
		})
	}
}

// TestMediaCheckCatchesCorruption: with events on, the check that what the
// events reported of each block is where its units are finds a block
// reported on the wrong tier, and one the events forgot.
func TestMediaCheckCatchesCorruption(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: 16}, Capacity{Units: 16}), EventBuffer: 64})
	require.NoError(t, err)
	p, err := c.Acquire(Request{Tokens: seqTokens(8, 0)})
	require.NoError(t, err)
	require.NoError(t, c.Commit(p.Seq, 8))
	require.NoError(t, c.checkInvariants())

	c.mu.Lock()
	defer c.mu.Unlock()
	require.NotEmpty(t, c.events.media, "setup: no block was reported stored")
	for b, m := range c.events.media {
		saved := m[0]
		m[0] = CPU
		require.ErrorContains(t, c.accounting(true), "reported on")
		m[0] = saved
		delete(c.events.media, b)
		require.ErrorContains(t, c.accounting(true), "has no media")
		c.events.media[b] = m
		break
	}
	require.NoError(t, c.accounting(true))
}
