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
	factory, gpp := gpuAccessCounter()
	c, err := New(Config{Layout: l, Tiers: tiersOf(Capacity{Units: 16}, Capacity{}, factory, nil), BlockKeys: true})
	require.NoError(t, err)
	a, err := c.Acquire(Request{Tokens: seqTokens(4, 0)})
	require.NoError(t, err)
	finish(t, c, a.Seq)
	total := func() int {
		n := 0
		for _, k := range (*gpp).accesses {
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
	require.Len(t, (*gpp).accesses, 1, "on the block's key")
	require.NoError(t, c.Release(d.Seq))
}

// queueEngineCache returns a cache over l and tiers whose transfers go
// through a queueEngine (with block keys when bk), the engine, and dense,
// which serves a dense prompt: Acquire, every transfer completed, the
// prompt committed and released (finish), and the transfers completed
// again; it returns the Acquire's plan.
func queueEngineCache(t *testing.T, l *layout.Layout, tiers []TierConfig, bk bool) (*Cache, *queueEngine, func([]uint32) Plan) {
	t.Helper()
	store, err := NewMemoryStore(l, tiers)
	require.NoError(t, err)
	e := &queueEngine{store: store}
	c, err := New(Config{Layout: l, Tiers: tiers, Engine: e, BlockKeys: bk})
	require.NoError(t, err)
	return c, e, func(tokens []uint32) Plan {
		p, err := c.Acquire(Request{Tokens: tokens})
		require.NoError(t, err)
		e.completeAll(t, c)
		finish(t, c, p.Seq)
		e.completeAll(t, c)
		return p
	}
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
			c, e, dense := queueEngineCache(t, l, GPUAndCPU(Capacity{Units: 12}, Capacity{Units: 16}), bk)
			X, Y, W := seqTokens(4, 1000), seqTokens(4, 2000), seqTokens(12, 3000)
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

// brokenAfterPanic panics in Access once armed, and in every call after
// that (Len included): a user policy whose state its panic left broken.
type brokenAfterPanic struct {
	eviction.Policy[UnitID]
	armed, broken bool
}

func (p *brokenAfterPanic) Access(k UnitID) {
	if p.armed {
		p.broken = true
		panic("Access bug")
	}
	p.Policy.Access(k)
}

func (p *brokenAfterPanic) Len() int {
	if p.broken {
		panic("Len of a broken policy")
	}
	return p.Policy.Len()
}

// A policy that panicked is not called again and the cache contains its
// panic (ErrPolicy): under block keys the metadata estimate of every
// call's Stats called the broken policy's Len, unguarded (found by a
// review); the arena counts its keys instead.
func TestBlockKeysBrokenPolicyNotCalledByStats(t *testing.T) {
	for _, bk := range []bool{false, true} {
		t.Run(keysName(bk), func(t *testing.T) {
			l := blockKeysLayout(t, 4)
			factory, gpp := gpuPolicy(func() *brokenAfterPanic { return &brokenAfterPanic{Policy: eviction.NewLRU[UnitID]()} })
			c, err := New(Config{Layout: l, Tiers: tiersOf(Capacity{Units: 16}, Capacity{}, factory, nil), BlockKeys: bk})
			require.NoError(t, err)
			gp := *gpp
			a, err := c.Acquire(Request{Tokens: seqTokens(8, 0)})
			require.NoError(t, err)
			finish(t, c, a.Seq)
			gp.armed = true
			require.NotPanics(t, func() {
				_, err = c.Acquire(Request{Tokens: seqTokens(8, 0)})
			})
			require.ErrorIs(t, err, ErrPolicy)
		})
	}
}

// A long Acquire reports a block's hits once, as a short one does (found
// by a review: a block whose hits two of its steps shared was reported
// twice).
func TestBlockKeysLongAcquireHitsOncePerBlock(t *testing.T) {
	for _, slice := range []int{1024, 3} {
		t.Run(map[int]string{1024: "short", 3: "long"}[slice], func(t *testing.T) {
			l := blockKeysLayout(t, 4) // 4 units per block
			factory, gpp := gpuAccessCounter()
			c, err := New(Config{Layout: l, Tiers: tiersOf(Capacity{Units: 32}, Capacity{}, factory, nil), BlockKeys: true})
			require.NoError(t, err)
			a, err := c.Acquire(Request{Tokens: seqTokens(8, 0)})
			require.NoError(t, err)
			finish(t, c, a.Seq)
			c.sliceUnits = slice
			d, err := c.Acquire(Request{Tokens: seqTokens(9, 0)}) // 2 cached blocks hit, 8 units
			require.NoError(t, err)
			require.Equal(t, 8, d.Hits)
			require.Len(t, (*gpp).accesses, 2)
			for k, n := range (*gpp).accesses {
				require.Equal(t, 1, n, "block key %d reported %d times", k, n)
			}
		})
	}
}

// Under BSA a SparseAccess's needs run KV head by KV head: each block hit
// is reported once all the same (found by a review: once per head, 4
// Access calls for 2 blocks here).
func TestBlockKeysSparseHitsOncePerBlock(t *testing.T) {
	l := tinyLayout(t, layout.BSA, nil) // 2 layers x 2 KV heads: 4 units per block, one pool
	factory, gpp := gpuAccessCounter()
	c, err := New(Config{Layout: l, Tiers: tiersOf(Capacity{Units: 32}, Capacity{}, factory, nil), BlockKeys: true})
	require.NoError(t, err)
	a, err := c.Acquire(Request{Tokens: seqTokens(8, 0)})
	require.NoError(t, err)
	finish(t, c, a.Seq)
	s, err := c.Acquire(Request{Tokens: seqTokens(9, 0), Sparse: true})
	require.NoError(t, err)
	sel := Selection{Layer: 0, Blocks: [][]int{{0, 1}, {0, 1}}}
	var res SparseResult
	require.NoError(t, c.SparseAccess(s.Seq, sel, &res))
	require.Equal(t, 4, res.Hits)
	n := 0
	for _, k := range (*gpp).accesses {
		n += k
	}
	require.Equal(t, 2, n, "Access calls for 2 blocks hit: %v", (*gpp).accesses)
}

// With an Engine and a free-slot count that is not a multiple of a block,
// the Acquire of one new block takes the 2 free slots and evicts block A,
// of whose 4 units it takes 2: A moves to the CPU whole, and is reused
// (found by a review: with no reservation to keep, 2 of its units were
// dropped and 2 moved, and A was recomputed).
func TestBlockKeysEvictionKeepsBlocksWhole(t *testing.T) {
	for _, bk := range []bool{false, true} {
		t.Run(keysName(bk), func(t *testing.T) {
			c, _, dense := queueEngineCache(t, blockKeysLayout(t, 4), GPUAndCPU(Capacity{Units: 14}, Capacity{Units: 32}), bk) // 4 units per block
			A := seqTokens(4, 1000)
			dense(A)
			dense(seqTokens(4, 2000))
			dense(seqTokens(4, 3000)) // 12 units used, 2 free
			dense(seqTokens(4, 4000)) // 2 free + 2 of A's slots
			p := dense(append(slices.Clone(A), 7))
			require.NoError(t, c.checkInvariants())
			require.Zero(t, p.RecomputeTokens, "A was evicted whole to make room for 2 units: %+v", p.Counts)
			require.Equal(t, 4, p.ReusedTokens)
		})
	}
}
