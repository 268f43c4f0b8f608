package kvcache

import (
	"github.com/kvtier/kvtier/eviction"
)

// noUnit marks a free slot in arena.owner.
const noUnit = ^UnitID(0)

// arena is the slot memory of one (tier, pool): a fixed number of unit-sized
// slots addressed by int32, a free-list stack, the unit each used slot
// holds, and the policy that orders the arena's evictable units.
//
// Counting: used = len(owner) - len(free) slots hold a unit. Outside an
// operation every used slot's unit is tracked by the policy (tracked ==
// used), and pinned of them are pinned, so free + pinned + evictable adds up
// to the capacity. During an operation slots handed to new residents are
// used but not yet tracked: they are inserted when the operation commits.
type arena struct {
	tier    Tier
	pool    int
	free    []int32
	owner   []UnitID
	policy  eviction.Policy[UnitID]
	tracked int
	pinned  int
	// tellHits says whether hits are reported to the policy (see
	// tellsHits).
	tellHits bool

	// counters for Stats
	hits, misses, evictions, drops uint64
}

func newArena(tier Tier, pool, slots int, p eviction.Policy[UnitID]) *arena {
	a := &arena{tier: tier, pool: pool, policy: p, tellHits: tellsHits(p),
		free: make([]int32, slots), owner: make([]UnitID, slots)}
	for i := range a.free {
		// Pop order is slot 0 first: slots fill from the bottom.
		a.free[i] = int32(slots - 1 - i)
		a.owner[i] = noUnit
	}
	return a
}

func (a *arena) capacity() int { return len(a.owner) }

// evictable is the number of tracked units that are not pinned.
func (a *arena) evictable() int { return a.tracked - a.pinned }

// available is how many slots an operation can still obtain: free ones plus
// those an eviction could empty.
func (a *arena) available() int { return len(a.free) + a.evictable() }

// pop takes a free slot; ok is false when none is free.
func (a *arena) pop() (int32, bool) {
	n := len(a.free)
	if n == 0 {
		return 0, false
	}
	s := a.free[n-1]
	a.free = a.free[:n-1]
	return s, true
}

// push returns slot s to the free list.
func (a *arena) push(s int32) {
	a.owner[s] = noUnit
	a.free = append(a.free, s)
}

// insert starts tracking u, pinned or not. It fails only when the policy
// refuses the key (a full policy, or a custom policy's own rule).
func (a *arena) insert(u UnitID, e eviction.Entry, pinned bool) error {
	if err := a.policy.Insert(u, e); err != nil {
		return err
	}
	a.tracked++
	if pinned {
		a.policy.Pin(u)
		a.pinned++
	}
	return nil
}

func (a *arena) pin(u UnitID) {
	a.policy.Pin(u)
	a.pinned++
}

func (a *arena) unpin(u UnitID) {
	a.policy.Unpin(u)
	a.pinned--
}

// remove stops tracking u; pinned says whether it was pinned.
func (a *arena) remove(u UnitID, pinned bool) {
	a.policy.Remove(u)
	a.tracked--
	if pinned {
		a.pinned--
	}
}

// tellsHits reports whether the cache calls p.Access for a hit. The hit is
// reported after the unit is pinned, so a policy that declares, through
// eviction.PinnedAccessIgnorer, that Access of a pinned key changes nothing
// is spared the call: a lookup per hit, about 15% of a mostly-hit Acquire
// (BENCHMARKS.md). Every other policy, a user's wrapper around one of those
// included, is told every hit.
func tellsHits(p eviction.Policy[UnitID]) bool {
	c, ok := p.(eviction.PinnedAccessIgnorer)
	return !ok || !c.IgnoresPinnedAccess()
}

// evict asks the policy for a victim.
func (a *arena) evict() (UnitID, bool) {
	u, ok := a.policy.Evict()
	if ok {
		a.tracked--
	}
	return u, ok
}
