package kvcache

import (
	"errors"
	"fmt"
	"testing"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/layout"
	"github.com/kvtier/kvtier/radix"
	"github.com/stretchr/testify/require"
)

// errRefused is what refusingPolicy returns.
var errRefused = errors.New("refusing policy: insert refused")

// refusingPolicy is an LRU that refuses its refuseAt-th Insert (counted
// from 1; 0 never), breaking the contract PolicyFactory states.
type refusingPolicy struct {
	eviction.Policy[UnitID]
	inserts  int
	refuseAt int
}

func (p *refusingPolicy) Insert(k UnitID, e eviction.Entry) error {
	p.inserts++
	if p.inserts == p.refuseAt {
		return fmt.Errorf("%w (insert %d)", errRefused, p.inserts)
	}
	return p.Policy.Insert(k, e)
}

// refusingCache builds a paged cache (one pool) whose policies are
// refusingPolicy values over LRU, or FIFO when fifo is set, returned for
// the test to arm.
func refusingCache(t *testing.T, gpu, cpu Capacity, mover Mover, fifo bool) (*Cache, *refusingPolicy, *refusingPolicy) {
	t.Helper()
	l := tinyLayout(t, layout.PagedLayer, nil)
	var gp, cp *refusingPolicy
	factory := func(info PoolInfo) (eviction.Policy[UnitID], error) {
		p := &refusingPolicy{Policy: eviction.NewLRU[UnitID]()}
		if fifo {
			p.Policy = eviction.NewFIFO[UnitID]()
		}
		if info.Tier == GPU {
			gp = p
		} else {
			cp = p
		}
		return p, nil
	}
	c, err := New(Config{Layout: l, Tiers: tiersOf(gpu, cpu, factory, factory), Mover: mover})
	require.NoError(t, err)
	return c, gp, cp
}

// requireSlotsAddUp checks that every slot of every tier is free, pinned
// or cached: what must hold even in a poisoned cache. Unless a policy
// refused a unit placed at commit (which stays, untracked by it), every
// policy also tracks its arena's units: policies says whether to check.
func requireSlotsAddUp(t *testing.T, c *Cache, policies bool) {
	t.Helper()
	st := c.Stats()
	for _, ts := range st.Tiers {
		require.Equal(t, ts.Capacity, ts.Free+ts.Pinned+ts.Cached)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tiers.each(func(a *arena) {
		require.Equal(t, a.capacity()-len(a.free), a.tracked, "%s pool %d: used slots and tracked units", a.tier, a.pool)
		if policies {
			require.Equal(t, a.tracked, a.policy.Len(), "%s pool %d: tracked units and policy", a.tier, a.pool)
		}
	})
}

// requirePoisoned checks that every call that changes the cache now fails
// with ErrPolicy naming the policy's error, and that reads still answer.
func requirePoisoned(t *testing.T, c *Cache, live SeqID) {
	t.Helper()
	check := func(err error) {
		t.Helper()
		require.ErrorIs(t, err, ErrPolicy)
		require.ErrorIs(t, err, errRefused)
	}
	_, err := c.Acquire(Request{Tokens: seqTokens(4, 500)})
	check(err)
	_, err = c.Admit(Request{Tokens: seqTokens(4, 500)})
	check(err)
	_, err = c.Append(live, 1)
	check(err)
	_, err = c.Truncate(live, 1)
	check(err)
	_, err = c.Fork(live)
	check(err)
	var res SparseResult
	check(c.SparseAccess(live, Selection{Blocks: make([][]int, 2)}, &res))
	check(c.Commit(live, 0))
	check(c.Release(live))
	check(c.Abort(live))
	check(c.Clear())
	_ = c.Stats()
	_, err = c.Len(live)
	require.NoError(t, err, "reads still answer")
	_, err = c.BlockTable(nil, live, 0)
	require.NoError(t, err)
}

// TestPolicyRefusesReinsertOnRollback: a copy failure rolls back an Acquire
// that evicted two victims; the policy refuses to take the first of them
// back. The cache drops that victim (its slot is freed) instead of
// panicking and is poisoned.
func TestPolicyRefusesReinsertOnRollback(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	gpu, cpu := Capacity{Units: 4}, Capacity{Units: 8}
	store, err := NewMemoryStore(l, GPUAndCPU(gpu, cpu))
	require.NoError(t, err)
	mover := &faultyMover{inner: store}
	c, gp, _ := refusingCache(t, gpu, cpu, mover, false)
	a, err := c.Acquire(Request{Tokens: seqTokens(8, 0)}) // GPU inserts 1-4
	require.NoError(t, err)
	finish(t, c, a.Seq)
	live, err := c.Acquire(Request{}) // an empty sequence, to call methods on
	require.NoError(t, err)
	// The policies hear of the fresh units only at commit; the failed
	// copy rolls back and re-inserts the two victims: insert 5 is refused.
	gp.refuseAt = 5
	mover.armed = true
	var p Plan
	require.NotPanics(t, func() { p, err = c.Acquire(Request{Tokens: seqTokens(4, 100)}) })
	require.ErrorIs(t, err, ErrPolicy)
	require.ErrorIs(t, err, errRefused)
	require.NotErrorIs(t, err, ErrCopyFailed, "exactly one sentinel")
	require.ErrorContains(t, err, "copy failed")
	require.Zero(t, p.Seq)
	require.Equal(t, 6, gp.inserts)
	// The refused victim was dropped; the other went back to its slot.
	require.NoError(t, c.checkInvariants())
	requireSlotsAddUp(t, c, true)
	st := c.Stats()
	require.Equal(t, uint64(1), st.Tier(GPU).Drops)
	require.Equal(t, int64(3), st.Tier(GPU).Cached)
	require.Equal(t, int64(1), st.Tier(GPU).Free)
	require.Zero(t, st.Tier(CPU).Cached+st.Tier(CPU).Pinned, "the offloads were rolled back")
	requirePoisoned(t, c, live.Seq)
}

// TestPolicyRefusesNeededUnit: the GPU policy refuses a fresh unit. Its
// policy hears of it when the operation commits, after its copies: the
// Acquire is done (a breach met during a commit does not roll back), the
// cache is poisoned, and the unit is accounted for in its slot.
func TestPolicyRefusesNeededUnit(t *testing.T) {
	c, gp, _ := refusingCache(t, Capacity{Units: 8}, Capacity{}, nil, false)
	live, err := c.Acquire(Request{Tokens: seqTokens(4, 0)}) // inserts 1, 2 (never committed)
	require.NoError(t, err)
	gp.refuseAt = 4
	p, err := c.Acquire(Request{Tokens: seqTokens(8, 0)}) // computes two blocks: inserts 3 to 6
	require.ErrorIs(t, err, ErrPolicy)
	require.ErrorIs(t, err, errRefused)
	require.NotErrorIs(t, err, ErrInvalidConfig)
	require.NoError(t, c.checkAccounting(false))
	requireSlotsAddUp(t, c, false)
	st := c.Stats()
	require.Equal(t, int64(6), st.Tier(GPU).Pinned, "both sequences' units, the refused one included")
	require.Equal(t, 2, st.Sequences)
	tb, err := c.BlockTable(nil, p.Seq, 0)
	require.NoError(t, err)
	require.NotContains(t, tb, int32(-1), "the second sequence has its slots")
	requirePoisoned(t, c, live.Seq)
}

// TestPolicyRefusesOffload: the CPU policy refuses a GPU victim moved into
// the slot of a CPU victim it dropped. Its policy hears of it at commit,
// after the copy: the operation is done, the cache poisoned, and the moved
// unit accounted for in its CPU slot. (Before ErrPolicy, the cache dropped
// the GPU victim instead but also committed the CPU victim's drop although
// the CPU victim had been put back: its slot was both free-able and
// tracked.)
func TestPolicyRefusesOffload(t *testing.T) {
	c, _, cp := refusingCache(t, Capacity{Units: 4}, Capacity{Units: 4}, nil, false)
	// Fill the GPU, then the CPU with offloads.
	a, err := c.Acquire(Request{Tokens: seqTokens(8, 0)})
	require.NoError(t, err)
	finish(t, c, a.Seq)
	b, err := c.Acquire(Request{Tokens: seqTokens(8, 100)}) // offloads a: CPU inserts 1-4
	require.NoError(t, err)
	require.Equal(t, 4, b.Offloaded)
	finish(t, c, b.Seq)
	live, err := c.Acquire(Request{})
	require.NoError(t, err)
	cp.refuseAt = 5 // the next offload, into the slot of a dropped CPU victim
	_, err = c.Acquire(Request{Tokens: seqTokens(4, 200)})
	require.ErrorIs(t, err, ErrPolicy)
	require.ErrorIs(t, err, errRefused)
	require.NoError(t, c.checkAccounting(false))
	requireSlotsAddUp(t, c, false)
	st := c.Stats()
	require.Equal(t, int64(4), st.Tier(CPU).Cached, "the CPU is full: the refused unit holds its slot")
	require.Equal(t, uint64(6), st.Offloads, "4 before, 2 by the failed call")
	requirePoisoned(t, c, live.Seq)
}

// TestPolicyRefusesMerge: a sequence fills a block equal to one committed
// meanwhile whose units left the GPU (offloaded, or dropped and kept in the
// tree for its child); when it commits the block, adopting the cached one
// swaps keys in the GPU policy, which refuses. Commit fails with ErrPolicy
// instead of panicking, every slot stays accounted for and the cache is
// poisoned.
func TestPolicyRefusesMerge(t *testing.T) {
	for _, cpu := range []Capacity{{Units: 8}, {}} {
		t.Run(fmt.Sprintf("cpu-%d", cpu.Units), func(t *testing.T) {
			c, gp, _ := refusingCache(t, Capacity{Units: 6}, cpu, nil, true)
			s1, err := c.Acquire(Request{Tokens: seqTokens(3, 0)}) // private partial block: inserts 1, 2
			require.NoError(t, err)
			s2, err := c.Acquire(Request{Tokens: seqTokens(8, 0)}) // blocks 0, 1: inserts 3-6
			require.NoError(t, err)
			finish(t, c, s2.Seq) // committed
			// FIFO evicts s2's block 0 (inserts 7, 8); it stays in the
			// tree, on the CPU or dropped under block 1.
			s3, err := c.Acquire(Request{Tokens: seqTokens(4, 100)})
			require.NoError(t, err)
			require.Equal(t, 2, s3.Offloaded+s3.Dropped)
			require.Equal(t, 2, c.Stats().Blocks, "s2's block 0 is still known")
			_, err = c.Append(s1.Seq, 3) // fills block 0, private until committed
			require.NoError(t, err)
			gp.refuseAt = 9
			require.NotPanics(t, func() { err = c.Commit(s1.Seq, 4) })
			require.ErrorIs(t, err, ErrPolicy)
			require.ErrorIs(t, err, errRefused)
			require.Equal(t, 10, gp.inserts, "the second unit of the block was adopted")
			requireAccountingExact(t, c)
			requirePoisoned(t, c, s3.Seq)
		})
	}
}

// tierPolicy returns a factory of LRU policies, each wrapped by wrap, and a
// function that returns the one built for tier.
func tierPolicy[P eviction.Policy[UnitID]](tier Tier, wrap func(eviction.Policy[UnitID]) P) (PolicyFactory, func() P) {
	var got P
	return func(info PoolInfo) (eviction.Policy[UnitID], error) {
		p := wrap(eviction.NewLRU[UnitID]())
		if info.Tier == tier {
			got = p
		}
		return p, nil
	}, func() P { return got }
}

// newLying wraps p in a lyingPolicy.
func newLying(p eviction.Policy[UnitID]) *lyingPolicy { return &lyingPolicy{Policy: p} }

// lyingPolicy is an LRU whose Evict, once armed, returns lie instead of a
// victim (without evicting anything), or reports no victim when none is set.
type lyingPolicy struct {
	eviction.Policy[UnitID]
	armed bool
	lie   func() (UnitID, bool)
}

func (p *lyingPolicy) Evict() (UnitID, bool) {
	if p.armed {
		p.armed = false
		return p.lie()
	}
	return p.Policy.Evict()
}

// TestPolicyEvictsWhatItMustNot: a GPU policy whose Evict returns a key
// that is no evictable unit of its arena (garbage, a pinned unit, a unit of
// the other tier) or no victim although it tracks evictable units poisons
// the cache instead of panicking on a bad index or handing out a slot in
// use.
func TestPolicyEvictsWhatItMustNot(t *testing.T) {
	for name, lie := range map[string]func(c *Cache, pinned, cpu UnitID) (UnitID, bool){
		"out of range": func(*Cache, UnitID, UnitID) (UnitID, bool) { return 1 << 40, true },
		"no unit":      func(*Cache, UnitID, UnitID) (UnitID, bool) { return ^UnitID(0), true },
		"bad slice":    func(*Cache, UnitID, UnitID) (UnitID, bool) { return 3, true },
		"pinned":       func(_ *Cache, pinned, _ UnitID) (UnitID, bool) { return pinned, true },
		"cpu unit":     func(_ *Cache, _, cpu UnitID) (UnitID, bool) { return cpu, true },
		"none":         func(*Cache, UnitID, UnitID) (UnitID, bool) { return 0, false },
	} {
		t.Run(name, func(t *testing.T) {
			// Three layers: three slices per block in a 2-bit slice
			// field, so slice 3 does not exist.
			m := layout.Model{Name: "tiny3", Layers: 3, QueryHeads: 4, KVHeads: 2, HeadDim: 2, ElemBytes: 1}
			l, err := layout.New(m, layout.PagedLayer, 4)
			require.NoError(t, err)
			factory, lying := tierPolicy(GPU, newLying)
			c, err := New(Config{Layout: l, Tiers: tiersOf(Capacity{Units: 6}, Capacity{Units: 6}, factory, nil)})
			require.NoError(t, err)
			// One block offloaded to the CPU, one pinned, one cached.
			a, err := c.Acquire(Request{Tokens: seqTokens(4, 0)})
			require.NoError(t, err)
			finish(t, c, a.Seq)
			b, err := c.Acquire(Request{Tokens: seqTokens(8, 100)})
			require.NoError(t, err)
			finish(t, c, b.Seq)
			live, err := c.Acquire(Request{Tokens: seqTokens(4, 100)})
			require.NoError(t, err)
			c.mu.Lock()
			pinned := c.units.id(c.seqs[live.Seq].blocks[0], 0)
			var cpu UnitID
			for b := range c.units.records() {
				for sl := range c.geom.slices {
					if u := c.units.id(b, sl); c.units.tierOf(u) == CPU {
						cpu = u
					}
				}
			}
			c.mu.Unlock()
			require.Equal(t, int64(3), c.Stats().Tier(CPU).Cached)
			gp := lying()
			gp.lie = func() (UnitID, bool) { return lie(c, pinned, cpu) }
			gp.armed = true
			before := c.Stats()
			require.NotPanics(t, func() { _, err = c.Acquire(Request{Tokens: seqTokens(4, 200)}) })
			require.ErrorIs(t, err, ErrPolicy)
			require.ErrorContains(t, err, "Evict")
			require.Equal(t, before, c.Stats())
			require.NoError(t, c.checkInvariants(), "the lie took nothing from the policy: exact rollback")
			_, err = c.Append(live.Seq, 1)
			require.ErrorIs(t, err, ErrPolicy)
		})
	}
}

// TestCPUPolicyEvictsGarbage: the CPU policy's Evict returns a key that is
// no unit at all while the cache makes room for an offload.
func TestCPUPolicyEvictsGarbage(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	var cp *lyingPolicy
	factory := func(info PoolInfo) (eviction.Policy[UnitID], error) {
		p := &lyingPolicy{Policy: eviction.NewLRU[UnitID](), lie: func() (UnitID, bool) { return 1 << 40, true }}
		if info.Tier == CPU {
			cp = p
		}
		return p, nil
	}
	c, err := New(Config{Layout: l, Tiers: tiersOf(Capacity{Units: 4}, Capacity{Units: 2}, factory, factory)})
	require.NoError(t, err)
	a, err := c.Acquire(Request{Tokens: seqTokens(4, 0)})
	require.NoError(t, err)
	finish(t, c, a.Seq)
	b, err := c.Acquire(Request{Tokens: seqTokens(8, 100)}) // offloads a: the CPU is full
	require.NoError(t, err)
	require.Equal(t, 2, b.Offloaded)
	finish(t, c, b.Seq)
	before := c.Stats()
	cp.armed = true
	require.NotPanics(t, func() { _, err = c.Acquire(Request{Tokens: seqTokens(4, 200)}) })
	require.ErrorIs(t, err, ErrPolicy)
	require.ErrorContains(t, err, "cpu policy of pool 0: Evict returned 1099511627776")
	require.Equal(t, before, c.Stats())
	require.NoError(t, c.checkInvariants())
}

// TestCPUPolicyEvictsAPinnedUnit: the CPU policy's Evict returns a unit the
// running operation has pinned in the CPU arena (a unit being onboarded)
// while the cache makes room there for a GPU victim's offload. Before the
// pin check covered the CPU arena, the victim's offload took the onboard
// source's slot (the onboard then read the victim's bytes) and the commit
// pushed slot -1 and panicked. It must be ErrPolicy with nothing changed.
func TestCPUPolicyEvictsAPinnedUnit(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil) // two units per block
	gpu, cpu := Capacity{Units: 4}, Capacity{Units: 4}
	store, err := NewMemoryStore(l, GPUAndCPU(gpu, cpu))
	require.NoError(t, err)
	factory, lying := tierPolicy(CPU, newLying)
	c, err := New(Config{Layout: l, Tiers: tiersOf(gpu, cpu, factory, factory), Mover: store})
	require.NoError(t, err)
	x := seqTokens(4, 0)
	for _, base := range []uint32{0, 100, 200, 300} {
		// x, then three blocks that push x and the next one to the CPU.
		p, err := c.Acquire(Request{Tokens: seqTokens(4, base)})
		require.NoError(t, err)
		finish(t, c, p.Seq)
	}
	st := c.Stats()
	require.Equal(t, int64(4), st.Tier(CPU).Cached, "x and the second block are on the CPU")
	c.mu.Lock()
	nodes, err := c.tree.Match(nil, radix.Keys{}, x, nil)
	require.NoError(t, err)
	onboarding := c.units.id(nodes[0].Value, 0)
	require.Equal(t, CPU, c.units.of(onboarding).tier)
	c.mu.Unlock()
	cp := lying()
	cp.lie = func() (UnitID, bool) { return onboarding, true }
	cp.armed = true
	before := c.Stats()
	require.NotPanics(t, func() { _, err = c.Acquire(Request{Tokens: x}) })
	require.ErrorIs(t, err, ErrPolicy)
	require.ErrorContains(t, err, "cpu policy of pool 0: Evict returned")
	require.Equal(t, before, c.Stats())
	require.NoError(t, c.checkInvariants())
}
