package kvcache

import (
	"errors"
	"fmt"
)

// An operation that changes which units are pinned or resident runs as a
// transaction over the cache's state:
//
//  1. unpin the units the operation releases (so they can be evicted);
//  2. pin what it needs: GPU hits are pinned, CPU units to onboard and the
//     sources of copy-on-write copies are pinned in their arenas so that no
//     eviction of this operation can pick them;
//  3. check that every GPU pool can supply the slots needed (free slots
//     plus evictable units), else roll back and fail with ErrNoSpace;
//  4. take the slots, evicting victims (offloaded to the CPU when the CPU
//     arena has or can make room, the cost model agrees and their block
//     has every other unit's bytes, dropped otherwise; CPU victims are
//     dropped), and plan one batch of copies:
//     each victim's offload before the copy that reuses its slot;
//  5. hand the batch to the Mover; on error roll every step back;
//  6. commit: units change tier, victims leave, events and stats.
//
// Every change before the commit is logged, and rollback undoes the log in
// reverse, so a failed operation leaves every unit, slot and pin where it
// was. The only trace a rollback leaves is in the policies' order: victims
// are re-inserted (as if new) and pins undone with Unpin, which recency
// policies treat as a use.

type action uint8

const (
	actHit     action = iota // the unit is on the GPU: pin it
	actOnboard               // the unit is on the CPU: move it to the GPU
	actFresh                 // the unit gets a GPU slot the server fills
	actCopy                  // the unit gets a GPU slot filled from src (copy-on-write)
	// actRecompute: the unit is on the CPU but its block is recomputed
	// (another needed unit of the block has no bytes), so copying it back
	// would be overwritten: it gets a fresh GPU slot and its CPU copy is
	// released at commit.
	actRecompute
)

// need is one unit an operation wants pinned on the GPU.
type need struct {
	u    UnitID
	src  UnitID // actCopy: the unit copied
	slot int32  // the GPU slot, once allocated (actHit: its current slot)
	act  action
	// pinned says whether the need's GPU unit (a hit, or a copy source on
	// the GPU) had no pin before the transaction: the policy is told.
	pinned bool
}

type undoKind uint8

const (
	undoPin    undoKind = iota // a GPU pin was added to u
	undoUnpin                  // a GPU pin was removed from u
	undoCPUPin                 // u was pinned in its CPU arena
	undoSlot                   // a slot was taken: from the free list (u == noUnit) or from victim u
	undoInsert                 // u was inserted, pinned, into an arena
)

type undoRec struct {
	kind undoKind
	tier Tier
	pool int32
	slot int32
	u    UnitID
}

// victim is a unit evicted by the running transaction.
type victim struct {
	u    UnitID
	pool int32
	slot int32 // the slot it leaves
	to   int32 // GPU victims: the CPU slot it is offloaded to, -1 if dropped
}

// txn is the scratch state of the running transaction, reused across
// operations so that steady-state operations do not allocate.
type txn struct {
	undo       []undoRec
	needs      []need
	unpins     []UnitID
	batch      []Copy
	gpuVictims []victim
	cpuVictims []victim
	tempGPU    []UnitID
	tempCPU    []UnitID
	perPool    []int
	crossings  []crossing
	// seq is the live sequence the operation changes (Append, Truncate,
	// SparseAccess), nil for one it creates: the units the operation
	// unpins are its (see copyFailed).
	seq *sequence
	// recording says whether the policies were told Begin.
	recording bool
}

func (t *txn) reset() {
	t.undo = t.undo[:0]
	t.needs = t.needs[:0]
	t.unpins = t.unpins[:0]
	t.batch = t.batch[:0]
	t.gpuVictims = t.gpuVictims[:0]
	t.cpuVictims = t.cpuVictims[:0]
	t.tempGPU = t.tempGPU[:0]
	t.tempCPU = t.tempCPU[:0]
	t.crossings = t.crossings[:0]
	t.seq = nil
}

func (t *txn) log(k undoKind, tier Tier, pool int, slot int32, u UnitID) {
	t.undo = append(t.undo, undoRec{kind: k, tier: tier, pool: int32(pool), slot: slot, u: u})
}

// pinUnit adds a pin to u, which is on the GPU.
func (c *Cache) pinUnit(u UnitID) {
	c.uPins[c.ix(u)]++
	if c.uPins[c.ix(u)] == 1 {
		c.gpu[c.poolOfUnit(u)].pin(u)
	}
}

// unpinUnit removes a pin from u, which is on the GPU.
func (c *Cache) unpinUnit(u UnitID) {
	c.uPins[c.ix(u)]--
	if c.uPins[c.ix(u)] == 0 {
		c.gpu[c.poolOfUnit(u)].unpin(u)
	}
}

// classify returns the action that pins u on the GPU given its tier.
func (c *Cache) classify(u UnitID) action {
	switch c.uTier[c.ix(u)] {
	case GPU:
		return actHit
	case CPU:
		return actOnboard
	}
	return actFresh
}

// addNeed queues u to be pinned on the GPU.
func (c *Cache) addNeed(u UnitID) action {
	a := c.classify(u)
	c.tx.needs = append(c.tx.needs, need{u: u, act: a, slot: c.uSlot[c.ix(u)]})
	return a
}

// addCopyNeed queues u (with no bytes) to get a GPU slot filled from src;
// when src has no bytes either, u is fresh (to compute).
func (c *Cache) addCopyNeed(u, src UnitID) action {
	if c.uTier[c.ix(src)] == Dropped {
		c.tx.needs = append(c.tx.needs, need{u: u, act: actFresh})
		return actFresh
	}
	c.tx.needs = append(c.tx.needs, need{u: u, act: actCopy, src: src})
	return actCopy
}

// runTxn executes the queued unpins and needs (see the comment at the top of
// this file). On error the cache is as before the call.
func (c *Cache) runTxn() error {
	t := &c.tx
	t.undo = t.undo[:0]
	t.crossings = t.crossings[:0]
	// Stage the GPU pin changes on the counts alone: the capacity check
	// needs them, and a request that does not fit must fail before any
	// policy has been told anything.
	if err := c.stage(); err != nil {
		c.unstagePins()
		t.reset()
		return err
	}
	c.beginPolicies()
	for _, u := range t.unpins {
		t.log(undoUnpin, GPU, 0, 0, u)
	}
	for _, x := range t.crossings {
		// The unpins that made a unit evictable, in order.
		c.gpu[c.poolOfUnit(x.u)].unpin(x.u)
	}
	for i := range t.needs {
		n := &t.needs[i]
		p := c.poolOfUnit(n.u)
		switch n.act {
		case actHit:
			if n.pinned {
				c.gpu[p].pin(n.u)
			}
			t.log(undoPin, GPU, p, 0, n.u)
		case actOnboard, actRecompute:
			// Pinned so that no CPU eviction of this operation picks it;
			// an actRecompute unit's CPU copy must survive a rollback.
			c.cpu[p].pinResident(n.u, c.uSlot[c.ix(n.u)])
			t.log(undoCPUPin, CPU, p, 0, n.u)
		case actCopy:
			switch c.uTier[c.ix(n.src)] {
			case GPU:
				if n.pinned {
					c.gpu[p].pin(n.src)
				}
				t.log(undoPin, GPU, p, 0, n.src)
				t.tempGPU = append(t.tempGPU, n.src)
			case CPU:
				c.cpu[p].pinResident(n.src, c.uSlot[c.ix(n.src)])
				t.log(undoCPUPin, CPU, p, 0, n.src)
				t.tempCPU = append(t.tempCPU, n.src)
			}
		}
	}
	if c.poisoned != nil {
		// A policy panicked while told of the pins.
		return c.abort(c.poisoned)
	}
	for i := range t.needs {
		n := &t.needs[i]
		if n.act == actHit {
			continue
		}
		p := c.poolOfUnit(n.u)
		s, err := c.takeGPU(p)
		if err != nil {
			return c.abort(err)
		}
		n.slot = s
		a := c.gpu[p]
		a.owner[s] = n.u
		if err := a.insert(n.u, c.entryOf(n.u), true); err != nil {
			return c.abort(c.poison(a, "Insert of unit %d: %w", n.u, err))
		}
		c.uPins[c.ix(n.u)] = 1
		t.log(undoInsert, GPU, p, s, n.u)
		switch n.act {
		case actOnboard:
			t.batch = append(t.batch, Copy{Pool: p, From: CPU, FromSlot: c.uSlot[c.ix(n.u)], To: GPU, ToSlot: s})
		case actCopy:
			t.batch = append(t.batch, Copy{Pool: p, From: c.uTier[c.ix(n.src)], FromSlot: c.uSlot[c.ix(n.src)], To: GPU, ToSlot: s})
		}
	}
	if c.poisoned != nil {
		return c.abort(c.poisoned)
	}
	if len(t.batch) > 0 && c.mover != nil {
		if err := c.copyBatch(t.batch); err != nil {
			return c.copyFailed(err)
		}
	}
	c.commit()
	return nil
}

// crossing is a unit of an unpin of the running transaction whose GPU pin
// count fell to zero: the policy is told it is evictable.
type crossing struct {
	u UnitID
}

// stage applies the transaction's GPU pin changes to the pin counts only
// (unpins, then the needs' hits and copy sources), marking the needs whose
// unit becomes pinned (need.pinned) and recording the unpins that make a
// unit evictable (crossings), and checks that every GPU pool can supply the
// slots the needs take: its free slots plus its evictable units once the
// pins apply. It returns an error wrapping ErrNoSpace otherwise; the caller
// then undoes the counts (unstagePins).
func (c *Cache) stage() error {
	t := &c.tx
	if cap(t.perPool) < 2*len(c.pools) {
		t.perPool = make([]int, 2*len(c.pools))
	}
	t.perPool = t.perPool[:2*len(c.pools)]
	clear(t.perPool)
	need, gained := t.perPool[:len(c.pools)], t.perPool[len(c.pools):]
	for _, u := range t.unpins {
		i := c.ix(u)
		c.uPins[i]--
		if c.uPins[i] == 0 {
			t.crossings = append(t.crossings, crossing{u: u})
			gained[c.poolOfUnit(u)]--
		}
	}
	for k := range t.needs {
		n := &t.needs[k]
		p := c.poolOfUnit(n.u)
		var u UnitID
		switch {
		case n.act == actHit:
			u = n.u
		case n.act == actCopy && c.uTier[c.ix(n.src)] == GPU:
			u = n.src
			need[p]++
		default:
			need[p]++
			continue
		}
		i := c.ix(u)
		n.pinned = c.uPins[i] == 0
		if n.pinned {
			gained[p]++
		}
		c.uPins[i]++
	}
	for p := range c.pools {
		// A unit that becomes pinned is one evictable unit fewer.
		if a := c.gpu[p].available() - gained[p]; need[p] > a {
			return fmt.Errorf("%w: GPU pool %d needs %d slots, %d free or evictable", ErrNoSpace, p, need[p], a)
		}
	}
	return nil
}

// unstagePins undoes the pin counts stage changed (a transaction that did
// not start).
func (c *Cache) unstagePins() {
	t := &c.tx
	for i := range t.needs {
		n := &t.needs[i]
		switch {
		case n.act == actHit:
			c.uPins[c.ix(n.u)]--
		case n.act == actCopy && c.uTier[c.ix(n.src)] == GPU:
			c.uPins[c.ix(n.src)]--
		}
	}
	for _, u := range t.unpins {
		c.uPins[c.ix(u)]++
	}
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
	for p := range c.pools {
		c.gpu[p].policyBegin()
		c.cpu[p].policyBegin()
	}
}

// commitPolicies ends the transaction of every policy that can roll back.
func (c *Cache) commitPolicies() {
	if !c.tx.recording {
		return
	}
	c.tx.recording = false
	for p := range c.pools {
		c.gpu[p].policyCommit()
		c.cpu[p].policyCommit()
	}
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
		if u := c.arenaOf(cp.To, cp.Pool).owner[cp.ToSlot]; u != noUnit && cp.To == GPU && c.uPins[c.ix(u)] > 0 && seq != nil {
			c.end(seq)
			c.st.aborted++
			err = fmt.Errorf("%w; sequence %d ended: the batch may have overwritten KV it holds", err, seq.id)
			break
		}
	}
	for _, cp := range c.scratch.lost {
		a := c.arenaOf(cp.To, cp.Pool)
		u := a.owner[cp.ToSlot]
		if u == noUnit {
			continue
		}
		if cp.To == GPU && c.uPins[c.ix(u)] > 0 {
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
	return err
}

// takeGPU returns a GPU slot of pool p, evicting a victim when none is free.
// It fails only when a policy broke its contract (the caller rolls back).
func (c *Cache) takeGPU(p int) (int32, error) {
	t := &c.tx
	a := c.gpu[p]
	if s, ok := a.pop(); ok {
		t.log(undoSlot, GPU, p, s, noUnit)
		return s, nil
	}
	v, ok := a.evict()
	if !ok {
		// The capacity check found evictable units.
		return 0, c.poison(a, "Evict found no victim among %d evictable units", a.evictable())
	}
	if !c.isVictim(a, v) {
		a.tracked++ // no unit of the arena left
		return 0, c.poison(a, "Evict returned %d, not an evictable unit of the arena", v)
	}
	s := c.uSlot[c.ix(v)]
	t.log(undoSlot, GPU, p, s, v)
	to := int32(-1)
	if c.shouldOffload(v, p) {
		cs, ok, err := c.takeCPU(p)
		if err != nil {
			return 0, err
		}
		if ok {
			ca := c.cpu[p]
			ca.owner[cs] = v
			if err := ca.insert(v, c.entryOf(v), true); err != nil {
				// The rollback gives cs back (to the free list or to
				// the CPU victim that left it) and v its GPU slot.
				return 0, c.poison(ca, "Insert of unit %d: %w", v, err)
			}
			t.log(undoInsert, CPU, p, cs, v)
			t.batch = append(t.batch, Copy{Pool: p, From: GPU, FromSlot: s, To: CPU, ToSlot: cs})
			to = cs
		}
	}
	if to < 0 {
		c.blocks[c.blockOf(v)].txDrops++
	}
	t.gpuVictims = append(t.gpuVictims, victim{u: v, pool: int32(p), slot: s, to: to})
	return s, nil
}

// takeCPU returns a CPU slot of pool p, dropping a CPU victim when none is
// free; ok is false when the arena is full of pinned units or has no slots.
// It fails only when the policy broke its contract (the caller rolls back).
func (c *Cache) takeCPU(p int) (int32, bool, error) {
	t := &c.tx
	a := c.cpu[p]
	if s, ok := a.pop(); ok {
		t.log(undoSlot, CPU, p, s, noUnit)
		return s, true, nil
	}
	v, ok := a.evict()
	if !ok {
		if n := a.evictable(); n > 0 {
			return 0, false, c.poison(a, "Evict found no victim among %d evictable units", n)
		}
		return 0, false, nil
	}
	if !c.isVictim(a, v) {
		a.tracked++ // no unit of the arena left
		return 0, false, c.poison(a, "Evict returned %d, not an evictable unit of the arena", v)
	}
	s := c.uSlot[c.ix(v)]
	t.log(undoSlot, CPU, p, s, v)
	c.blocks[c.blockOf(v)].txDrops++
	t.cpuVictims = append(t.cpuVictims, victim{u: v, pool: int32(p), slot: s, to: -1})
	return s, true, nil
}

// isVictim reports whether v, returned by the Evict of a's policy, is a unit
// the policy could evict: a live unit (its block's current generation) of
// a's tier and pool that holds the slot the cache gave it, pinned neither on
// the GPU nor by the running transaction in the CPU arena (an onboard,
// recompute or copy source), and not evicted already by the running
// transaction (its slot then has a new owner).
func (c *Cache) isVictim(a *arena, v UnitID) bool {
	if uint64(c.ix(v)) >= uint64(len(c.uTier)) || c.sliceOf(v) >= c.numSlices {
		return false
	}
	if b := c.blockOf(v); !c.blocks[b].live || c.unit(b, c.sliceOf(v)) != v {
		// A unit of a block forgotten since (its record's generation
		// moved on), or garbage in the generation bits.
		return false
	}
	if c.uTier[c.ix(v)] != a.tier || c.poolOfUnit(v) != a.pool {
		return false
	}
	s := c.uSlot[c.ix(v)]
	if s < 0 || int(s) >= a.capacity() || a.owner[s] != v {
		return false
	}
	return !a.txPinned[s] && (a.tier != GPU || c.uPins[c.ix(v)] == 0)
}

// shouldOffload decides whether GPU victim v of pool p goes to the CPU.
func (c *Cache) shouldOffload(v UnitID, p int) bool {
	if c.cpu[p].capacity() == 0 {
		return false
	}
	r := &c.blocks[c.blockOf(v)]
	if r.node == nil {
		// A private block (partial, never reusable) is pinned by its
		// sequence except while the Truncate that cuts it off runs,
		// which frees it once committed: a copy would be wasted.
		return false
	}
	if r.held-r.txDrops < int32(c.numSlices) && r.sparseRefs == 0 {
		// Another unit of the block has no bytes (or this transaction
		// drops it): whatever uses the block next recomputes it and
		// frees its CPU copies rather than reading them (a dense
		// Acquire or Truncate, see recomputeBlock; a sparse Acquire
		// stops before it and the Append that writes it again adopts
		// the node, see mergeBlock), so a copy would never be read. A
		// live sparse sequence is the exception: its SparseAccess
		// restores units one by one and onboards the others (see
		// Config.CostModel).
		return false
	}
	if c.cost == nil {
		return true
	}
	// One unit's copy back against its block's recompute: the marginal
	// choice under whole-block recompute (see Config.CostModel).
	return c.decideOffload(v, p)
}

func (c *Cache) undoOne(r undoRec) {
	switch r.kind {
	case undoPin:
		c.unpinUnit(r.u)
	case undoUnpin:
		c.pinUnit(r.u)
	case undoCPUPin:
		c.cpu[r.pool].unpinResident(r.u, c.uSlot[c.ix(r.u)])
	case undoInsert:
		c.arenaOf(r.tier, int(r.pool)).remove(r.u, true)
		if r.tier == GPU {
			c.uPins[c.ix(r.u)] = 0
		}
	case undoSlot:
		a := c.arenaOf(r.tier, int(r.pool))
		if r.u == noUnit {
			a.push(r.slot)
			return
		}
		// Give the slot back to the victim, which still has its bytes
		// there: the Mover wrote nothing (see Mover).
		a.owner[r.slot] = r.u
		if err := a.insert(r.u, c.entryOf(r.u), false); err != nil {
			// The policy will not track the victim again: it loses
			// its bytes as if evicted and dropped, so that its slot
			// is free rather than held by an untracked unit.
			c.poison(a, "Insert of unit %d: %w", r.u, err)
			a.push(r.slot)
			a.evictions++
			a.drops++
			c.dropUnit(r.u)
			c.emitTier(r.u, r.tier, Dropped)
		}
	}
}

// clearTxDrops resets the txDrops of the victims' blocks.
func (c *Cache) clearTxDrops() {
	for _, v := range c.tx.gpuVictims {
		c.blocks[c.blockOf(v.u)].txDrops = 0
	}
	for _, v := range c.tx.cpuVictims {
		c.blocks[c.blockOf(v.u)].txDrops = 0
	}
}

// rollback undoes the running transaction.
func (c *Cache) rollback() {
	t := &c.tx
	// A transactional policy undoes its own calls (exactly: order,
	// history, timers); replaying the log then only restores the cache's
	// accounting. Others are compensated call by call (victims inserted
	// again, pins undone by Unpin), which may reorder them.
	for p := range c.pools {
		for _, a := range [2]*arena{c.gpu[p], c.cpu[p]} {
			a.replaying = t.recording && a.txPolicy != nil && a.broken == nil
		}
	}
	t.recording = false
	for i := len(t.undo) - 1; i >= 0; i-- {
		c.undoOne(t.undo[i])
	}
	for p := range c.pools {
		for _, a := range [2]*arena{c.gpu[p], c.cpu[p]} {
			if a.replaying {
				a.replaying = false
				a.policyRollback()
			}
		}
	}
	c.clearTxDrops()
	t.reset()
	c.collectPending()
}

// dropUnit marks u as having no bytes; its slot was already released.
func (c *Cache) dropUnit(u UnitID) {
	c.uTier[c.ix(u)] = Dropped
	c.uSlot[c.ix(u)] = -1
	b := c.blockOf(u)
	c.blocks[b].held--
	if c.blocks[b].held == 0 {
		c.gcQueue = append(c.gcQueue, b)
	}
}

// commit applies a successful transaction.
func (c *Cache) commit() {
	t := &c.tx
	c.commitPolicies()
	c.clearTxDrops()
	for i := range t.gpuVictims {
		v := &t.gpuVictims[i]
		a := c.gpu[v.pool]
		a.evictions++
		if v.to >= 0 {
			c.cpu[v.pool].unpin(v.u)
			c.uTier[c.ix(v.u)] = CPU
			c.uSlot[c.ix(v.u)] = v.to
			c.st.offloads++
			c.st.bytesMoved += c.pools[v.pool].unitBytes
			c.emitTier(v.u, GPU, CPU)
		} else {
			a.drops++
			c.dropUnit(v.u)
			c.emitTier(v.u, GPU, Dropped)
		}
	}
	for i := range t.cpuVictims {
		v := &t.cpuVictims[i]
		a := c.cpu[v.pool]
		a.evictions++
		a.drops++
		c.dropUnit(v.u)
		c.emitTier(v.u, CPU, Dropped)
	}
	for i := range t.needs {
		n := &t.needs[i]
		if n.act == actHit {
			continue
		}
		p := c.poolOfUnit(n.u)
		switch n.act {
		case actOnboard:
			cs := c.uSlot[c.ix(n.u)]
			c.cpu[p].remove(n.u, true)
			c.cpu[p].push(cs)
			c.st.onboards++
			c.st.bytesMoved += c.pools[p].unitBytes
			c.emitTier(n.u, CPU, GPU)
		case actRecompute:
			// Its CPU bytes are given up (no copy, no onboard) and the
			// server recomputes it into the new GPU slot: for a router,
			// the unit was dropped and then restored.
			cs := c.uSlot[c.ix(n.u)]
			c.cpu[p].remove(n.u, true)
			c.cpu[p].push(cs)
			c.emitTier(n.u, CPU, Dropped)
			c.emitTier(n.u, Dropped, GPU)
		case actCopy:
			c.gainBytes(c.blockOf(n.u))
			c.st.copies++
			c.st.bytesMoved += c.pools[p].unitBytes
		case actFresh:
			c.gainBytes(c.blockOf(n.u))
			c.emitTier(n.u, Dropped, GPU)
		}
		c.uTier[c.ix(n.u)] = GPU
		c.uSlot[c.ix(n.u)] = n.slot
	}
	for _, u := range t.tempGPU {
		c.unpinUnit(u)
	}
	for _, u := range t.tempCPU {
		c.cpu[c.poolOfUnit(u)].unpinResident(u, c.uSlot[c.ix(u)])
	}
	t.undo = t.undo[:0]
	t.tempGPU = t.tempGPU[:0]
	t.tempCPU = t.tempCPU[:0]
}
