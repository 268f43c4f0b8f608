package kvcache

import (
	"errors"
	"fmt"
	"time"

	"github.com/kvtier/kvtier/eviction"
)

// Every operation that changes the cache runs as one transaction, opened
// by begin and closed by unlock:
//
//  1. planning: the operation allocates the block records it needs and
//     takes references on blocks (both logged), and queues the units its
//     sequence stops pinning (unpins) and those it needs pinned on the GPU
//     (needs);
//  2. staging: the pin changes are applied to the pin counts alone and
//     every GPU pool's capacity is checked (free slots plus evictable
//     units) before any policy hears of anything: ErrNoSpace leaves every
//     policy untouched;
//  3. the policies are told the pins and unpins, GPU slots are taken,
//     evicting victims that move down the tiers or are dropped (see
//     takeSlot), and one ordered batch of copies is planned, each victim's
//     move before the copy that reuses its slot;
//  4. the batch goes to the Mover;
//  5. commit: units change tier, victims leave, the policies hear of the
//     units placed in their arenas (Insert), events and counters.
//
// Every change before the commit is logged, and a failure at any step
// undoes the log newest first, so a failed operation leaves every block
// record, reference, unit, slot and pin as it was, and no caller
// compensates by hand. A policy that implements eviction.Transactional is
// told Begin before step 3 and Rollback on a failure, and undoes its own
// calls exactly; another is compensated call by call (victims inserted
// again, pins undone by Unpin). It is told Commit at the start of step 5,
// before it hears of the units placed in its arena: those Inserts come
// after the copies, when nothing can fail any more.

// action is what a need does to its unit.
type action uint8

const (
	actHit     action = iota // the unit is on the GPU: pin it
	actOnboard               // the unit is on a lower tier: copy it to the GPU
	actFresh                 // the unit gets a GPU slot the server fills
	actCopy                  // the unit gets a GPU slot filled from src (copy-on-write)
	// actRecompute: the unit is on a lower tier but its block is
	// recomputed (another needed unit of the block has no bytes), so
	// copying it back would be overwritten: it gets a fresh GPU slot and
	// its copy below is released at commit.
	actRecompute
	// actRewrite: the unit keeps its GPU slot but has no bytes (its load
	// failed, see unitUnwritten): it is pinned like a hit and its block is
	// computed, by the sequence that declares it written (its rewrite
	// list).
	actRewrite
)

// pinsInPlace reports whether a keeps the unit in its GPU slot: a hit or
// a rewrite.
func (a action) pinsInPlace() bool { return a == actHit || a == actRewrite }

// need is one unit an operation wants pinned on the GPU.
type need struct {
	u    UnitID
	src  UnitID // actCopy: the unit copied
	slot int32  // the GPU slot, once taken (actHit: its current slot)
	act  action
	// from is the tier the unit is on (actOnboard, actRecompute) or the
	// source is on (actCopy).
	from Tier
	// pinned says whether the need's GPU unit (a hit, or a copy source on
	// the GPU) had no pin before the transaction: the policy is told.
	pinned bool
}

type undoKind uint8

const (
	undoPin         undoKind = iota // a GPU pin was added to u
	undoUnpin                       // a GPU pin was removed from u
	undoPinResident                 // u was pinned where it is, in its (tier, pool) arena
	undoSlot                        // a slot was taken: from the free list (u == noUnit) or from victim u
	undoDrop                        // a victim of block b is to be dropped: b's held count went down
	undoAlloc                       // block record b was allocated
	undoRef                         // a reference to block b was added
	undoBackup                      // GPU unit u's backup in slot was given up to a victim's slot
	undoPinBackup                   // GPU unit u's backup in slot was pinned to become its location
)

type undoRec struct {
	kind undoKind
	tier Tier
	// sparse: undoRef of a sparse sequence's reference.
	sparse bool
	pool   int32
	slot   int32
	// b is the block of undoDrop, undoAlloc and undoRef; prev, for an
	// undoRef that took b off the hollow list, is its predecessor there
	// (noBlock at the head), else notHollow.
	b, prev int32
	u       UnitID
}

// notHollow marks an undoRef whose block was not on the hollow list.
const notHollow int32 = -2

// victim is a unit evicted by the running transaction.
type victim struct {
	u    UnitID
	tier Tier
	pool int32
	slot int32 // the slot it leaves
	to   int32 // the slot it moves to in the next tier, -1 if dropped
	// backup says that to is its backup's slot: the move copies nothing.
	backup bool
	// atCap says that it was dropped because its namespace was at its
	// cap of the next tier with no unit there to lose (see Share).
	atCap bool
}

// tempPin is a copy-on-write source pinned for the batch: on the GPU (a
// pin count) or resident in a lower tier's arena.
type tempPin struct {
	u    UnitID
	tier Tier
}

// txn is the state of the running transaction, reused across operations
// so that steady-state operations do not allocate.
type txn struct {
	// open says whether a transaction runs: unlock rolls it back if the
	// operation failed, and keeps it otherwise.
	open      bool
	undo      []undoRec
	needs     []need
	unpins    []UnitID
	batch     []Copy
	victims   []victim
	temps     []tempPin
	perPool   []int
	crossings []UnitID
	// spared lists the arenas (with block keys) whose spare slots this
	// transaction filled: released when it commits (see releaseSpare),
	// given back to their victims when it rolls back.
	spared []*arena
	// defCopies and defMoves hold the copies and moves of the spare
	// slots' victims until the slots are used (see spareSlot).
	defCopies []Copy
	defMoves  []move
	// toPlace counts, per pool, the GPU slots the executing transaction
	// has still to take (see evictBlock).
	toPlace []int
	// seq is the live sequence the operation changes (Append, Truncate,
	// SparseAccess, Commit), nil for one it creates: the units the
	// operation unpins are its (see copyFailed). owner is the sequence the
	// operation is for, new or not: it waits on the operation's
	// transfers, of which loading of its units are still in flight after
	// the call.
	seq     *sequence
	owner   *sequence
	loading int
	// recording says whether the policies were told Begin.
	recording bool
	// recordsMoves says that the cache has a TransferEngine: the
	// transaction records what each copy does (moves, chains) for it.
	recordsMoves bool
	// reserve is, for a step of a long operation, the GPU slots per pool
	// still reserved for it (see slices.go), which stage may use and
	// takes from; taken is what this step took out of it, given back if
	// the step rolls back. Both nil otherwise.
	reserve, taken []int
	// arenas is the GPU arena of each pool, for unreserve.
	arenas []*arena
	// build, for a step of a long operation, holds the operation's
	// transfers, which its chains join (nil: submit makes the
	// transaction's own).
	build *xferBuild
	// moves and chains describe the batch for a TransferEngine (see
	// transfers.go): what each copy does, and which copies make each
	// need's slot ready; submitted lists the transfers made of them.
	moves     []move
	chains    []chain
	submitted []transferID
	// executing says that execute runs, committing that commit does, and
	// moverExited that the Mover ended the goroutine (runtime.Goexit) in
	// the middle: unlock, which runs anyway, finishes the operation (see
	// exited).
	executing, committing, moverExited bool
}

func (t *txn) reset() {
	t.undo = t.undo[:0]
	t.needs = t.needs[:0]
	t.unpins = t.unpins[:0]
	t.batch = t.batch[:0]
	t.victims = t.victims[:0]
	t.temps = t.temps[:0]
	t.crossings = t.crossings[:0]
	t.moves = t.moves[:0]
	t.chains = t.chains[:0]
	t.submitted = t.submitted[:0]
	for _, a := range t.spared {
		// Rolled back: their victims' undo gave the slots back.
		a.spare, a.spareNext = a.spare[:0], 0
	}
	t.spared = t.spared[:0]
	t.defCopies, t.defMoves = t.defCopies[:0], t.defMoves[:0]
	t.toPlace = t.toPlace[:0]
	t.seq, t.owner, t.loading = nil, nil, 0
	t.reserve, t.taken, t.build = nil, nil, nil
	t.open = false
	t.recording = false
	t.executing, t.committing, t.moverExited = false, false, false
}

func (t *txn) log(r undoRec) { t.undo = append(t.undo, r) }

// unreserve gives back to the reservation what the step took out of it
// (the step is rolled back).
func (t *txn) unreserve() {
	if t.taken == nil {
		return
	}
	for p, n := range t.taken {
		t.reserve[p] += n
		t.arenas[p].reserved += n
		t.taken[p] = 0
	}
}

// begin opens the transaction of an operation on sequence s (nil for one
// the operation creates).
func (c *Cache) begin(s *sequence) {
	c.tx.reset()
	c.tx.open = true
	c.tx.seq, c.tx.owner = s, s
}

// newBlock allocates a block record for the running transaction.
// of namespace ns.
func (c *Cache) newBlock(index, chunks int, prio int, dur time.Duration, ns string) int32 {
	b := c.units.alloc(index, chunks, prio, dur)
	c.tx.log(undoRec{kind: undoAlloc, b: b})
	c.units.blk(b).tenant = c.tenantOf(ns)
	return b
}

// ref adds a reference to block b from a sequence (sparse or not), for the
// running transaction.
func (c *Cache) ref(b int32, sparse bool) {
	r := c.units.blk(b)
	prev := notHollow
	if r.refs == 0 && r.hollow {
		prev = r.hollowPrev
		c.meta.unmarkHollow(&c.units, b)
	}
	r.refs++
	if sparse {
		r.sparseRefs++
	}
	c.tx.log(undoRec{kind: undoRef, b: b, sparse: sparse, prev: prev})
}

// A GPU unit is pinned in its policy while a sequence pins it (pins > 0),
// a transfer holds it (busy > 0, see transfers.go) or it has no bytes
// (unitUnwritten): pinUnit and unpinUnit tell the policy only when the
// first reason comes or the last goes, since a policy's pin is a flag,
// not a count.

// gpuHeld reports whether GPU unit st stays pinned in its policy whatever
// its pins.
func gpuHeld(st *unitState) bool { return st.busy > 0 || st.flags&unitUnwritten != 0 }

// pinUnit adds a pin to u, which is on the GPU.
func (c *Cache) pinUnit(u UnitID) {
	st := c.units.of(u)
	st.pins++
	if st.pins == 1 && !gpuHeld(st) {
		c.tiers.arena(GPU, c.poolOf(u)).pin(u)
	}
}

// unpinUnit removes a pin from u, which is on the GPU. A unit without
// bytes that nothing holds any more is dropped when the operation ends
// (dropLater).
func (c *Cache) unpinUnit(u UnitID) {
	st := c.units.of(u)
	st.pins--
	if st.pins > 0 {
		return
	}
	switch {
	case !gpuHeld(st):
		c.tiers.arena(GPU, c.poolOf(u)).unpin(u)
	case st.busy == 0:
		c.dropLater(u)
	}
}

// addNeed queues u, whose state units gives, to be pinned on the GPU and
// returns its action.
func (t *txn) addNeed(units *unitTable, u UnitID) action {
	n := need{u: u, slot: units.slotOf(u)}
	switch st := units.of(u); st.tier {
	case GPU:
		n.act = actHit
		if st.flags&unitUnwritten != 0 {
			n.act = actRewrite
		}
	case Dropped:
		n.act = actFresh
	default:
		n.act, n.from = actOnboard, st.tier
	}
	t.needs = append(t.needs, n)
	return n.act
}

// addCopyNeed queues u (with no bytes) to get a GPU slot filled from src;
// when src has no bytes either (units gives its state), u is fresh (to
// compute).
func (t *txn) addCopyNeed(units *unitTable, u, src UnitID) action {
	st := units.of(src)
	if st.tier == Dropped || st.flags&unitUnwritten != 0 {
		t.needs = append(t.needs, need{u: u, act: actFresh})
		return actFresh
	}
	t.needs = append(t.needs, need{u: u, act: actCopy, src: src, from: st.tier})
	return actCopy
}

// execute runs the queued unpins and needs (see the top of this file) and
// commits them. On error the whole transaction, the planning included, is
// rolled back: the cache is as before the operation, but for what a
// panicking Mover leaves (see copyFailed).
func (c *Cache) execute() error {
	t := &c.tx
	t.executing = true
	if err := c.stage(); err != nil {
		c.unstage()
		c.rollback()
		return err
	}
	c.beginPolicies()
	for _, u := range t.unpins {
		t.log(undoRec{kind: undoUnpin, u: u})
	}
	for _, u := range t.crossings {
		// The unpins that made a unit evictable, in order.
		c.tiers.arena(GPU, c.poolOf(u)).unpin(u)
	}
	for i := range t.needs {
		n := &t.needs[i]
		p := c.poolOf(n.u)
		switch n.act {
		case actHit, actRewrite:
			if n.pinned {
				c.tiers.arena(GPU, p).pin(n.u)
			}
			t.log(undoRec{kind: undoPin, u: n.u})
		case actOnboard, actRecompute:
			// Pinned so that no eviction of this operation picks it; an
			// actRecompute unit's copy must survive a rollback.
			c.pinResident(n.u, n.from, p)
		case actCopy:
			if n.from == GPU {
				if n.pinned {
					c.tiers.arena(GPU, p).pin(n.src)
				}
				t.log(undoRec{kind: undoPin, u: n.src})
			} else {
				c.pinResident(n.src, n.from, p)
			}
			t.temps = append(t.temps, tempPin{u: n.src, tier: n.from})
		}
	}
	if c.poisoned != nil {
		// A policy panicked while told of the pins.
		return c.abort(c.poisoned)
	}
	t.toPlace = append(t.toPlace[:0], t.perPool[:len(c.geom.pools)]...) // stage's need
	for i := range t.needs {
		n := &t.needs[i]
		if n.act.pinsInPlace() {
			continue
		}
		p := c.poolOf(n.u)
		copyStart, moveStart := len(t.batch), len(t.moves)
		s, ok, err := c.takeSlot(GPU, p, n.u)
		if err == nil && !ok {
			// The capacity check found the slots.
			err = c.poison(c.tiers.arena(GPU, p), "Evict found no victim among %d evictable units", c.tiers.arena(GPU, p).evictable())
		}
		if err != nil {
			return c.abort(err)
		}
		t.toPlace[p]--
		// The slot is the unit's from now on; its policy hears of it at
		// commit (no policy can pick a unit it does not know, and no
		// rollback has to take it back).
		n.slot = s
		c.tiers.arena(GPU, p).setOwner(s, n.u)
		switch n.act {
		case actOnboard:
			t.recordMove(move{kind: moveLoad, from: n.from, u: n.u, slot: c.units.slotOf(n.u)})
			t.batch = append(t.batch, Copy{Pool: p, From: n.from, FromSlot: c.units.slotOf(n.u), To: GPU, ToSlot: s})
		case actCopy:
			t.recordMove(move{kind: moveCopy, from: n.from, u: n.u, src: n.src})
			t.batch = append(t.batch, Copy{Pool: p, From: n.from, FromSlot: c.units.slotOf(n.src), To: GPU, ToSlot: s})
		default:
			if len(t.batch) > copyStart {
				// Fresh in a slot whose victim is still moving down.
				t.recordMove(move{kind: moveVacate, u: n.u})
			}
		}
		if t.recordsMoves && len(t.moves) > moveStart {
			t.addChain(&c.units, n, c.geom.sliceLayer[c.units.slice(n.u)], copyStart, moveStart)
		}
	}
	t.flushSpare(&c.units, c.geom.sliceLayer)
	if c.poisoned != nil {
		return c.abort(c.poisoned)
	}
	if len(t.batch) > 0 && c.mover != nil {
		if err := c.copyBatch(t.batch); err != nil {
			return c.copyFailed(err)
		}
	}
	c.commit()
	switch {
	case c.engine == nil:
	case t.build != nil:
		// A step of a long operation: its chains join the operation's
		// open transfers, started when it is planned.
		before := t.build.loading
		c.xfer.addChains(t.build, t, &c.units)
		t.loading = t.build.loading - before
	default:
		t.loading = c.submit(t.owner)
	}
	return nil
}

// pinResident pins u where it is, in tier t's arena of pool p, for the
// running transaction.
func (c *Cache) pinResident(u UnitID, t Tier, p int) {
	c.tiers.arena(t, p).pinResident(u, c.units.slotOf(u), !lowerHeld(c.units.of(u)))
	c.tx.log(undoRec{kind: undoPinResident, tier: t, pool: int32(p), u: u})
}

// stage applies the transaction's GPU pin changes to the pin counts only
// (unpins, then the needs' hits and copy sources on the GPU), marking the
// needs whose unit becomes pinned (need.pinned) and recording the unpins
// that make a unit evictable (crossings), and checks that every GPU pool
// can supply the slots the needs take: its free slots plus its evictable
// units once the pins apply. It returns an error wrapping ErrNoSpace
// otherwise; the caller then undoes the counts (unstage).
func (c *Cache) stage() error {
	t := &c.tx
	np := len(c.geom.pools)
	if cap(t.perPool) < 2*np {
		t.perPool = make([]int, 2*np)
	}
	t.perPool = t.perPool[:2*np]
	clear(t.perPool)
	need, gained := t.perPool[:np], t.perPool[np:]
	// The operation places units of one namespace (its sequence's), whose
	// shares of the GPU say what it can obtain (see Share).
	var tenant uint8
	if len(t.needs) > 0 {
		tenant = c.units.rec(t.needs[0].u).tenant
	}
	for _, u := range t.unpins {
		st := c.units.of(u)
		st.pins--
		switch {
		case st.pins > 0:
		case !gpuHeld(st):
			t.crossings = append(t.crossings, u)
			p := c.poolOf(u)
			gained[p] += c.tiers.arena(GPU, p).pinEffect(u, -1)
		case st.busy == 0:
			// No bytes and nothing holds it once the operation is
			// done: dropped then, unless a rollback pins it again.
			c.dropLater(u)
		}
	}
	for k := range t.needs {
		n := &t.needs[k]
		p := c.poolOf(n.u)
		var u UnitID
		switch {
		case n.act.pinsInPlace():
			u = n.u
		case n.act == actCopy && n.from == GPU:
			u = n.src
			need[p]++
		default:
			need[p]++
			continue
		}
		st := c.units.of(u)
		n.pinned = st.pins == 0 && !gpuHeld(st)
		if n.pinned {
			gained[p] += c.tiers.arena(GPU, p).pinEffect(u, 1)
		}
		st.pins++
	}
	if c.blockKeys {
		// The counts pinEffect changed are the commit's to change.
		c.undoPinEffects()
	}
	for p := range np {
		// A unit that becomes pinned is one evictable unit fewer. A long
		// operation's step may use what was reserved for it.
		a := c.tiers.arena(GPU, p).availableTo(tenant) - gained[p]
		if t.reserve != nil {
			a += t.reserve[p]
		}
		if need[p] > a {
			return fmt.Errorf("%w: GPU pool %d needs %d slots, %d free or evictable", ErrNoSpace, p, need[p], a)
		}
	}
	if t.reserve != nil {
		// What the step takes comes out of its reservation first.
		for p := range np {
			take := min(t.reserve[p], need[p]+gained[p])
			t.reserve[p] -= take
			c.tiers.arena(GPU, p).reserved -= take
			t.taken[p] += take
		}
	}
	return nil
}

// unstage undoes the pin counts stage changed.
func (c *Cache) unstage() {
	t := &c.tx
	for i := range t.needs {
		n := &t.needs[i]
		switch {
		case n.act.pinsInPlace():
			c.units.of(n.u).pins--
		case n.act == actCopy && n.from == GPU:
			c.units.of(n.src).pins--
		}
	}
	for _, u := range t.unpins {
		c.units.of(u).pins++
	}
	t.crossings = t.crossings[:0]
	t.unreserve()
}

// beginPolicies starts a transaction in every policy that can roll back.
// Without a Mover nothing can fail once the policies are told (ErrNoSpace
// is found before, and a broken policy poisons the cache, after which
// their state no longer matters), so they are spared the recording.
func (c *Cache) beginPolicies() {
	if c.mover == nil {
		return
	}
	c.tx.recording = true
	c.tiers.each((*arena).policyBegin)
}

// commitPolicies ends the transaction of every policy that can roll back.
func (c *Cache) commitPolicies() {
	if !c.tx.recording {
		return
	}
	c.tx.recording = false
	c.tiers.each((*arena).policyCommit)
}

// copyFailed rolls back a transaction whose batch the Mover failed. A
// Mover that returned an error wrote nothing (its contract); one that
// panicked may have written any destination, so the units left in those
// slots after the rollback (victims given their slots back) are dropped.
// A victim the operation's own sequence had unpinned in the same call is
// pinned again by the rollback: that sequence's KV is then unknown, so it
// is ended (as by Abort) before its units are dropped.
func (c *Cache) copyFailed(err error) error {
	t := &c.tx
	var pe *PanicError
	if !errors.As(err, &pe) {
		return c.abort(fmt.Errorf("%w: batch of %d copies: %w", ErrCopyFailed, len(t.batch), err))
	}
	c.scratch.lost = append(c.scratch.lost[:0], t.batch...)
	n, seq := len(t.batch), t.seq
	err = c.abort(fmt.Errorf("%w: batch of %d copies: %w", ErrCopyFailed, n, err))
	for _, cp := range c.scratch.lost {
		if u := c.tiers.arena(cp.To, cp.Pool).owner[cp.ToSlot]; u != noUnit && cp.To == GPU && c.units.pinsOf(u) > 0 && seq != nil {
			c.end(seq)
			c.st.aborted++
			err = fmt.Errorf("%w; sequence %d ended: the batch may have overwritten KV it holds", err, seq.id)
			break
		}
	}
	for _, cp := range c.scratch.lost {
		a := c.tiers.arena(cp.To, cp.Pool)
		u := a.owner[cp.ToSlot]
		if u == noUnit {
			continue
		}
		if c.units.tierOf(u) != cp.To {
			// A backup the rollback gave its slot back (see
			// writethrough.go): given up, the unit keeps its bytes.
			c.freeBackup(u, true)
			continue
		}
		if cp.To == GPU && c.units.pinsOf(u) > 0 {
			// Only the operation's sequence can pin a victim again, and
			// it has ended; should another pin remain, no slot whose
			// bytes are unknown may be served.
			if c.poisoned == nil {
				c.poisoned = fmt.Errorf("%w: unit %d is pinned in a slot the batch may have written", err, u)
			}
			continue
		}
		a.lost++
		c.dropResident(u)
	}
	c.collectPending()
	if c.poisoned != nil && errors.Is(c.poisoned, ErrPolicy) && !errors.Is(err, ErrPolicy) {
		// A policy broke while told of the drops: the caller learns it
		// now, not from its next call.
		err = fmt.Errorf("%w; then %w", err, c.poisoned)
	}
	return err
}

// takeSlot returns a slot of tier t in pool p for unit u of the running transaction,
// making room when none is free: the arena's policy names a victim, which
// moves down to the next tier when the Decider says so and that tier can
// make room (recursively: its own victim's move enters the batch first),
// and is dropped otherwise. ok is false when the arena has neither a free
// slot nor an evictable unit. It fails only when a policy broke its
// contract (the caller rolls back).
func (c *Cache) takeSlot(t Tier, p int, u UnitID) (slot int32, ok bool, err error) {
	tx := &c.tx
	a := c.tiers.arena(t, p)
	if a.tenants != nil {
		// The slot is for u: the shares of its namespace and the
		// others' say which (see Share).
		return c.takeSharedSlot(a, t, p, u)
	}
	if s, ok := c.tx.takeSpare(a); ok {
		// Emptied by this operation: its victim's undo gives it back.
		return s, true, nil
	}
	if s, ok := a.pop(); ok {
		tx.log(undoRec{kind: undoSlot, tier: t, pool: int32(p), slot: s, u: noUnit})
		return s, true, nil
	}
	if a.grouped() {
		return c.evictBlock(a, t, p)
	}
	v, ok := a.evict()
	if !ok {
		if n := a.evictable(); n > 0 {
			return 0, false, c.poison(a, "Evict found no victim among %d evictable units", n)
		}
		return 0, false, nil
	}
	return c.evictUnit(a, t, p, v, false)
}

// evictBlock is takeSlot's eviction in an arena with block keys: the
// policy's victim block leaves whole, one slot goes to the caller and the
// others to the arena's spare slots, for the operation's next placements
// there.
func (c *Cache) evictBlock(a *arena, t Tier, p int) (slot int32, ok bool, err error) {
	vs, ok, err := a.evictBlock()
	if err != nil {
		return 0, false, err
	}
	if !ok {
		if n := a.evictable(); n > 0 {
			return 0, false, c.poison(a, "Evict found no victim among %d evictable units", n)
		}
		return 0, false, nil
	}
	slot = -1
	tx := &c.tx
	// With an Engine, a slot left unused at the end of the operation
	// stays its victim's until the victim's move down is done (see
	// releaseSpare): GPU capacity that a long operation's reservation may
	// count on. Where one is held and the operation will not take every
	// slot of the block, the block is dropped, whole: nothing reads its
	// slots, and no part of it is left below without the rest.
	drop := t == GPU && c.engine != nil && a.reserved > 0 && p < len(tx.toPlace) && tx.toPlace[p] < len(vs)
	for i, v := range vs {
		b0, m0 := len(tx.batch), len(tx.moves)
		s, ok, err := c.evictUnit(a, t, p, v, drop)
		if err != nil || !ok {
			// The cache is poisoned (a policy below broke): the
			// victims not evicted yet are counted as before, so that
			// the accounting stays exact. (vs is a.victims, which only
			// this arena's evictions change.)
			for _, w := range vs[i+1:] {
				if a.insert(w, c.entryOf(w), false) != nil {
					a.track(w, false)
				}
			}
			return 0, false, err
		}
		if slot < 0 {
			slot = s
		} else {
			tx.deferEviction(a, s, v, b0, m0)
		}
	}
	return slot, true, nil
}

// evictUnit evicts victim v, which arena a (tier t, pool p) no longer
// tracks, and returns its slot; drop says to drop it (the Decider is not
// asked). It fails only when v is not a victim the policy could return
// (the cache is poisoned).
func (c *Cache) evictUnit(a *arena, t Tier, p int, v UnitID, drop bool) (slot int32, ok bool, err error) {
	tx := &c.tx
	if s, ok := c.isBackupVictim(a, v); ok {
		// A backup: the unit keeps its bytes on the GPU, the slot is
		// free.
		tx.log(undoRec{kind: undoSlot, tier: t, pool: int32(p), slot: s, u: v})
		tx.log(undoRec{kind: undoBackup, u: v, slot: s})
		c.units.of(v).backup = 0
		a.backups--
		return s, true, nil
	}
	if !c.isVictim(a, v) {
		if a.grouped() {
			a.track(v, false) // a unit of the block, counted as before
		} else {
			a.tracked++ // no unit of the arena left
			if a.tenants != nil {
				// takeSharedSlot counted it out of its namespace too
				// (it checked that v is one of that namespace's).
				a.countTracked(v, 1, 0)
			}
		}
		return 0, false, c.poison(a, "Evict returned %d, not an evictable unit of the arena", v)
	}
	s := c.units.slotOf(v)
	tx.log(undoRec{kind: undoSlot, tier: t, pool: int32(p), slot: s, u: v})
	to := int32(-1)
	moved := !drop && t < c.tiers.last() && c.shouldMove(v, t, p)
	if st := c.units.of(v); moved && t+1 == c.wt.tier && c.hasBackup(st) {
		// Written through already: the backup becomes its location at
		// commit. Pinned there meanwhile, so that the tier's policy
		// does not evict it in the same operation.
		bs := st.backup - 1
		c.tiers.arena(t+1, p).pinResident(v, bs, true)
		tx.log(undoRec{kind: undoPinBackup, tier: t + 1, pool: int32(p), slot: bs, u: v})
		tx.victims = append(tx.victims, victim{u: v, tier: t, pool: int32(p), slot: s, to: bs, backup: true})
		return s, true, nil
	}
	if moved {
		ds, ok, err := c.takeSlot(t+1, p, v)
		if err != nil {
			return 0, false, err
		}
		if ok {
			// Reserved for v, which the tier's policy hears of at
			// commit, like every unit an operation places.
			c.tiers.arena(t+1, p).setOwner(ds, v)
			tx.recordMove(move{kind: moveDown, from: t, u: v, slot: ds})
			tx.batch = append(tx.batch, Copy{Pool: p, From: t, FromSlot: s, To: t + 1, ToSlot: ds})
			to = ds
		}
	}
	atCap := false
	if to < 0 {
		// Counted out now, so that later victims of this operation see
		// the block lacking it (see Victim.Whole).
		b := c.units.block(v)
		c.loseBytes(b)
		tx.log(undoRec{kind: undoDrop, b: b})
		atCap = moved && c.tiers.arena(t+1, p).atCap(v)
	}
	tx.victims = append(tx.victims, victim{u: v, tier: t, pool: int32(p), slot: s, to: to, atCap: atCap})
	return s, true, nil
}

// isVictim reports whether v, returned by the Evict of a's policy, is a unit
// the policy could evict: a live unit (its block's current generation) of
// a's tier and pool that holds the slot the cache gave it, pinned neither on
// the GPU nor by the running transaction in a lower tier (an onboard,
// recompute or copy source), and not evicted or moved already by the
// running transaction (its slot then has a new owner, or its tier is not
// yet a's).
func (c *Cache) isVictim(a *arena, v UnitID) bool {
	if !c.units.current(v, c.geom.slices) {
		return false
	}
	if c.units.tierOf(v) != a.tier || c.poolOf(v) != a.pool {
		return false
	}
	s := c.units.slotOf(v)
	if s < 0 || int(s) >= a.capacity() || a.owner[s] != v {
		return false
	}
	st := c.units.of(v)
	if a.tier != GPU {
		return !a.txPinned[s] && !lowerHeld(st)
	}
	return !a.txPinned[s] && st.busy == 0 && st.pins == 0 && st.flags&unitUnwritten == 0
}

// isBackupVictim reports whether v, returned by the Evict of a's policy,
// is the backup of a live unit of a tier above (see writethrough.go) in
// a's tier and pool, and returns its slot.
func (c *Cache) isBackupVictim(a *arena, v UnitID) (int32, bool) {
	if a.tier != c.wt.tier || a.tier == GPU || !c.units.current(v, c.geom.slices) || c.poolOf(v) != a.pool {
		return 0, false
	}
	st := c.units.of(v)
	s := st.backup - 1
	if !c.aboveWriteThrough(st.tier) || !c.hasBackup(st) || a.owner[s] != v || a.txPinned[s] {
		return 0, false
	}
	return s, true
}

func (c *Cache) undoOne(r undoRec) {
	switch r.kind {
	case undoPin:
		c.unpinUnit(r.u)
	case undoUnpin:
		c.pinUnit(r.u)
	case undoPinResident:
		c.tiers.arena(r.tier, int(r.pool)).unpinResident(r.u, c.units.slotOf(r.u), !lowerHeld(c.units.of(r.u)))
	case undoSlot:
		a := c.tiers.arena(r.tier, int(r.pool))
		if r.u == noUnit {
			a.push(r.slot)
			return
		}
		// Give the slot back to the victim, which still has its bytes
		// there: the Mover wrote nothing (see Mover).
		a.setOwner(r.slot, r.u)
		if st := c.units.of(r.u); st.tier != r.tier {
			// A backup (undoBackup, undone before, gave it back its
			// slot): tracked again, or given up if the policy refuses.
			if err := a.insert(r.u, c.entryOf(r.u), false); err != nil {
				c.poison(a, "Insert of unit %d: %w", r.u, err)
				a.push(r.slot)
				st.backup = 0
				a.backups--
			}
			return
		}
		if err := a.insert(r.u, c.entryOf(r.u), false); err != nil {
			// The policy will not track the victim again: it loses
			// its bytes as if evicted and dropped, so that its slot
			// is free rather than held by an untracked unit.
			c.poison(a, "Insert of unit %d: %w", r.u, err)
			a.push(r.slot)
			a.evictions++
			a.drops++
			c.loseBytes(c.units.block(r.u))
			c.dropUnit(r.u)
			c.emitMove(r.u, r.tier, Dropped)
		}
	case undoDrop:
		c.units.blk(r.b).held++
	case undoBackup:
		c.units.of(r.u).backup = r.slot + 1
		c.tiers.arena(c.wt.tier, c.poolOf(r.u)).backups++
	case undoPinBackup:
		c.tiers.arena(r.tier, int(r.pool)).unpinResident(r.u, r.slot, true)
	case undoAlloc:
		c.units.release(r.b)
	case undoRef:
		rec := c.units.blk(r.b)
		rec.refs--
		if r.sparse {
			rec.sparseRefs--
		}
		if r.prev != notHollow {
			c.meta.relinkHollow(&c.units, r.b, r.prev)
		}
	}
}

// abort rolls the running transaction back and returns err, or the poison
// error when a policy refused to take a victim back during the rollback
// (err is then only named).
func (c *Cache) abort(err error) error {
	c.rollback()
	if c.poisoned != nil && !errors.Is(err, ErrPolicy) {
		return fmt.Errorf("%w (rolling back after: %v)", c.poisoned, err)
	}
	return err
}

// rollback undoes the running transaction, newest change first.
func (c *Cache) rollback() {
	t := &c.tx
	// A transactional policy undoes its own calls (exactly: order,
	// history, timers); replaying the log then only restores the cache's
	// accounting. Others are compensated call by call (victims inserted
	// again, pins undone by Unpin), which may reorder them.
	c.tiers.each(func(a *arena) { a.replaying = t.recording && a.txPolicy != nil && a.broken == nil })
	t.recording = false
	t.unreserve()
	for i := len(t.undo) - 1; i >= 0; i-- {
		c.undoOne(t.undo[i])
	}
	c.tiers.each(func(a *arena) {
		if a.replaying {
			a.replaying = false
			a.policyRollback()
		}
	})
	t.reset()
	c.collectPending()
}

// dropUnit marks u, whose slot was already released, as having no bytes.
// Its block's held count must already be down (a victim's is counted out
// when chosen, see takeSlot).
func (c *Cache) dropUnit(u UnitID) {
	c.dropBackup(u)
	c.units.place(u, Dropped, -1)
	b := c.units.block(u)
	if c.units.blk(b).held == 0 {
		c.gcQueue = append(c.gcQueue, b)
	}
}

// markInFlight holds the units the committed transaction's copies move,
// and the copies' sources, for their transfers (see transfers.go; addChains
// names the transfers in the units' loadBy and storeBy).
func (c *Cache) markInFlight() {
	for _, m := range c.tx.moves {
		c.hold(m.u)
		if m.kind == moveCopy {
			c.hold(m.src)
		}
	}
}

// place tells the policy of arena a about u, which the committing
// transaction put in one of a's slots (pinned: a unit a sequence uses). A
// policy that refuses it poisons the cache, and u is counted as tracked all
// the same: the operation's copies are done, so it stays.
func (c *Cache) place(a *arena, u UnitID, pinned bool) {
	var e eviction.Entry
	if a.wantsEntry(c.units.block(u)) {
		e = c.entryOf(u)
	}
	c.placeEntry(a, u, e, pinned)
}

// placeEntry is place with u's entry, e, made by the caller: entryOf(u)
// when a.wantsEntry of u's block, anything otherwise (the arena then
// tells the policy nothing of e).
func (c *Cache) placeEntry(a *arena, u UnitID, e eviction.Entry, pinned bool) {
	if err := a.insert(u, e, pinned); err != nil {
		c.poison(a, "Insert of unit %d: %w", u, err)
		a.track(u, pinned)
	}
}

// commit applies a successful transaction and closes it. With a
// TransferEngine the copies have not run yet: the commit is the same (the
// moves and copies are counted and reported as planned), but what they
// move stays in flight (markInFlight): a victim moving down is pinned in
// its new tier, a load's source stays in its slot below and a copy's
// source stays pinned, until the transfer is done (see transfers.go).
func (c *Cache) commit() {
	t := &c.tx
	t.committing = true
	async := c.engine != nil && len(t.batch) > 0
	c.commitPolicies()
	for i := range t.victims {
		v := &t.victims[i]
		a := c.tiers.arena(v.tier, int(v.pool))
		a.evictions++
		if at := a.tenants; at != nil {
			at.list[a.tenantOf(v.u)].evictions++
		}
		if v.atCap {
			da := c.tiers.arena(v.tier+1, int(v.pool))
			da.tenants.list[da.tenantOf(v.u)].dropsAtTheCap++
		}
		if v.backup {
			// Its backup, which the tier's policy tracks already,
			// becomes its location: no copy.
			da := c.tiers.arena(v.tier+1, int(v.pool))
			da.unpinResident(v.u, v.to, true)
			c.units.place(v.u, v.tier+1, v.to)
			c.units.of(v.u).backup = 0
			da.backups--
			da.moved++
			c.st.offloads++
			c.emitMove(v.u, v.tier, v.tier+1)
		} else if v.to >= 0 {
			da := c.tiers.arena(v.tier+1, int(v.pool))
			c.units.place(v.u, v.tier+1, v.to)
			c.place(da, v.u, async)
			da.moved++
			c.st.offloads++
			c.st.bytesMoved += c.geom.pools[v.pool].unitBytes
			c.emitMove(v.u, v.tier, v.tier+1)
		} else {
			a.drops++
			c.dropUnit(v.u)
			c.emitMove(v.u, v.tier, Dropped)
		}
	}
	for i := range t.needs {
		n := &t.needs[i]
		if n.act == actRewrite && t.owner != nil && !t.owner.sparse {
			// Written by the owner's server, which declares it.
			t.owner.rewrite = append(t.owner.rewrite, n.u)
		}
		if n.act.pinsInPlace() {
			continue
		}
		p := c.poolOf(n.u)
		switch n.act {
		case actOnboard, actRecompute:
			a := c.tiers.arena(n.from, p)
			s := c.units.slotOf(n.u)
			// A claim on the unit ends: its pin, if it held it, is the
			// move's to release (removed below, or held by the transfer
			// that reads the slot).
			c.units.of(n.u).flags &^= unitClaimed
			if async && n.act == actOnboard {
				// The load reads its slot below until it is done: the
				// unit stays there, pinned (finishLoad frees it).
				a.txPinned[s] = false
			} else if n.act == actRecompute && c.units.of(n.u).busy > 0 {
				// Recomputed while a transfer holds it (its move down
				// writes that slot, or a copy-on-write reads it): the
				// slot stays reserved, pinned, until the last transfer
				// lets go of the unit (see leaveSlot).
				a.txPinned[s] = false
				c.xfer.left[n.u] = append(c.xfer.left[n.u], leftSlot{tier: n.from, slot: s})
			} else if n.act == actOnboard && n.from == c.wt.tier {
				// Loaded back from the write-through tier: its copy
				// there stays, as its backup.
				a.unpinResident(n.u, s, true)
				a.backups++
				c.units.of(n.u).backup = s + 1
			} else {
				a.remove(n.u, true)
				a.push(s)
			}
			if n.act == actRecompute {
				// Rewritten: a backup below holds the old bytes.
				c.voidBackup(n.u)
			}
			if n.act == actOnboard {
				c.st.onboards++
				c.st.bytesMoved += c.geom.pools[p].unitBytes
				c.emitMove(n.u, n.from, GPU)
			} else {
				// Its copy below is given up (no copy, no onboard) and
				// the server recomputes it into the new GPU slot: for a
				// router, the unit was dropped and then restored.
				c.emitMove(n.u, n.from, Dropped)
				c.emitMove(n.u, Dropped, GPU)
			}
		case actCopy:
			c.gainBytes(c.units.block(n.u))
			c.st.copies++
			c.st.bytesMoved += c.geom.pools[p].unitBytes
		case actFresh:
			c.gainBytes(c.units.block(n.u))
			c.emitMove(n.u, Dropped, GPU)
		}
		c.units.place(n.u, GPU, n.slot)
		c.units.of(n.u).pins = 1
		c.place(c.tiers.arena(GPU, p), n.u, true)
	}
	if async {
		// Before the copy sources lose their pins: the transfers hold
		// them now.
		c.markInFlight()
	}
	for _, tp := range t.temps {
		switch {
		case tp.tier == GPU:
			c.unpinUnit(tp.u)
		default:
			c.tiers.arena(tp.tier, c.poolOf(tp.u)).unpinResident(tp.u, c.units.slotOf(tp.u), !lowerHeld(c.units.of(tp.u)))
		}
	}
	c.releaseSpare()
	t.defCopies, t.defMoves = t.defCopies[:0], t.defMoves[:0]
	t.toPlace = t.toPlace[:0]
	t.undo = t.undo[:0]
	t.temps = t.temps[:0]
	t.open, t.executing, t.committing = false, false, false
}

// exited finishes an operation whose goroutine user code ended
// (runtime.Goexit) while it executed, as it would have had the code
// panicked: a Mover's batch failed with unknown writes (copyFailed), a
// policy or Decider broke the cache (poisoned already), whose transaction
// is rolled back unless its commit had begun (then what the commit had
// not done yet is lost, and the cache stays poisoned).
func (c *Cache) exited() {
	t := &c.tx
	switch {
	case t.moverExited:
		_ = c.copyFailed(newPanicError("Mover.Copy", goexitValue))
	case t.committing:
		if c.poisoned == nil {
			c.poisoned = fmt.Errorf("%w: the operation's goroutine ended during its commit", ErrPolicy)
		}
		t.reset()
	default:
		c.rollback()
	}
}

// close ends a transaction that succeeded without executing (or after it):
// its log is dropped.
func (c *Cache) close() {
	c.tx.undo = c.tx.undo[:0]
	c.tx.open = false
}
