package kvcache

import (
	"testing"

	"github.com/kvtier/kvtier/layout"
	"github.com/stretchr/testify/require"
)

// blockTablesOf returns every slice's block table of sequence id.
func blockTablesOf(t *testing.T, c *Cache, id SeqID) [][]int32 {
	t.Helper()
	out := make([][]int32, c.geom.slices)
	for sl := range out {
		tb, err := c.BlockTable(nil, id, sl)
		require.NoError(t, err)
		out[sl] = tb
	}
	return out
}

// TestForkInStepsLetsOthersIn forks a 64-block sequence in steps of 8
// units: between the steps another sequence appends and reads its tables
// (the Fork holds the lock for a step, not for the whole child), and the
// child ends as a one-step Fork makes it: the parent's full blocks at the
// parent's slots, its own copy of the partial block, every pin counted.
func TestForkInStepsLetsOthersIn(t *testing.T) {
	for _, kind := range []layout.Kind{layout.PagedLayer, layout.AllLayers} {
		t.Run(kind.String(), func(t *testing.T) {
			l := tinyLayout(t, kind, nil)
			per := int64(l.UnitsPerBlock())
			c, err := New(Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: per * 200}, Capacity{})})
			require.NoError(t, err)
			c.sliceUnits = 8
			p, err := c.Acquire(Request{Tokens: seqTokens(258, 1)})
			require.NoError(t, err)
			require.NoError(t, c.Commit(p.Seq, 258))
			o, err := c.Acquire(Request{Tokens: seqTokens(6, 1<<20)})
			require.NoError(t, err)
			require.NoError(t, c.Commit(o.Seq, 6))
			steps := 0
			c.afterStep = func(call string) {
				if call != "Fork" {
					return
				}
				steps++
				// The Fork does not hold the lock: these run now.
				_, err := c.Append(o.Seq, uint32(steps))
				require.NoError(t, err)
				var st StepTables
				require.NoError(t, c.BlockTables(&st, o.Seq))
			}
			f, err := c.Fork(p.Seq)
			require.NoError(t, err)
			c.afterStep = nil
			// 64 full blocks of per units, 8 units a step, and the last.
			require.GreaterOrEqual(t, steps, int(64*per/8)+1)
			require.NoError(t, c.checkInvariants())
			parent, child := blockTablesOf(t, c, p.Seq), blockTablesOf(t, c, f.Seq)
			for sl := range parent {
				require.Len(t, child[sl], 65)
				require.Equal(t, parent[sl][:64], child[sl][:64], "slice %d", sl)
				require.NotEqual(t, parent[sl][64], child[sl][64], "slice %d: the partial block is copied", sl)
				require.GreaterOrEqual(t, child[sl][64], int32(0))
			}
			// The parent's 65 blocks, the child's copy of the partial
			// block and o's blocks (6 tokens and one per step).
			require.Equal(t, per*int64(65+1+(6+steps+3)/4), c.Stats().Tier(GPU).Pinned)
			require.NoError(t, c.Release(f.Seq))
			require.NoError(t, c.Release(p.Seq))
			require.NoError(t, c.Release(o.Seq))
			require.Zero(t, c.Stats().Tier(GPU).Pinned)
			require.NoError(t, c.checkInvariants())
		})
	}
}

// TestLongForkFailsLikeOneStep fills the GPU so that the copy of the
// parent's partial block has no slot: a Fork in steps fails with
// ErrNoSpace as a one-step Fork does, after releasing what its steps
// claimed, and leaves the cache as the one-step Fork leaves it.
func TestLongForkFailsLikeOneStep(t *testing.T) {
	run := func(slice int) (Stats, error) {
		l := tinyLayout(t, layout.PagedLayer, nil)
		per := int64(l.UnitsPerBlock())
		c, err := New(Config{Layout: l, Tiers: []TierConfig{{Name: "GPU", Capacity: Capacity{Units: per * 65}}}})
		require.NoError(t, err)
		c.sliceUnits = slice
		p, err := c.Acquire(Request{Tokens: seqTokens(258, 1)})
		require.NoError(t, err)
		require.NoError(t, c.Commit(p.Seq, 258))
		_, err = c.Fork(p.Seq)
		require.NoError(t, c.checkInvariants())
		require.Equal(t, per*65, c.Stats().Tier(GPU).Pinned, "the parent's pins, no more")
		require.NoError(t, c.Release(p.Seq))
		require.Zero(t, c.Stats().Tier(GPU).Pinned)
		require.NoError(t, c.checkInvariants())
		return c.Stats(), err
	}
	longStats, longErr := run(8)
	oneStats, oneErr := run(1 << 20)
	require.ErrorIs(t, longErr, ErrNoSpace)
	require.ErrorIs(t, oneErr, ErrNoSpace)
	require.Equal(t, oneStats.Tier(GPU), longStats.Tier(GPU))
}

// TestLongForkMakesOthersWait forks a 64-block sequence in steps of one
// unit while another goroutine truncates, appends to, forks or releases
// the parent: the parent is busy meanwhile, so its call waits for the
// Fork and never changes the blocks the child is being given, and the
// cache's accounting holds after every round.
func TestLongForkMakesOthersWait(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: 2 * 300}, Capacity{})})
	require.NoError(t, err)
	c.sliceUnits = 1
	for round := range 60 {
		p, err := c.Acquire(Request{Tokens: seqTokens(258, uint32(round)<<16)})
		require.NoError(t, err)
		require.NoError(t, c.Commit(p.Seq, 258))
		released := false
		var f Plan
		concurrently(func() {
			var err error
			f, err = c.Fork(p.Seq)
			if err != nil {
				// The Release came first.
				require.ErrorIs(t, err, ErrUnknownSequence)
			}
		}, func() {
			var err error
			released, err = cutIn(c, p.Seq, round, true)
			require.NoError(t, err)
		})
		require.NoError(t, c.checkInvariants(), "round %d", round)
		if f.Tokens > 0 {
			// The child has the parent's tokens as they were when the
			// Fork ran: all 258, or the parent's after the other call.
			require.NoError(t, c.Release(f.Seq))
		}
		if !released {
			require.NoError(t, c.Release(p.Seq))
		}
		require.NoError(t, c.checkInvariants(), "round %d", round)
		require.Zero(t, c.Stats().Tier(GPU).Pinned, "round %d", round)
	}
}
