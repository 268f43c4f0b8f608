package kvcache

import (
	"fmt"

	"github.com/kvtier/kvtier/eviction"
)

// Block keys (Config.BlockKeys): the policy of an arena whose pool has
// several units per block tracks one key per block instead of one per unit.
//
// Why: under a per-layer layout a block is tens of units (28 for a 28-layer
// model), and the units of a block in one pool are placed, pinned, released
// and evicted together on every common path. Paying a policy call, its
// panic guard and its index lookup per unit made a miss or a decode step
// cost per unit what the all-layers layout pays per block. With block keys
// the arena counts per block how many of its units it tracks and how many
// of those its policy would have pinned, and tells the policy only when a
// block's count changes between zero and not zero: Insert of a block's
// first unit, Remove of its last, Pin of its first pinned unit, Unpin of
// its last. The key is the UnitID of the block's first unit in the pool
// (keySlice), so the policies and their indexes see ordinary UnitIDs.
//
// What changes for eviction: a block's units leave a tier together. A
// block is evictable only when none of its units there is pinned, so an
// unpinned unit of a block whose other units are pinned is not evictable:
// stuck counts them, and a capacity check counts a pin it plans by its
// effect on the block (pinEffect). Eviction takes every unit of the block
// the arena tracks; the slots the operation does not need at once wait in
// spare for its next placements in that arena (see spareSlot). With an
// Engine, a slot the operation does not take stays its victim's until the
// victim's move down is done (releaseSpare): on the GPU, where a long
// operation's reservation may count on that capacity, a block the
// operation will not use whole is dropped instead, whole. Where units of a block really differ
// (sparse access that pins a few units of a block, a transfer that failed
// for one layer) the per-unit state is unchanged: only eviction is per
// block.

// groupCount is what an arena with block keys keeps of one block record:
// tracked of its units are tracked by the arena, pinned of those are
// pinned in its policy (as they would be, one by one, with unit keys).
type groupCount struct {
	tracked, pinned int32
}

// stuck is the number of the block's tracked units that are not pinned
// but cannot be evicted, because another unit of the block is pinned.
func (g groupCount) stuck() int {
	if g.pinned == 0 {
		return 0
	}
	return int(g.tracked - g.pinned)
}

// grouped reports whether the arena's policy tracks one key per block.
func (a *arena) grouped() bool { return a.keyUnits > 1 }

// wantsEntry reports whether placing a unit of block b in the arena tells
// its policy the unit's Entry: always with a key per unit, under block
// keys only for the block's first unit there (the block's key).
func (a *arena) wantsEntry(b int32) bool { return !a.grouped() || a.group(b).tracked == 0 }

// group returns the counts of block record b, growing the table to it.
func (a *arena) group(b int32) *groupCount {
	if b == a.lastGroup && a.lastCount != nil {
		// The units of a block come one after the other.
		return a.lastCount
	}
	for a.groups.Len() <= int(b) {
		a.groups.Push(groupCount{})
	}
	g := a.groups.At(int(b))
	a.lastGroup, a.lastCount = b, g
	return g
}

// keyOf returns the policy key of unit u: the UnitID of its block's first
// unit in the pool.
func (a *arena) keyOf(u UnitID) UnitID {
	t := &a.cache.units
	return u&^(1<<t.sliceShift-1) | UnitID(a.keySlice)
}

// groupEntry turns the Entry of a block's unit into the block's: it stands
// for keyUnits units of no single layer.
func (a *arena) groupEntry(e eviction.Entry) eviction.Entry {
	e.Size = int64(a.keyUnits)
	e.Layer, e.Layers = 0, 0
	return e
}

// change applies a change of one unit of u's block to the block's counts:
// dt units more (or fewer) tracked, dp more (or fewer) pinned. It keeps
// stuck exact and returns the counts before and after, from which the
// caller decides what to tell the policy.
func (a *arena) change(u UnitID, dt, dp int32) (before, after groupCount) {
	g := a.group(a.cache.units.block(u))
	before = *g
	g.tracked += dt
	g.pinned += dp
	after = *g
	a.stuck += after.stuck() - before.stuck()
	switch {
	case before.tracked == 0 && after.tracked > 0:
		a.keys++
	case before.tracked > 0 && after.tracked == 0:
		a.keys--
	}
	return before, after
}

// pinEffect returns how many evictable units the arena loses when the
// policy pins (d = 1) or unpins (d = -1) one more tracked unit u: 1 or -1
// with unit keys; with block keys a block's first pin takes all its
// tracked units out of eviction and its last unpin gives them back. A
// capacity check (stage) asks it for every pin it plans, in order: the
// block counts change as the pins would, until undoPinEffects puts them
// back.
func (a *arena) pinEffect(u UnitID, d int32) int {
	if !a.grouped() {
		return int(d)
	}
	g := a.group(a.cache.units.block(u))
	before := g.tracked - g.pinned - int32(g.stuck())
	g.pinned += d
	after := g.tracked - g.pinned - int32(g.stuck())
	return int(before - after)
}

// undoPinEffects puts back the block counts the pinEffect calls of the
// running transaction's stage changed (its crossings unpin, its needs'
// new pins pin).
func (c *Cache) undoPinEffects() {
	t := &c.tx
	for _, u := range t.crossings {
		if a := c.tiers.arena(GPU, c.poolOf(u)); a.grouped() {
			a.group(c.units.block(u)).pinned++
		}
	}
	for i := range t.needs {
		n := &t.needs[i]
		if !n.pinned {
			continue
		}
		u := n.u
		if !n.act.pinsInPlace() {
			u = n.src
		}
		if a := c.tiers.arena(GPU, c.poolOf(u)); a.grouped() {
			a.group(c.units.block(u)).pinned--
		}
	}
}

// groupInsert is insert under block keys.
func (a *arena) groupInsert(u UnitID, e eviction.Entry, pinned bool) error {
	k := a.keyOf(u)
	g := a.group(a.cache.units.block(u))
	switch {
	case g.tracked == 0 && pinned && a.pinnedInserter != nil:
		if err := a.policyInsertPinned(k, a.groupEntry(e)); err != nil && a.broken == nil {
			return err
		}
	case g.tracked == 0:
		if err := a.policyInsert(k, a.groupEntry(e)); err != nil && a.broken == nil {
			return err
		}
		if pinned {
			a.policyPin(k)
		}
	case pinned && g.pinned == 0:
		a.policyPin(k)
	}
	a.track(u, pinned)
	return nil
}

// groupPin and groupUnpin are a unit's Pin and Unpin under block keys.
func (a *arena) groupPin(u UnitID) {
	if before, _ := a.change(u, 0, 1); before.pinned == 0 {
		a.policyPin(a.keyOf(u))
	}
}

func (a *arena) groupUnpin(u UnitID) {
	if _, after := a.change(u, 0, -1); after.pinned == 0 {
		a.policyUnpin(a.keyOf(u))
	}
}

// groupRemove is remove under block keys.
func (a *arena) groupRemove(u UnitID, pinned bool) {
	dp := int32(0)
	if pinned {
		dp = -1
	}
	before, after := a.change(u, -1, dp)
	switch {
	case after.tracked == 0:
		a.policyRemove(a.keyOf(u))
	case before.pinned > 0 && after.pinned == 0:
		a.policyUnpin(a.keyOf(u))
	}
}

// evictBlock asks the policy for a victim block and returns the units of
// it the arena tracks, in slice order, which stop being tracked. ok is false
// when the policy names no victim; err is the poison error when it names a
// key that is no evictable block of the arena.
func (a *arena) evictBlock() (units []UnitID, ok bool, err error) {
	k, ok := a.policyEvict()
	if !ok {
		return nil, false, nil
	}
	c := a.cache
	t := &c.units
	if !t.current(k, c.geom.slices) || t.slice(k) != a.keySlice {
		return nil, false, c.poison(a, "Evict returned %d, not the key of a block of the arena", k)
	}
	b := t.block(k)
	g := a.group(b)
	if g.tracked == 0 || g.pinned > 0 {
		return nil, false, c.poison(a, "Evict returned block key %d, %d units tracked, %d pinned", k, g.tracked, g.pinned)
	}
	units = a.victims[:0]
	for _, sl := range c.geom.pools[a.pool].slices {
		u := t.id(b, sl)
		st := t.of(u)
		switch {
		case st.tier == a.tier && st.slot >= 0 && a.owner[st.slot] == u:
			units = append(units, u)
		case st.backup > 0 && a.tier == c.wt.tier && a.owner[st.backup-1] == u:
			units = append(units, u)
		}
	}
	a.victims = units
	if len(units) != int(g.tracked) {
		// The counts and the units disagree: a bug of the cache, which
		// stops rather than evict what it cannot account for.
		return nil, false, c.poison(a, "block %d counts %d tracked units, %d found", b, g.tracked, len(units))
	}
	a.tracked -= int(g.tracked)
	g.tracked = 0
	a.keys--
	return units, true, nil
}

// spareSlot is a slot an operation emptied by evicting a whole block and
// has not used yet: the victim that held it, and the copies and moves that
// took the victim (and the victims its move down made room for) out of it,
// held back in the transaction's deferred buffers (copies c0..c1, moves
// m0..m1) until the slot is used.
//
// Why held back: a slot's victim must leave it before its next unit is
// written there, and with an Engine that is guaranteed only within one
// transfer, whose copies run in order. A block's victims leave together
// but their slots go to units of other KV layers, whose chains (see
// transfers.go) make other transfers. So each victim's copies join the
// chain of the unit that takes its slot, as they would have had that
// unit's own eviction chosen the victim; those of a slot left unused
// make a chain of their own (flushSpare).
type spareSlot struct {
	slot           int32
	victim         UnitID
	c0, c1, m0, m1 int32
	flushed        bool
}

// deferEviction moves the copies and moves appended to the transaction
// since (b0, m0) (those of one victim of a block eviction, made in slot s)
// to its deferred buffers, and makes s a spare slot of arena a.
func (t *txn) deferEviction(a *arena, s int32, v UnitID, b0, m0 int) {
	sp := spareSlot{slot: s, victim: v, c0: int32(len(t.defCopies)), m0: int32(len(t.defMoves))}
	t.defCopies = append(t.defCopies, t.batch[b0:]...)
	for _, m := range t.moves[m0:] {
		if m.copy >= 0 {
			m.copy += sp.c0 - int32(b0)
		}
		t.defMoves = append(t.defMoves, m)
	}
	sp.c1, sp.m1 = int32(len(t.defCopies)), int32(len(t.defMoves))
	t.batch, t.moves = t.batch[:b0], t.moves[:m0]
	if len(a.spare) == 0 {
		t.spared = append(t.spared, a)
	}
	a.spare = append(a.spare, sp)
}

// takeSpare returns a spare slot of arena a, its victim's copies and moves
// appended to the transaction's now: the caller's chain.
func (t *txn) takeSpare(a *arena) (int32, bool) {
	if a.spareNext == len(a.spare) {
		return 0, false
	}
	// In the order of the victims (see evictBlock: the last ones may
	// have been dropped for want of a taker).
	sp := &a.spare[a.spareNext]
	a.spareNext++
	t.appendDeferred(sp)
	return sp.slot, true
}

// appendDeferred appends spare slot sp's deferred copies and moves to the
// transaction's.
func (t *txn) appendDeferred(sp *spareSlot) {
	base := int32(len(t.batch)) - sp.c0
	t.batch = append(t.batch, t.defCopies[sp.c0:sp.c1]...)
	for _, m := range t.defMoves[sp.m0:sp.m1] {
		if m.copy >= 0 {
			m.copy += base
		}
		t.moves = append(t.moves, m)
	}
	sp.flushed = true
}

// flushSpare appends the deferred copies and moves of every spare slot
// left unused by the transaction, at the end of its planning: when it
// records moves (with an Engine), those of each slot make a chain in its
// victim's KV layer (sliceLayer gives a slice's).
func (t *txn) flushSpare(units *unitTable, sliceLayer []int32) {
	for _, a := range t.spared {
		for i := a.spareNext; i < len(a.spare); i++ {
			sp := &a.spare[i]
			if sp.flushed || sp.c0 == sp.c1 && sp.m0 == sp.m1 {
				sp.flushed = true
				continue
			}
			copyStart, moveStart := len(t.batch), len(t.moves)
			t.appendDeferred(sp)
			if t.recordsMoves && len(t.moves) > moveStart {
				t.chains = append(t.chains, chain{copyStart: int32(copyStart), copyEnd: int32(len(t.batch)),
					moveStart: int32(moveStart), moveEnd: int32(len(t.moves)),
					kvLayer: sliceLayer[units.slice(sp.victim)], block: units.block(sp.victim)})
			}
		}
	}
}

// releaseSpare ends the spare slots of a committed transaction: a slot is
// free at once, unless a transfer still moves its victim out of it; the
// slot is then the victim's, pinned, until that transfer lets go of it
// (see leaveSlot), as a load's source is.
func (c *Cache) releaseSpare() {
	t := &c.tx
	for _, a := range t.spared {
		for _, sp := range a.spare[a.spareNext:] {
			if c.engine == nil || sp.m0 == sp.m1 || c.units.of(sp.victim).busy == 0 {
				a.push(sp.slot)
				continue
			}
			c.place(a, sp.victim, true)
			c.xfer.left[sp.victim] = append(c.xfer.left[sp.victim], leftSlot{tier: a.tier, slot: sp.slot})
		}
		a.spare, a.spareNext = a.spare[:0], 0
	}
	t.spared = t.spared[:0]
}

// checkGroups verifies the block counts of an arena with block keys against
// want, the counts its units give (nil for an arena without them): every
// block's counts, stuck, and (with policies) one policy key per block with
// a tracked unit.
func (a *arena) checkGroups(want map[int32]groupCount, policies bool) error {
	if !a.grouped() {
		return nil
	}
	keys, stuck := 0, 0
	var err error
	a.groups.All(func(i int, g *groupCount) bool {
		if w := want[int32(i)]; *g != w {
			err = fmt.Errorf("%s: block %d counts %+v, its units %+v", a.tier, i, *g, w)
			return false
		}
		if g.tracked > 0 {
			keys++
		}
		stuck += g.stuck()
		return true
	})
	if err != nil {
		return err
	}
	for b := range want {
		if int(b) >= a.groups.Len() {
			return fmt.Errorf("%s: block %d has tracked units but no counts", a.tier, b)
		}
	}
	if stuck != a.stuck {
		return fmt.Errorf("%s: %d units stuck counted, %d by the blocks", a.tier, a.stuck, stuck)
	}
	if len(a.spare) > 0 {
		return fmt.Errorf("%s: %d spare slots outside an operation", a.tier, len(a.spare))
	}
	if keys != a.keys {
		return fmt.Errorf("%s: %d blocks tracked counted, %d by the blocks", a.tier, a.keys, keys)
	}
	if policies && a.policy.Len() != keys {
		return fmt.Errorf("%s: policy has %d keys, %d blocks tracked", a.tier, a.policy.Len(), keys)
	}
	return nil
}
