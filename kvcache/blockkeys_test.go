package kvcache

import (
	"errors"
	"slices"
	"testing"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/layout"
	"github.com/stretchr/testify/require"
)

// blockKeysLayout is a paged layout of layers layers, one pool: layers
// units per 4-token block.
func blockKeysLayout(t testing.TB, layers int) *layout.Layout {
	t.Helper()
	m := layout.Model{Name: "bk", Layers: layers, QueryHeads: 4, KVHeads: 2, HeadDim: 2, ElemBytes: 1}
	l, err := layout.New(m, layout.PagedLayer, 4)
	require.NoError(t, err)
	return l
}

func keysName(blockKeys bool) string {
	return map[bool]string{false: "unitkeys", true: "blockkeys"}[blockKeys]
}

// A SparseAccess that pins one unit of a block whose other units are
// evictable takes, under block keys, the whole block out of eviction: the
// capacity check counts that (ErrNoSpace, the cache unchanged), where
// counting the one pinned unit promised slots no eviction could deliver
// and poisoned the cache (found by a review).
func TestBlockKeysCapacityCountsWholeBlocks(t *testing.T) {
	for _, bk := range []bool{false, true} {
		t.Run(keysName(bk), func(t *testing.T) {
			l := blockKeysLayout(t, 4) // 4 units per block
			c, err := New(Config{Layout: l, Tiers: tiersOf(Capacity{Units: 12}, Capacity{}, nil, nil), BlockKeys: bk})
			require.NoError(t, err)
			p, err := c.Acquire(Request{Tokens: seqTokens(0, 0), Sparse: true})
			require.NoError(t, err)
			for i := range 8 {
				_, err := c.Append(p.Seq, seqTokens(4, uint32(100+4*i))...)
				require.NoError(t, err)
			}
			_, err = c.Append(p.Seq, 999)
			require.NoError(t, err)
			// GPU: blocks 6 and 7 evictable, 8 pinned; 0..5 dropped.
			sel := Selection{Layer: 0, Blocks: make([][]int, l.Model().StoredHeads())}
			for h := range sel.Blocks {
				sel.Blocks[h] = []int{0, 1, 2, 3, 4, 5, 6} // block 6 hit, 6 fresh units
			}
			var res SparseResult
			err = c.SparseAccess(p.Seq, sel, &res)
			if bk {
				// Pinning block 6's unit leaves block 7's 4 units.
				require.ErrorIs(t, err, ErrNoSpace)
				require.ErrorContains(t, err, "needs 6 slots, 4 free or evictable")
			} else {
				require.NoError(t, err)
			}
			require.NoError(t, c.checkInvariants())
			require.NoError(t, c.Release(p.Seq))
			require.NoError(t, c.checkInvariants())
		})
	}
}

// A dense Acquire that hits a block another sequence pins in part pins
// units that were not evictable under block keys: they cost it no
// capacity, and Admit says so (found by a review: the check counted each
// as an evictable unit lost and refused an Acquire that fits).
func TestBlockKeysCapacityPinnedBlockCostsNothing(t *testing.T) {
	for _, bk := range []bool{false, true} {
		t.Run(keysName(bk), func(t *testing.T) {
			l := blockKeysLayout(t, 4)
			c, err := New(Config{Layout: l, Tiers: tiersOf(Capacity{Units: 8}, Capacity{}, nil, nil), BlockKeys: bk})
			require.NoError(t, err)
			a, err := c.Acquire(Request{Tokens: seqTokens(4, 0)})
			require.NoError(t, err)
			finish(t, c, a.Seq) // block A cached: 4 units, 4 free slots
			s, err := c.Acquire(Request{Tokens: seqTokens(4, 0), Sparse: true})
			require.NoError(t, err)
			sel := Selection{Layer: 0, Blocks: make([][]int, l.Model().StoredHeads())}
			for h := range sel.Blocks {
				sel.Blocks[h] = []int{0}
			}
			var res SparseResult
			require.NoError(t, c.SparseAccess(s.Seq, sel, &res)) // pins A's layer 0 only
			adm, err := c.Admit(Request{Tokens: seqTokens(8, 0)})
			require.NoError(t, err)
			require.True(t, adm.Fits, "%+v", adm)
			// A and one new block: 4 hits, 4 fresh units in the 4 free slots.
			_, err = c.Acquire(Request{Tokens: seqTokens(8, 0)})
			require.NoError(t, err)
			require.NoError(t, c.checkInvariants())
		})
	}
}

// A block hit through any of its units is reported to the policy, once
// per operation (found by a review: only a hit on the block's key unit,
// its first layer, was).
func TestBlockKeysHitsReportedOncePerBlock(t *testing.T) {
	l := blockKeysLayout(t, 4)
	var gp *accessCounter
	factory := func(info PoolInfo) (eviction.Policy[UnitID], error) {
		p := &accessCounter{Policy: eviction.NewLRU[UnitID](), accesses: map[UnitID]int{}}
		if info.Tier == GPU {
			gp = p
		}
		return p, nil
	}
	c, err := New(Config{Layout: l, Tiers: tiersOf(Capacity{Units: 16}, Capacity{}, factory, nil), BlockKeys: true})
	require.NoError(t, err)
	a, err := c.Acquire(Request{Tokens: seqTokens(4, 0)})
	require.NoError(t, err)
	finish(t, c, a.Seq)
	total := func() int {
		n := 0
		for _, k := range gp.accesses {
			n += k
		}
		return n
	}
	s, err := c.Acquire(Request{Tokens: seqTokens(4, 0), Sparse: true})
	require.NoError(t, err)
	sel := Selection{Layer: 2, Blocks: make([][]int, l.Model().StoredHeads())}
	for h := range sel.Blocks {
		sel.Blocks[h] = []int{0}
	}
	var res SparseResult
	require.NoError(t, c.SparseAccess(s.Seq, sel, &res))
	require.Equal(t, 1, res.Hits)
	require.Equal(t, 1, total(), "a sparse hit on layer 2")
	require.NoError(t, c.Release(s.Seq))
	d, err := c.Acquire(Request{Tokens: seqTokens(5, 0)})
	require.NoError(t, err)
	require.Equal(t, 2, total(), "a dense hit on the block's 4 units, once")
	require.Len(t, gp.accesses, 1, "on the block's key")
	require.NoError(t, c.Release(d.Seq))
}

// With an Engine, a slot a block's eviction frees and the operation does
// not take would stay its victim's until the victim's move down is done:
// capacity a long Acquire's reservation counted on. Such victims are
// dropped instead, and the reservation holds (found by a review: a later
// step of the long Acquire failed with ErrNoSpace).
func TestBlockKeysUnusedSlotsKeepReservations(t *testing.T) {
	for _, bk := range []bool{false, true} {
		t.Run(keysName(bk), func(t *testing.T) {
			l := blockKeysLayout(t, 4) // 4 units per block
			tiers := GPUAndCPU(Capacity{Units: 12}, Capacity{Units: 16})
			store, err := NewMemoryStore(l, tiers)
			require.NoError(t, err)
			e := &queueEngine{store: store}
			c, err := New(Config{Layout: l, Tiers: tiers, Engine: e, BlockKeys: bk})
			require.NoError(t, err)
			X, Y, W := seqTokens(4, 1000), seqTokens(4, 2000), seqTokens(12, 3000)
			dense := func(tokens []uint32) {
				p, err := c.Acquire(Request{Tokens: tokens})
				require.NoError(t, err)
				e.completeAll(t, c)
				finish(t, c, p.Seq)
				e.completeAll(t, c)
			}
			dense(X)
			dense(Y)
			dense(W) // X and Y go down to the CPU
			// Layers 0 and 1 of X, then of Y, back on the GPU.
			sparse := func(tokens []uint32) {
				s, err := c.Acquire(Request{Tokens: tokens, Sparse: true})
				require.NoError(t, err)
				for layer := range 2 {
					sel := Selection{Layer: layer, Keep: layer > 0, Blocks: make([][]int, l.Model().StoredHeads())}
					for h := range sel.Blocks {
						sel.Blocks[h] = []int{0}
					}
					var res SparseResult
					require.NoError(t, c.SparseAccess(s.Seq, sel, &res))
					e.completeAll(t, c)
				}
				require.NoError(t, c.Release(s.Seq))
				e.completeAll(t, c)
			}
			sparse(X)
			sparse(Y)
			require.NoError(t, c.checkInvariants())
			c.sliceUnits = 8 // one block per step: a long Acquire
			prompt := append(slices.Clone(X), seqTokens(8, 5000)...)
			adm, err := c.Admit(Request{Tokens: prompt})
			require.NoError(t, err)
			require.True(t, adm.Fits, "%+v", adm)
			p, err := c.Acquire(Request{Tokens: prompt})
			require.NoError(t, err, "the reservation promised the slots")
			e.completeAll(t, c)
			finish(t, c, p.Seq)
			e.completeAll(t, c)
			require.NoError(t, c.checkInvariants())
			require.False(t, errors.Is(c.poisoned, ErrPolicy))
		})
	}
}
