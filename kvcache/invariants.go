package kvcache

import (
	"fmt"
	"reflect"
	"slices"
)

// checkInvariants verifies the cache's internal accounting against a full
// recount. It is O(size): the tests call it after operations (the
// model-based tests after every one), and a build with the
// kvtier_invariants tag after every call (see invariantChecks); it
// returns the first violation found.
func (c *Cache) checkInvariants() error { return c.checkAccounting(true) }

// checkAccounting is checkInvariants; with policies false it does not
// compare the policies' Len with the arenas' counts (a policy that broke its
// contract may have lost keys: the cache is then poisoned, but its own
// accounting must still be exact).
func (c *Cache) checkAccounting(policies bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.accounting(policies)
}

// checkAfterCall runs, in a build with the kvtier_invariants tag, the full
// accounting check at the end of a call (Cache.mu held), when no long
// operation is between its steps: a violation poisons the cache and fails
// the call with ErrInvariant, so that a server's integration tests stop at
// the call that corrupted the state rather than at a wrong byte later.
func (c *Cache) checkAfterCall(err *error) {
	if !invariantChecks || c.long > 0 || c.poisoned != nil {
		return
	}
	// The policies' Len is not compared: a policy that loses keys breaks
	// its own contract, which its conformance suite (evictiontest) checks.
	if v := c.accounting(false); v != nil {
		c.poisoned = fmt.Errorf("%w: %v", ErrInvariant, v)
		if *err == nil {
			*err = c.poisoned
		}
	}
}

// accounting is checkAccounting with Cache.mu held.
func (c *Cache) accounting(policies bool) error {
	// Pins each unit should have: from sequences' ranges and step pins.
	want := make(map[UnitID]int32)
	refs := make(map[int32]int32)
	sparseRefs := make(map[int32]int32)
	writing := make(map[uint64]int32)
	for id, s := range c.seqs {
		if len(s.blocks) != c.geom.numBlocks(s.tokens.len()) {
			return fmt.Errorf("seq %d: %d blocks for %d tokens", id, len(s.blocks), s.tokens.len())
		}
		if len(s.pinLo) != len(c.geom.pools) {
			return fmt.Errorf("seq %d: %d pin starts, %d pools", id, len(s.pinLo), len(c.geom.pools))
		}
		for i, b := range s.blocks {
			refs[b]++
			if s.sparse {
				sparseRefs[b]++
			}
			r := c.units.blk(b)
			if !r.live {
				return fmt.Errorf("seq %d block %d: record %d not live", id, i, b)
			}
			// Committed blocks are full and in the tree; a sequence's
			// private blocks (uncommitted, partial, recompute copies) are
			// its alone, and every full block before firstPrivate is
			// committed.
			full := (i+1)*c.geom.blockTokens <= s.tokens.len()
			if !full && r.node != nil {
				return fmt.Errorf("seq %d block %d: partial but in the tree", id, i)
			}
			if i < s.firstPrivate && r.node == nil {
				return fmt.Errorf("seq %d block %d: private before firstPrivate %d", id, i, s.firstPrivate)
			}
			if r.node != nil && r.node.Depth() != i+1 {
				return fmt.Errorf("seq %d block %d: node depth %d", id, i, r.node.Depth())
			}
			if r.node == nil {
				wantIndexed := full && r.twin < 0
				if r.indexed != wantIndexed {
					return fmt.Errorf("seq %d block %d: private, full %t, twin %d, indexed %t", id, i, full, r.twin, r.indexed)
				}
				if r.indexed {
					writing[r.hash]++
				}
				if r.twin >= 0 {
					// The sequence holds its copy's twin too.
					refs[r.twin]++
					if s.sparse {
						sparseRefs[r.twin]++
					}
					tw := c.units.blk(r.twin)
					if !full || !tw.live || tw.node == nil || tw.node.Depth() != i+1 || r.hash != tw.node.Hash() {
						return fmt.Errorf("seq %d block %d: recompute copy of a bad twin %d", id, i, r.twin)
					}
				}
			} else if r.twin >= 0 || r.indexed {
				return fmt.Errorf("seq %d block %d: committed with twin %d or indexed %t", id, i, r.twin, r.indexed)
			}
			if int(r.index) != i {
				// BlockTable places step pins by the record's index.
				return fmt.Errorf("seq %d block %d: record %d has index %d", id, i, b, r.index)
			}
			for p := range c.geom.pools {
				if !s.span().pins(i, p) {
					continue
				}
				for _, sl := range c.geom.pools[p].slices {
					want[c.units.id(b, sl)]++
				}
			}
		}
		for _, u := range s.stepPins {
			want[u]++
			found := false
			for _, b := range s.blocks {
				found = found || b == c.units.block(u)
			}
			if !found {
				return fmt.Errorf("seq %d: step pin on unit %d of a block it does not hold", id, u)
			}
		}
	}
	if err := c.checkTables(); err != nil {
		return err
	}
	// Between operations, the snapshot callbacks see is the cache's Stats
	// (the sink's panics, counted outside the lock, aside).
	snap, now := c.snapshot(), c.stats()
	snap.SinkPanics, now.SinkPanics = 0, 0
	if !reflect.DeepEqual(snap, now) {
		return fmt.Errorf("the Stats snapshot is stale:\n%+v\nnow\n%+v", snap, now)
	}
	if len(writing) != len(c.writing) {
		return fmt.Errorf("%d hashes of blocks being written, %d indexed", len(writing), len(c.writing))
	}
	for h, n := range writing {
		if c.writing[h] != n {
			return fmt.Errorf("hash %x: %d blocks being written, %d indexed", h, n, c.writing[h])
		}
	}
	type count struct{ used, pinned int }
	tiers := c.tiers.last()
	counts := make([][MaxTiers + 1]count, len(c.geom.pools)) // [pool][tier]
	// groups counts, per arena with block keys, each block's units there
	// (see blockkeys.go).
	groups := map[*arena]map[int32]groupCount{}
	tally := func(p int, t Tier, u UnitID, pinned bool) {
		counts[p][t].used++
		if pinned {
			counts[p][t].pinned++
		}
		if a := c.tiers.arena(t, p); a.grouped() {
			m := groups[a]
			if m == nil {
				m = map[int32]groupCount{}
				groups[a] = m
			}
			g := m[c.units.block(u)]
			g.tracked++
			if pinned {
				g.pinned++
			}
			m[c.units.block(u)] = g
		}
	}
	live := 0
	backups := make([]int, len(c.geom.pools))
	for b := range c.units.records() {
		r := c.units.blk(b)
		if !r.live {
			for sl := range c.geom.slices {
				if st := *c.units.of(c.units.id(b, sl)); st != (unitState{tier: Dropped, slot: -1}) && st != (unitState{slot: -1}) {
					return fmt.Errorf("free block record %d slice %d has unit state %+v", b, sl, st)
				}
			}
			continue
		}
		live++
		if refs[int32(b)] != r.refs {
			return fmt.Errorf("block %d: refs %d, sequences hold it %d times", b, r.refs, refs[int32(b)])
		}
		if sparseRefs[int32(b)] != r.sparseRefs {
			return fmt.Errorf("block %d: sparse refs %d, sparse sequences hold it %d times", b, r.sparseRefs, sparseRefs[int32(b)])
		}
		if r.node == nil && r.refs != 1 && !(r.orphan && r.refs == 0) {
			return fmt.Errorf("private block %d has %d refs", b, r.refs)
		}
		if r.orphan && (r.refs != 0 || r.node != nil || r.pending == 0) {
			return fmt.Errorf("orphan block %d: refs %d, in the tree %t, pending %d", b, r.refs, r.node != nil, r.pending)
		}
		if r.node != nil && r.node.Value != int32(b) {
			return fmt.Errorf("block %d: node payload %d", b, r.node.Value)
		}
		held, pending := int32(0), int32(0)
		for sl := range c.geom.slices {
			u := c.units.id(int32(b), sl)
			p := c.poolOf(u)
			st := c.units.of(u)
			if st.pins != want[u] {
				return fmt.Errorf("unit %d (block %d slice %d): %d pins, want %d", u, b, sl, st.pins, want[u])
			}
			if err := c.checkInFlight(u); err != nil {
				return err
			}
			pending += int32(st.busy)
			if st.flags&unitUnwritten != 0 {
				pending++
			}
			if st.backup != 0 {
				// A backup holds a slot of the write-through tier.
				if c.wt.tier == 0 || !c.aboveWriteThrough(st.tier) {
					return fmt.Errorf("unit %d on %s has a backup, write-through tier %d", u, st.tier, c.wt.tier)
				}
				ba := c.tiers.arena(c.wt.tier, p)
				if bs := st.backup - 1; ba.owner[bs] != u {
					return fmt.Errorf("unit %d: backup in slot %d, owned by %d", u, bs, ba.owner[bs])
				}
				tally(p, c.wt.tier, u, st.flags&unitBacking != 0)
				backups[p]++
			} else if st.flags&unitBacking != 0 {
				return fmt.Errorf("unit %d: backing without a backup", u)
			}
			if st.flags&unitClaimed != 0 && (st.tier == GPU || st.tier == Dropped || c.long == 0) {
				return fmt.Errorf("unit %d on %s claimed, %d long operations under way", u, st.tier, c.long)
			}
			switch c.units.of(u).tier {
			case Dropped:
				if c.units.of(u).slot != -1 || c.units.of(u).pins != 0 {
					return fmt.Errorf("dropped unit %d has slot %d pins %d", u, c.units.of(u).slot, c.units.of(u).pins)
				}
			default:
				t := c.units.of(u).tier
				if t > tiers {
					return fmt.Errorf("unit %d on tier %d of %d", u, t, tiers)
				}
				if st.flags&unitUnwritten == 0 {
					held++ // a unit without bytes is counted out
				}
				if t != GPU && c.units.of(u).pins != 0 {
					return fmt.Errorf("unit %d on %s is pinned", u, t)
				}
				a := c.tiers.arena(t, p)
				s := c.units.of(u).slot
				if s < 0 || int(s) >= a.capacity() || a.owner[s] != u {
					return fmt.Errorf("unit %d on %s slot %d, owner there %d", u, t, s, a.owner[s])
				}
				// Pinned in its policy: by a sequence, a transfer, for
				// want of bytes, or by a long Acquire's claim.
				tally(p, t, u, st.pins > 0 || st.busy > 0 || st.flags&unitUnwritten != 0 || st.flags&unitClaimed != 0)
			}
		}
		if held != r.held {
			return fmt.Errorf("block %d: held %d, counted %d", b, r.held, held)
		}
		if pending != r.pending {
			return fmt.Errorf("block %d: pending %d, counted %d", b, r.pending, pending)
		}
		if r.refs == 0 && r.held == 0 && r.pending == 0 && (r.node == nil || r.node.IsLeaf()) {
			return fmt.Errorf("block %d: unreferenced and empty but not collected", b)
		}
		if hollow := r.node != nil && r.refs == 0 && r.held == 0; hollow != r.hollow {
			return fmt.Errorf("block %d: hollow %t but listed %t", b, hollow, r.hollow)
		}
	}
	listed, last := 0, noBlock
	for b, prev := c.meta.head, noBlock; b != noBlock; b = c.units.blk(b).hollowNext {
		if !c.units.blk(b).hollow || c.units.blk(b).hollowPrev != prev {
			return fmt.Errorf("hollow list broken at block %d", b)
		}
		prev, last = b, b
		listed++
	}
	if last != c.meta.tail {
		return fmt.Errorf("hollow list ends at block %d, tail %d", last, c.meta.tail)
	}
	if listed != c.meta.count {
		return fmt.Errorf("hollow list holds %d blocks, counted %d", listed, c.meta.count)
	}
	// A load's source keeps its slot below, pinned, until the load is
	// done (and past it while another transfer holds the unit: left).
	for _, tr := range c.xfer.byID {
		if tr.done {
			continue
		}
		// (The moves of a finished transfer that poll applied already
		// are over.)
		for _, m := range tr.moves[tr.applied:] {
			if m.kind != moveLoad {
				continue
			}
			if a := c.tiers.arena(m.from, c.poolOf(m.u)); a.owner[m.slot] != m.u {
				return fmt.Errorf("transfer %d loads unit %d from %s slot %d, owned by %d", tr.id, m.u, m.from, m.slot, a.owner[m.slot])
			}
			tally(c.poolOf(m.u), m.from, m.u, true)
		}
	}
	for u, left := range c.xfer.left {
		if c.units.of(u).busy == 0 {
			return fmt.Errorf("unit %d: %d slots left but nothing holds it", u, len(left))
		}
		for _, l := range left {
			if a := c.tiers.arena(l.tier, c.poolOf(u)); a.owner[l.slot] != u {
				return fmt.Errorf("unit %d left %s slot %d, owned by %d", u, l.tier, l.slot, a.owner[l.slot])
			}
			tally(c.poolOf(u), l.tier, u, true)
		}
	}
	if c.tree.Len() > c.meta.maxBlocks && c.meta.head != noBlock && c.subtreeSettled(c.units.blk(c.meta.head).node) {
		return fmt.Errorf("tree holds %d blocks, budget %d, with hollow blocks left", c.tree.Len(), c.meta.maxBlocks)
	}
	if err := c.units.check(live); err != nil {
		return err
	}
	if err := c.xfer.check(c.seqs); err != nil {
		return err
	}
	if err := c.tiers.check(len(c.geom.pools)); err != nil {
		return err
	}
	if err := c.tx.check(&c.tiers); err != nil {
		return err
	}
	if err := c.events.check(c.geom.slices, c.tiers.last()); err != nil {
		return err
	}
	if err := c.checkMedia(); err != nil {
		return err
	}
	treeNodes := 0
	for n := range c.tree.All() {
		treeNodes++
		if !c.units.blk(n.Value).live || c.units.blk(n.Value).node != n {
			return fmt.Errorf("tree node %x: payload %d does not point back", n.Hash(), n.Value)
		}
	}
	for b := range c.units.records() {
		if r := c.units.blk(b); r.live && r.node != nil {
			treeNodes--
			if want := c.tenantOf(r.node.Keys().Namespace); r.tenant != want {
				return fmt.Errorf("block %d of namespace %q counts as tenant %d, not %d", b, r.node.Keys().Namespace, r.tenant, want)
			}
		}
	}
	if treeNodes != 0 {
		return fmt.Errorf("tree and block records disagree by %d nodes", treeNodes)
	}
	for p := range c.geom.pools {
		for t := GPU; t <= tiers; t++ {
			a := c.tiers.arena(t, p)
			if t == c.wt.tier && a.backups != backups[p] {
				return fmt.Errorf("%s pool %d: %d backups counted, %d units have one", a.tier, p, a.backups, backups[p])
			}
			if err := a.check(counts[p][t].used, counts[p][t].pinned, policies); err != nil {
				return fmt.Errorf("pool %d: %w", p, err)
			}
			if err := a.checkGroups(groups[a], policies); err != nil {
				return fmt.Errorf("pool %d: %w", p, err)
			}
		}
	}
	return nil
}

// check verifies the arena's own accounting against what the units say
// (used of its slots hold a unit, pinned of them pinned in its policy):
// its free slots are owned by nobody and listed once, its counts agree,
// no slot stays pinned by a transaction that ended, and (with policies)
// its policy tracks every used slot.
func (a *arena) check(used, pinned int, policies bool) error {
	n := a.capacity() - len(a.free)
	if n != used || a.tracked != n || (policies && !a.grouped() && a.tenants == nil && a.policy.Len() != n) {
		return fmt.Errorf("%s: %d slots used, %d units resident, %d tracked, policy has %d",
			a.tier, n, used, a.tracked, a.policy.Len())
	}
	if a.pinned != pinned {
		return fmt.Errorf("%s: %d pinned counted, %d units pinned", a.tier, a.pinned, pinned)
	}
	for sl, o := range a.owner {
		if a.txPinned[sl] {
			return fmt.Errorf("%s: slot %d (unit %d) pinned by a transaction that ended", a.tier, sl, o)
		}
	}
	seen := make(map[int32]bool, len(a.free))
	for _, s := range a.free {
		if seen[s] || a.owner[s] != noUnit {
			return fmt.Errorf("%s: free slot %d duplicated or owned", a.tier, s)
		}
		seen[s] = true
	}
	return a.checkTenants(policies)
}

// checkTenants verifies an arena's shares (see shares.go): the slots each
// tenant's units own, counted slot by slot, and the slot's recorded
// tenant; tracked and pinned counts that add up to the arena's; and (with
// policies) tenants' policies that track their tenant's units.
func (a *arena) checkTenants(policies bool) error {
	at := a.tenants
	if at == nil {
		return nil
	}
	used := make([]int, len(at.list))
	for s, o := range a.owner {
		if o == noUnit {
			continue
		}
		t := a.tenantOf(o)
		if int(at.slot[s]) != t {
			return fmt.Errorf("%s: slot %d (unit %d) recorded for tenant %d, its block's is %d", a.tier, s, o, at.slot[s], t)
		}
		used[t]++
	}
	tracked, pinned, keys := 0, 0, 0
	for i := range at.list {
		x := &at.list[i]
		if x.used != used[i] || x.tracked != used[i] {
			return fmt.Errorf("%s: namespace %q counts %d slots used and %d units tracked, %d found", a.tier, x.namespace, x.used, x.tracked, used[i])
		}
		if x.pinned < 0 || x.pinned > x.tracked {
			return fmt.Errorf("%s: namespace %q counts %d pinned of %d", a.tier, x.namespace, x.pinned, x.tracked)
		}
		tracked += x.tracked
		pinned += x.pinned
		if policies {
			if n := x.pol.p.Len(); n != x.tracked {
				return fmt.Errorf("%s: namespace %q policy has %d keys, %d units tracked", a.tier, x.namespace, n, x.tracked)
			}
			keys += x.pol.p.Len()
		}
	}
	if tracked != a.tracked || pinned != a.pinned {
		return fmt.Errorf("%s: namespaces count %d tracked and %d pinned, the arena %d and %d", a.tier, tracked, pinned, a.tracked, a.pinned)
	}
	return nil
}

// check verifies the unit table's block records, live of which are live:
// the free list holds only free records, once each, and every record is
// live, free or retired.
func (t *unitTable) check(live int) error {
	free := 0
	for b := t.free; b != noBlock; b = t.blk(b).hollowNext {
		if t.blk(b).live || free > int(t.records()) {
			return fmt.Errorf("free block record %d is live, or the free list has a cycle", b)
		}
		free++
	}
	if free != t.freeLen {
		return fmt.Errorf("%d block records on the free list, %d counted", free, t.freeLen)
	}
	if live+free+t.retired != int(t.records()) {
		return fmt.Errorf("%d live + %d free + %d retired block records != %d", live, free, t.retired, t.records())
	}
	return nil
}

// check verifies the transfers in flight between operations, against the
// live sequences: every known transfer is unfinished and counted in
// flight; a sequence waits on a transfer exactly when the transfer lists
// it as a waiter; a transfer's count of the transfers it starts after is
// the number that list it as a dependent, all of them known; and the
// finished transfers being applied are the ones marked so.
func (x *transfers) check(seqs map[SeqID]*sequence) error {
	if x.byID == nil {
		return nil
	}
	if x.inFlight != len(x.byID) {
		return fmt.Errorf("%d transfers in flight, %d known", x.inFlight, len(x.byID))
	}
	deps := make(map[transferID]int32)
	for on, ds := range x.dependents {
		if _, ok := x.byID[on]; !ok {
			return fmt.Errorf("transfers wait for transfer %d, which is over", on)
		}
		for _, d := range ds {
			if _, ok := x.byID[d.id]; !ok {
				return fmt.Errorf("transfer %d: dependent %d is over", on, d.id)
			}
			deps[d.id]++
		}
	}
	applying := 0
	for id, tr := range x.byID {
		if tr.done || tr.id != id {
			return fmt.Errorf("transfer %d (id %d) done %t but known", id, tr.id, tr.done)
		}
		if !tr.applying && tr.deps != deps[id] {
			return fmt.Errorf("transfer %d starts after %d transfers, %d list it", id, tr.deps, deps[id])
		}
		if tr.applying {
			applying++
		}
		for _, s := range tr.waiters {
			if seqs[s.id] != s || !slices.Contains(s.waits, id) {
				return fmt.Errorf("transfer %d: waiter %d is not live or does not wait on it", id, s.id)
			}
		}
	}
	if applying != len(x.applying) {
		return fmt.Errorf("%d transfers marked applying, %d listed", applying, len(x.applying))
	}
	for _, tr := range x.applying {
		if !tr.applying || x.byID[tr.id] != tr {
			return fmt.Errorf("transfer %d listed as applying but not marked or not known", tr.id)
		}
	}
	for id, s := range seqs {
		for i, w := range s.waits {
			tr, ok := x.byID[w]
			if !ok || !slices.Contains(tr.waiters, s) || slices.Contains(s.waits[:i], w) {
				return fmt.Errorf("seq %d waits on transfer %d, which is over, does not list it, or twice", id, w)
			}
		}
	}
	return nil
}

// check verifies the tier set's shape: one to MaxTiers tiers, each with
// one arena per pool that knows its tier, and no arena replaying a
// transactional policy's log between operations.
func (ts *tierSet) check(pools int) error {
	if n := len(ts.levels); n == 0 || n > MaxTiers {
		return fmt.Errorf("%d tiers", n)
	}
	for i, l := range ts.levels {
		if len(l.arenas) != pools {
			return fmt.Errorf("tier %d (%s): %d arenas, %d pools", i+1, l.name, len(l.arenas), pools)
		}
		for p, a := range l.arenas {
			if a == nil || a.tier != Tier(i+1) || a.replaying {
				return fmt.Errorf("tier %d (%s) pool %d: arena missing, of another tier or replaying", i+1, l.name, p)
			}
		}
	}
	return nil
}

// check verifies the transaction between operations: none is open, being
// executed or committed, its undo log is empty, and no arena of ts keeps
// spare slots (with block keys) that a transaction filled: a commit
// releases them and a rollback gives them back.
func (t *txn) check(ts *tierSet) error {
	if t.open || t.executing || t.committing || t.moverExited || t.recording {
		return fmt.Errorf("transaction left open (open %t, executing %t, committing %t, mover exited %t, recording %t)",
			t.open, t.executing, t.committing, t.moverExited, t.recording)
	}
	if len(t.undo) > 0 || len(t.spared) > 0 {
		return fmt.Errorf("closed transaction keeps %d undo records and %d arenas with spare slots", len(t.undo), len(t.spared))
	}
	var err error
	ts.each(func(a *arena) {
		if err == nil && (len(a.spare) > 0 || a.spareNext > 0) {
			err = fmt.Errorf("%s: %d spare slots left by a closed transaction", a.tier, len(a.spare))
		}
	})
	return err
}

// check verifies the event log between operations (Cache.mu held): no
// event is left queued by an operation, the TakeEvents buffer's window
// lies within it, its unreported losses are among those it counted, and
// each block's media lists a tier (last is the lowest) or Dropped for
// each of the slices of a block.
func (q *eventLog) check(slices int, last Tier) error {
	if len(q.running) > 0 {
		return fmt.Errorf("events: %d events of an ended operation not published", len(q.running))
	}
	if q.n < 0 || q.n > len(q.ring) || q.head < 0 || (len(q.ring) > 0 && q.head >= len(q.ring)) || (len(q.ring) == 0 && q.head != 0) {
		return fmt.Errorf("events: buffer window %d+%d out of its %d slots", q.head, q.n, len(q.ring))
	}
	if q.lost > q.dropped {
		return fmt.Errorf("events: %d lost events unreported, %d dropped in all", q.lost, q.dropped)
	}
	if q.media != nil && !q.enabled() {
		return fmt.Errorf("events: media kept with events off")
	}
	for b, m := range q.media {
		if len(m) != slices {
			return fmt.Errorf("events: block %d has media for %d slices, want %d", b, len(m), slices)
		}
		for s, t := range m {
			if t != Dropped && (t < GPU || t > last) {
				return fmt.Errorf("events: block %d slice %d reported on tier %d", b, s, t)
			}
		}
	}
	return nil
}

// checkMedia verifies, with events on, that what the events reported of
// each tree block is where its units are: every block of the tree, and no
// other, has media, and each unit's is its tier (Dropped for a GPU unit
// whose bytes did not arrive).
func (c *Cache) checkMedia() error {
	if !c.events.enabled() {
		return nil
	}
	inTree := 0
	for b := range c.units.records() {
		r := c.units.blk(b)
		if !r.live || r.node == nil {
			continue
		}
		inTree++
		m, ok := c.events.media[b]
		if !ok {
			return fmt.Errorf("events: tree block %d has no media", b)
		}
		for s := range c.geom.slices {
			st := c.units.of(c.units.id(b, s))
			want := st.tier
			if want == GPU && st.flags&unitUnwritten != 0 {
				want = Dropped
			}
			if m[s] != want {
				return fmt.Errorf("events: block %d slice %d reported on %s, its unit is on %s", b, s, m[s], want)
			}
		}
	}
	if inTree != len(c.events.media) {
		return fmt.Errorf("events: %d tree blocks, %d with media", inTree, len(c.events.media))
	}
	return nil
}

// checkTables recomputes every live sequence's block tables from its pins
// (Cache.mu held) and compares them with the tables the operations kept up
// to date.
func (c *Cache) checkTables() error {
	for id, s := range c.seqs {
		span := s.span()
		for sl := range c.geom.slices {
			want := make([]int32, len(s.blocks))
			p := c.geom.poolOfSlice(sl)
			for i, b := range s.blocks {
				want[i] = -1
				if span.pins(i, p) {
					want[i] = c.units.slotOf(c.units.id(b, sl))
				}
			}
			for _, u := range s.stepPins {
				if c.units.slice(u) == sl {
					want[c.units.rec(u).index] = c.units.slotOf(u)
				}
			}
			if got := s.table(sl); !slices.Equal(got, want) {
				return fmt.Errorf("seq %d slice %d: block table %v, pins give %v", id, sl, got, want)
			}
		}
	}
	return nil
}

// checkInFlight verifies unit u's transfer state: the transfers that move
// it are in flight, and only a GPU unit may be loading or without bytes.
func (c *Cache) checkInFlight(u UnitID) error {
	st := c.units.of(u)
	x := &c.xfer
	loading, storing := st.loading(), st.storing()
	if c.engine == nil {
		if st.flags&^unitUnwritten != 0 || st.busy != 0 || loading || storing {
			return fmt.Errorf("unit %d: flags %b busy %d transfers %d, %d without an engine", u, st.flags, st.busy, st.loadBy, st.storeBy)
		}
		return nil
	}
	for _, by := range []struct {
		id   transferID
		what string
	}{{st.loadBy, "loads"}, {st.storeBy, "stores"}} {
		if tr, ok := x.byID[by.id]; by.id != 0 && (!ok || tr.done) {
			return fmt.Errorf("unit %d: transfer %d that %s it is over", u, by.id, by.what)
		}
	}
	if (loading || st.flags&unitUnwritten != 0) && st.tier != GPU {
		return fmt.Errorf("unit %d on %s: loading %t, unwritten %t", u, st.tier, loading, st.flags&unitUnwritten != 0)
	}
	if storing && st.tier == Dropped {
		// (On the GPU it was loaded back or recomputed meanwhile.)
		return fmt.Errorf("unit %d on %s is storing", u, st.tier)
	}
	if (loading || storing) && st.busy == 0 {
		return fmt.Errorf("unit %d in flight but not held", u)
	}
	return nil
}
