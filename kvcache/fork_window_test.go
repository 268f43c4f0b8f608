package kvcache

import (
	"fmt"
	"testing"

	"github.com/kvtier/kvtier/layout"
	"github.com/stretchr/testify/require"
)

// TestLongForkRepinsARecomputeCopy forks, with an Engine, a sequence of a
// model whose layer 0 has a 6-token window and layer 1 none, after the
// parent's out-of-window unit of block 18 in layer 0 was dropped: the
// child's partial block is copied (the copy may fail), so the child pins
// the window of its first token to recompute, and block 18, lacking a
// unit, becomes a recompute copy. In one step and in steps of 8 units
// the child must pin the copy's units (both layers) and release nothing
// of the cached block's, with every invariant holding. (The claim of a
// long Fork pinned the cached block's layer-1 unit, and its last step
// once kept that pin and gave the copy's layer-1 unit no slot, because
// the claimed span shared the child's block list, which the repin
// changed in place.)
func TestLongForkRepinsARecomputeCopy(t *testing.T) {
	for _, slice := range []int{1 << 20, 8} {
		t.Run(fmt.Sprint(slice), func(t *testing.T) {
			l := tinyLayout(t, layout.PagedLayer, []int{6, 0})
			tiers := []TierConfig{{Name: "GPU", Capacity: Capacity{Units: 2 * 45}}}
			ms, err := NewMemoryStore(l, tiers)
			require.NoError(t, err)
			c, err := New(Config{Layout: l, Tiers: tiers, Engine: MoverEngine(ms)})
			require.NoError(t, err)
			c.sliceUnits = slice
			p, err := c.Acquire(Request{Tokens: seqTokens(82, 1)})
			require.NoError(t, err)
			require.NoError(t, c.Commit(p.Seq, 82))
			_, err = c.Append(p.Seq, 7)
			require.NoError(t, err)
			require.NoError(t, c.Commit(p.Seq, 83))
			// Two other prompts take the GPU's free slots and evict the
			// parent's out-of-window units.
			for _, base := range []uint32{1 << 20, 2 << 20} {
				x, err := c.Acquire(Request{Tokens: seqTokens(92-8*int(base>>21), base)})
				require.NoError(t, err)
				finish(t, c, x.Seq)
			}
			loc, err := c.Locate(p.Seq, 18, 0)
			require.NoError(t, err)
			require.Equal(t, Dropped, loc.Tier, "the setup evicts block 18's layer-0 unit")
			require.NoError(t, c.checkInvariants())

			f, err := c.Fork(p.Seq)
			require.NoError(t, err)
			require.NoError(t, c.checkInvariants())
			for sl := range 2 {
				child, err := c.Locate(f.Seq, 18, sl)
				require.NoError(t, err)
				parent, err := c.Locate(p.Seq, 18, sl)
				require.NoError(t, err)
				require.Equal(t, GPU, child.Tier, "slice %d: the child's copy of block 18 has a GPU slot", sl)
				if parent.Tier == GPU {
					require.NotEqual(t, parent.Slot, child.Slot, "slice %d: the child recomputes into its own copy", sl)
				}
			}
			require.NoError(t, c.Release(f.Seq))
			require.NoError(t, c.Release(p.Seq))
			require.NoError(t, c.checkInvariants())
			require.Zero(t, c.Stats().Tier(GPU).Pinned)
		})
	}
}
