package kvcache

import (
	"testing"

	"github.com/kvtier/kvtier/layout"
	"github.com/stretchr/testify/require"
)

// TestLongAcquireStartsItsTransfersWhenPlanned: a long Acquire builds its
// transfers across its steps (MaxLoadTokens chains each after the one
// before) and hands them to the engine when it is planned. When the
// transfers some of them wait for (its units' moves down) finish between
// its steps, none may start then: a transfer that still takes chains
// would go to the engine without the copies added after (it did start
// then). Every onboarded unit reads back the bytes it was written with.
func TestLongAcquireStartsItsTransfersWhenPlanned(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	per := l.UnitsPerBlock()
	const blocks = 8
	c, store, e := jobCache(t, l, GPUAndCPU(Capacity{Units: int64(per * blocks * 3 / 2)}, Capacity{Units: int64(4 * per * blocks)}), nil)
	B := c.BlockTokens()
	a := seqTokens(blocks*B, 0)
	p, err := c.Acquire(Request{Tokens: a})
	require.NoError(t, err)
	pattern := func(i, sl int) byte { return byte(1 + i*per + sl) }
	for i := range blocks {
		for sl := range per {
			loc, err := c.Locate(p.Seq, i, sl)
			require.NoError(t, err)
			for k, b := 0, store.Bytes(GPU, loc.Pool, loc.Slot); k < len(b); k++ {
				b[k] = pattern(i, sl)
			}
		}
	}
	finish(t, c, p.Seq)
	e.drain(t, c, map[int]bool{})
	// A second prompt takes the free slots and half of a's, whose units
	// move down by transfers the engine holds.
	q, err := c.Acquire(Request{Tokens: seqTokens(blocks*B, 1000)})
	require.NoError(t, err)
	finish(t, c, q.Seq)

	// a again, in steps of a few units, two blocks of loads per transfer.
	c.sliceUnits = 4
	moving := c.xfer.inFlight
	steps := 0
	c.afterStep = func(call string) {
		if call != "Acquire" {
			return
		}
		steps++
		if c.long == 0 || c.xfer.inFlight == moving {
			return // the Acquire is planned, or has made no transfer yet
		}
		// Between the steps that plan transfers, every transfer started
		// so far finishes: the moves down, then what waited for them.
		for i, j := range e.jobs {
			if !j.over {
				e.finish(t, i, nil)
			}
		}
		started := len(e.jobs)
		for range 100 { // a step's worth of moves per call
			_, err := c.Poll()
			require.NoError(t, err)
		}
		require.Equal(t, started, len(e.jobs), "step %d: a transfer of the Acquire started before it was planned", steps)
	}
	r, err := c.Acquire(Request{Tokens: a, MaxLoadTokens: 2 * B})
	c.afterStep = nil
	require.NoError(t, err)
	require.Greater(t, steps, 2, "setup: the Acquire did not run in steps")
	require.Positive(t, r.Onboarded, "setup: nothing was onboarded")
	// The server reads once Readiness says every layer is ready: the
	// engine runs what is started, and the cache applies it a step at a
	// time.
	var ready Readiness
	for k := 0; ; k++ {
		require.Less(t, k, 10000, "the transfers never finished")
		for i, j := range e.jobs {
			if !j.over {
				e.finish(t, i, nil)
			}
		}
		require.NoError(t, c.Readiness(r.Seq, &ready))
		if ready.Pending == 0 {
			break
		}
	}
	require.Empty(t, ready.Recompute)
	for i := range blocks {
		for sl := range per {
			loc, err := c.Locate(r.Seq, i, sl)
			require.NoError(t, err)
			require.Equal(t, GPU, loc.Tier)
			got := store.Bytes(GPU, loc.Pool, loc.Slot)
			for k := range got {
				require.Equal(t, pattern(i, sl), got[k], "block %d slice %d byte %d", i, sl, k)
			}
		}
	}
	require.NoError(t, c.checkInvariants())
}
