package kvcache

import (
	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/internal/chunked"
)

// arena is the slot memory of one tier in one pool: a fixed number of
// unit-sized slots addressed by int32, a free-list stack, the unit each used
// slot holds, and the policy that orders the arena's evictable units (with
// namespaces' shares, one policy per namespace with a share and this one
// for the rest: see shares.go).
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
	// reserved counts the slots that long operations under way were
	// promised and have not taken yet (see slices.go): no other operation
	// may take them.
	reserved int
	// txPinned marks the slots whose unit the running transaction pinned
	// in this arena while it stays resident here: units of a lower tier
	// being onboarded or recomputed and copy-on-write sources. Their pins
	// live in the policy only (unitTable.pins counts GPU pins), so this is
	// how isVictim refuses them if the policy returns one anyway.
	txPinned []bool
	// tellHits says whether hits are reported to the policy (see
	// tellsHits).
	tellHits bool
	// pinnedInserter is the policy when it can insert a key pinned in one
	// call (eviction.PinnedInserter).
	pinnedInserter eviction.PinnedInserter[UnitID]
	// forgetter is the policy when it keeps history of keys it no longer
	// tracks (eviction.Forgetter): it hears of the units of forgotten
	// blocks (see Cache.forgetRecord).
	forgetter eviction.Forgetter[UnitID]
	// txPolicy is the policy when it implements eviction.Transactional:
	// a rollback then undoes the policy's calls exactly (see rollback).
	txPolicy eviction.Transactional
	// broken is the panic of the policy, once it has panicked: its state
	// is unknown, so it is not called again (the cache is poisoned).
	broken *PanicError
	// replaying is set while a rollback replays the undo log of a
	// transactional policy, which undoes its own calls.
	replaying bool
	// cache is the owner, poisoned when the policy panics.
	cache *Cache
	// tenants is the namespaces' shares of the arena (TierConfig.Shares,
	// see shares.go): a policy per namespace with a share and the slots
	// each holds. Nil without shares.
	tenants *arenaTenants

	// keyUnits is the number of units one policy key stands for: 1, or
	// the pool's units per block under Config.BlockKeys (see
	// blockkeys.go), when the policy's key for a unit is the UnitID of
	// slice keySlice of its block. groups counts each block's tracked and
	// pinned units, stuck the tracked units no eviction can take while
	// another unit of their block is pinned; spare holds the slots the
	// running operation emptied by evicting a whole block and has not
	// used yet, and victims is the scratch of evictBlock.
	keyUnits, keySlice int
	groups             chunked.Array[groupCount]
	stuck              int
	keys               int // blocks with a tracked unit: the policy's keys
	spare              []spareSlot
	spareNext          int // the next spare slot to take
	victims            []UnitID
	// lastGroup and lastCount are the block group last looked up and its
	// counts (which never move: see chunked.Array).
	lastGroup int32
	lastCount *groupCount

	// counters for Stats
	hits, misses, evictions, drops, lost uint64
	// moved counts the units this arena received from the tier above;
	// failed the transfers into it that failed (see transfers.go).
	moved, failed uint64
	// backups counts the backups the arena holds, backupsWritten those
	// it received (see writethrough.go).
	backups        int
	backupsWritten uint64
	// missing and corrupt count the units of loads from this arena that
	// failed for those reasons (TierStats.Missing, Corrupt), adopted
	// those Cache.Adopt placed here.
	missing, corrupt, adopted uint64
}

func newArena(c *Cache, tier Tier, pool, slots int, p eviction.Policy[UnitID]) *arena {
	tp, _ := p.(eviction.Transactional)
	pi, _ := p.(eviction.PinnedInserter[UnitID])
	fg, _ := p.(eviction.Forgetter[UnitID])
	a := &arena{cache: c, tier: tier, pool: pool, policy: p, tellHits: tellsHits(p), txPolicy: tp, pinnedInserter: pi, forgetter: fg,
		free: make([]int32, slots), owner: make([]UnitID, slots), txPinned: make([]bool, slots)}
	for i := range a.free {
		// Pop order is slot 0 first: slots fill from the bottom.
		a.free[i] = int32(slots - 1 - i)
		a.owner[i] = noUnit
	}
	return a
}

func (a *arena) capacity() int { return len(a.owner) }

// evictable is the number of tracked units an eviction could take: not
// pinned, and (under block keys) of a block none of whose units is.
func (a *arena) evictable() int { return a.tracked - a.pinned - a.stuck }

// available is how many slots an operation can still obtain: free ones plus
// those an eviction could empty, less those promised to long operations
// (reserved). An operation that holds a reservation adds its own share
// back (see stage).
func (a *arena) available() int {
	return len(a.free) + len(a.spare) - a.spareNext + a.evictable() - a.reserved
}

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
	a.setOwner(s, noUnit)
	a.txPinned[s] = false
	a.free = append(a.free, s)
}

// muted reports whether the arena's policy is not to be called: it has
// panicked (broken), or a rollback it undoes itself is replaying.
func (a *arena) muted() bool { return a.broken != nil || a.replaying }

// insert starts tracking u, pinned or not. It fails only when the policy
// refuses the key (a full policy, or a custom policy's own rule); a policy
// that panics (or has) is no longer asked, and the arena counts u as
// tracked all the same, so that the accounting stays exact.
func (a *arena) insert(u UnitID, e eviction.Entry, pinned bool) error {
	if a.grouped() {
		return a.groupInsert(u, e, pinned)
	}
	if pinned && a.pinnedInserter != nil {
		if err := a.policyInsertPinned(u, e); err != nil && a.broken == nil {
			return err
		}
		a.track(u, true)
		return nil
	}
	if err := a.policyInsert(u, e); err != nil && a.broken == nil {
		return err
	}
	if pinned {
		a.policyPin(u)
	}
	a.track(u, pinned)
	return nil
}

// track counts one more unit, u, as tracked (pinned or not) without
// telling the policy, which refused it: the cache is poisoned, and its
// accounting stays exact.
func (a *arena) track(u UnitID, pinned bool) {
	if a.grouped() {
		dp := int32(0)
		if pinned {
			dp = 1
		}
		a.change(u, 1, dp)
	}
	a.tracked++
	if pinned {
		a.pinned++
	}
	if a.tenants != nil {
		a.countTracked(u, 1, b2i(pinned))
	}
}

func (a *arena) pin(u UnitID) {
	if a.grouped() {
		a.groupPin(u)
	} else {
		a.policyPin(u)
	}
	a.pinned++
	if a.tenants != nil {
		a.countTracked(u, 0, 1)
	}
}

func (a *arena) unpin(u UnitID) {
	if a.grouped() {
		a.groupUnpin(u)
	} else {
		a.policyUnpin(u)
	}
	a.pinned--
	if a.tenants != nil {
		a.countTracked(u, 0, -1)
	}
}

// pinResident pins u, which holds slot s of the arena, for the running
// transaction (see txPinned). tell is false when the policy has u pinned
// already (a transfer holds it): a policy's pin is a flag, not a count.
func (a *arena) pinResident(u UnitID, s int32, tell bool) {
	if tell {
		a.pin(u)
	}
	a.txPinned[s] = true
}

// unpinResident undoes pinResident.
func (a *arena) unpinResident(u UnitID, s int32, tell bool) {
	if tell {
		a.unpin(u)
	}
	a.txPinned[s] = false
}

// remove stops tracking u; pinned says whether it was pinned.
func (a *arena) remove(u UnitID, pinned bool) {
	if a.grouped() {
		a.groupRemove(u, pinned)
	} else {
		a.policyRemove(u)
	}
	a.tracked--
	if pinned {
		a.pinned--
	}
	if a.tenants != nil {
		a.countTracked(u, -1, -b2i(pinned))
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
	u, ok := a.policyEvict()
	if ok {
		a.tracked--
		if a.tenants != nil {
			a.countTracked(u, -1, 0)
		}
	}
	return u, ok
}

// access reports a hit on u to the policy: under block keys, on its
// block's key, once per block among the hits seen records (the caller's
// operation: a set it clears when the operation starts reporting).
func (a *arena) access(u UnitID, seen map[UnitID]struct{}) {
	if a.grouped() {
		k := a.keyOf(u)
		if _, ok := seen[k]; ok {
			return
		}
		seen[k] = struct{}{}
		u = k
	}
	a.policyAccess(u)
}

// forget tells a policy that keeps history that u is gone for good (see
// Cache.forgetRecord); under block keys, once per block.
func (a *arena) forget(u UnitID) {
	if a.grouped() && a.cache.units.slice(u) != a.keySlice {
		return
	}
	a.policyForget(u)
}

// b2i returns 1 for true, 0 for false.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
