package kvcache

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// With a TransferEngine (Config.Engine) an operation's copies leave the
// cache's lock. The transaction plans them exactly as with a synchronous
// Mover (the same victims, slots and batch, counted in Stats and reported
// by events as planned), commits at once, and hands the batch to the
// engine as transfers that complete later (Poll applies them). Meanwhile
// the units in flight are held (unitState.busy) and marked:
//
//   - a unit arriving on the GPU (onboarded, copied on write, or fresh in a
//     slot whose old content is still moving down) has its slot but is not
//     readable (unitState.loadBy); the hold keeps it pinned in its policy, so it
//     is not evicted, and a sequence that hits it waits for the same
//     transfer;
//   - a victim moving down (unitState.storeBy) is in its new slot, pinned in that
//     tier's policy until its bytes are there; a request that needs it
//     meanwhile loads it back by a transfer that starts when the move is
//     done (a data dependency);
//   - a load's source stays in its slot below, pinned, until the load is
//     done, and a copy's source stays pinned.
//
// So no slot a transfer reads or writes is handed out before it finishes:
// a victim's slot goes to the unit that replaces it only within the same
// transfer, whose copies run in order (the victim's move first), and that
// unit is not readable before the transfer ends. Transfers are otherwise
// independent, and an engine may run them in any order, in parallel.
//
// A transfer is one KV layer's share of an operation: for each unit the
// operation needs, the chain of copies that makes its slot ready (the
// victims that leave it, deepest first, then the copy into it), grouped by
// KV layer and started in layer order, so that layer l's attention can run
// while layer l+1 loads (Readiness). Request.MaxLoadTokens cuts a layer's
// share further and starts the pieces one after the other.
//
// A transfer that fails is compensated, never served: a unit whose load or
// copy failed keeps its GPU slot but has no bytes (unitUnwritten; its
// block no longer counts it, so no request reuses the block) and becomes a
// recompute range for every sequence that waits on it (Readiness); its
// source below is freed. A victim whose move down failed is dropped. A
// transfer that reads what a failed one was to write fails without
// starting. An engine that reports which copies failed (CopyErrors) has
// only those units compensated (and any copy that read what a failed one
// was to write, a guard: the planner keeps such reads in transfers of
// their own); the transfers that read from the transfer still fail
// whole. Each failure is reported as a move to Dropped (an event) and
// counted in TierStats.Failed; nothing else is undone, since the moves
// were counted as planned.

// transferID names a transfer of a cache among those it knows (byID); 0
// is none. Ids wrap around, skipping those still in use.
type transferID uint32

// moveKind is what a move of a transfer does.
type moveKind uint8

const (
	moveLoad   moveKind = iota // u arrives on the GPU from (from, slot) below
	moveCopy                   // u is filled on the GPU from src (copy-on-write)
	moveDown                   // victim u arrives in slot of tier from+1
	moveVacate                 // no copy: u's GPU slot is its own once the moves before it are done
	moveBackup                 // u's backup is written into slot of the write-through tier
)

// move is what one step of a transfer does to a unit.
type move struct {
	kind moveKind
	from Tier
	u    UnitID
	src  UnitID // moveCopy: the unit copied
	slot int32  // moveLoad: the slot left below; moveDown: the slot arrived in
	// copy is the index of its copy in the transfer's copies (-1 for
	// moveVacate, which has none); while the transaction runs, in its
	// batch.
	copy int32
}

// transfer is one unit of work handed to the engine.
type transfer struct {
	id      transferID
	kvLayer int32 // the KV layer of its units, -1 when they span every layer
	copies  []Copy
	moves   []move
	// deps counts the unfinished transfers it starts after; depErr is the
	// error of one it reads from that failed: it then fails unstarted.
	deps    int32
	depErr  error
	started bool
	done    bool
	// failed lists the units whose bytes did not arrive.
	failed []UnitID
	// applying says that the engine finished the transfer and poll is
	// applying its moves (applied of them so far), with err, or errs per
	// copy, as the engine reported them (see beginFinish).
	applying bool
	applied  int32
	err      error
	errs     []error
	// waiters lists the sequences that wait on the transfer (it is in
	// their waits until it finishes; then its failures move to their
	// failed lists and it is forgotten).
	waiters []*sequence
}

// dependent is a transfer that starts after another: data says that it
// reads what the other writes (so it fails when the other fails), as
// opposed to being merely ordered after it (MaxLoadTokens).
type dependent struct {
	id   transferID
	data bool
}

// transfers is the cache's table of transfers: those in flight and those
// finished but not yet seen by every sequence that waits on them.
type transfers struct {
	next transferID
	byID map[transferID]*transfer
	// dependents lists the transfers that start after each one.
	dependents map[transferID][]dependent
	// declared holds the sequences whose declared writes wait for a
	// transfer (see commitThrough).
	declared map[*sequence]struct{}
	inbox    inbox
	scratch  []finished
	// sorted and layerStart are sortChains' buffers.
	sorted     []chain
	layerStart []int
	// left holds the slots units left while a transfer still held them
	// (leaveSlot); broken says that the engine's Start panicked.
	left     map[UnitID][]leftSlot
	broken   bool
	inFlight int
	// drops lists units without bytes to drop once the running operation
	// is over (dropLater).
	drops []UnitID
	// build is the transfers an operation of one transaction makes
	// (submit).
	build xferBuild
	// applying lists the transfers the engine finished whose moves poll
	// is applying, oldest first; behind says that the last unlock left
	// declared commits it could have made (a step's worth per call).
	applying []*transfer
	behind   bool
}

func (x *transfers) init() {
	x.byID = make(map[transferID]*transfer)
	x.dependents = make(map[transferID][]dependent)
	x.declared = make(map[*sequence]struct{})
	x.left = make(map[UnitID][]leftSlot)
	x.inbox.init()
}

// chain is the copies and moves that make one need's slot ready, in the
// running transaction's batch and moves.
type chain struct {
	copyStart, copyEnd int32
	moveStart, moveEnd int32
	kvLayer            int32
	// block is the need's block record; load says whether the chain
	// brings bytes to it (a load or a copy, not a fresh unit).
	block int32
	load  bool
	// after is the transfer that writes what the chain reads (0: none).
	after transferID
}

// recordMove notes a move of the running transaction (with an engine).
// Its copy, if it has one, is the next one appended to the batch.
func (c *Cache) recordMove(m move) {
	if c.engine != nil {
		m.copy = int32(len(c.tx.batch))
		if m.kind == moveVacate {
			m.copy = -1
		}
		c.tx.moves = append(c.tx.moves, m)
	}
}

// addChain records the chain that makes need n's slot ready: the copies
// and moves from copyStart and moveStart on, in n's KV layer, after the
// transfer that writes its source when that is still in flight.
func (c *Cache) addChain(n *need, copyStart, moveStart int) {
	t := &c.tx
	ch := chain{copyStart: int32(copyStart), copyEnd: int32(len(t.batch)), moveStart: int32(moveStart), moveEnd: int32(len(t.moves)),
		kvLayer: c.geom.sliceLayer[c.units.slice(n.u)], block: c.units.block(n.u)}
	switch n.act {
	case actOnboard:
		ch.load = true
		ch.after = c.units.of(n.u).storeBy
	case actCopy:
		ch.load = true
		switch st := c.units.of(n.src); {
		case st.storeBy != 0:
			ch.after = st.storeBy
		case st.loadBy != 0:
			ch.after = st.loadBy
		}
	}
	t.chains = append(t.chains, ch)
}

// xferBuild turns the chains of an operation's transactions into
// transfers: one per KV layer (and dependency), cut into pieces of at most
// the owner's MaxLoadTokens of loads, each started after the one before.
// An operation of one transaction builds and starts them at once (submit);
// an operation planned in slices (see slices.go) keeps each layer's
// transfer open across its transactions, so that a long prompt still makes
// one transfer per layer, and starts them when it is planned (startBuilt).
// An open transfer is a transfer in flight like any other (its units are
// marked, other operations wait on it or depend on it); it is only not
// handed to the engine yet.
type xferBuild struct {
	owner     *sequence
	capBlocks int
	// open is, per KV layer (index kvLayer+1), the transfer that takes
	// the layer's chains that depend on no other transfer, with the
	// loads (blocks) it carries and its last loaded block.
	open []openXfer
	// prev is the last transfer made: MaxLoadTokens chains each new one
	// after it.
	prev *transfer
	// made lists the transfers made, started by startBuilt.
	made []transferID
	// loading counts the owner's needs in flight (Plan.Loading).
	loading int
	// hint is, per KV layer (index kvLayer+1), how many copies a long
	// operation expects its transfer of the layer to take: the transfer
	// is sized for them when made, so that it does not grow by copying
	// what it holds (nil: no hint).
	hint []int
}

// openXfer is the open transfer of one KV layer in an xferBuild.
type openXfer struct {
	tr        *transfer
	loads     int
	lastBlock int32
}

// reset empties b for an operation owned by s (nil: none), keeping its
// buffers.
func (b *xferBuild) reset(c *Cache, s *sequence) {
	clear(b.open)
	b.open = b.open[:0]
	for range c.geom.kvLayers + 1 {
		b.open = append(b.open, openXfer{lastBlock: -1})
	}
	b.owner, b.prev, b.loading, b.hint = s, nil, 0, nil
	b.capBlocks = 0
	if s != nil && s.maxLoadTokens > 0 {
		b.capBlocks = max(1, s.maxLoadTokens/c.geom.blockTokens)
	}
	b.made = b.made[:0]
}

// submit turns the committed transaction's chains into transfers, one per
// KV layer (and dependency; cut into pieces of at most s.maxLoadTokens
// tokens of loads, one after the other, when it is positive), starts them
// in layer order, and registers s (nil: none) as waiting on them and on
// the transfers that bring the units it hit. It returns how many of the
// operation's needs are still in flight.
func (c *Cache) submit(s *sequence) int {
	b := &c.xfer.build
	b.reset(c, s)
	c.addChains(b)
	c.startBuilt(b)
	return b.loading
}

// newBuildTransfer makes a transfer of KV layer kvLayer for b, after the
// one before it under MaxLoadTokens, with b's owner waiting on it.
func (c *Cache) newBuildTransfer(b *xferBuild, kvLayer int32) *transfer {
	tr := c.newTransfer(kvLayer)
	if b.hint != nil && b.capBlocks == 0 {
		if n := b.hint[kvLayer+1]; n > 0 {
			tr.copies = make([]Copy, 0, n)
			tr.moves = make([]move, 0, n)
		}
	}
	if b.capBlocks > 0 && b.prev != nil {
		c.xfer.addDep(tr, b.prev.id, false)
	}
	b.prev = tr
	b.made = append(b.made, tr.id)
	if b.owner != nil {
		c.xfer.wait(b.owner, tr.id)
	}
	return tr
}

// addChains adds the committed transaction's chains to b's transfers (see
// xferBuild), marks their units in flight, and registers b's owner as
// waiting on the transfers that bring the units it hit.
func (c *Cache) addChains(b *xferBuild) {
	t := &c.tx
	x := &c.xfer
	c.sortChains()
	// after is the transfer of the current run of chains that read what
	// another transfer writes, with its loads and last loaded block.
	var after *transfer
	var afterID transferID
	afterLoads, afterLast := 0, int32(-1)
	for _, ch := range x.sorted {
		var cur *transfer
		if ch.after == 0 {
			o := &b.open[ch.kvLayer+1]
			if o.tr == nil || (b.capBlocks > 0 && ch.load && ch.block != o.lastBlock && o.loads == b.capBlocks) {
				o.tr, o.loads, o.lastBlock = c.newBuildTransfer(b, ch.kvLayer), 0, -1
			}
			if ch.load && ch.block != o.lastBlock {
				o.loads++
				o.lastBlock = ch.block
			}
			cur = o.tr
		} else {
			if after == nil || after.kvLayer != ch.kvLayer || afterID != ch.after ||
				(b.capBlocks > 0 && ch.load && ch.block != afterLast && afterLoads == b.capBlocks) {
				after, afterID, afterLoads, afterLast = c.newBuildTransfer(b, ch.kvLayer), ch.after, 0, -1
				c.xfer.addDep(after, ch.after, true)
			}
			if ch.load && ch.block != afterLast {
				afterLoads++
				afterLast = ch.block
			}
			cur = after
		}
		base := int32(len(cur.copies)) - ch.copyStart
		cur.copies = append(cur.copies, t.batch[ch.copyStart:ch.copyEnd]...)
		for _, m := range t.moves[ch.moveStart:ch.moveEnd] {
			if m.copy >= 0 {
				m.copy += base
			}
			cur.moves = append(cur.moves, m)
			switch m.kind {
			case moveDown:
				c.units.of(m.u).storeBy = cur.id
			default:
				c.units.of(m.u).loadBy = cur.id
				b.loading++
			}
		}
	}
	// A copy-on-write whose source this operation loads reads what that
	// load writes: it waits for it, and fails with it. (Its chain's
	// after could not name the load: loadBy is set above.) Only the
	// operations of one transaction copy on write, so their transfers are
	// the transaction's own.
	for _, id := range t.submitted {
		tr := x.byID[id]
		for _, m := range tr.moves {
			if m.kind != moveCopy {
				continue
			}
			if src := c.units.of(m.src).loadBy; src != 0 && src < tr.id {
				c.xfer.addDep(tr, src, true)
			}
		}
	}
	// Hits on units that other transfers bring: the owner waits for
	// those too.
	if s := b.owner; s != nil {
		for i := range t.needs {
			n := &t.needs[i]
			if !n.act.pinsInPlace() {
				continue
			}
			if id := c.units.of(n.u).loadBy; id != 0 {
				c.xfer.wait(s, id)
				b.loading++
			}
		}
	}
}

// startBuilt hands b's transfers that wait for no other to the engine, in
// the order they were made (layer order).
func (c *Cache) startBuilt(b *xferBuild) {
	for _, id := range b.made {
		if tr, ok := c.xfer.byID[id]; ok && !tr.started && tr.deps == 0 {
			c.start(tr)
		}
	}
}

// sortChains orders the transaction's chains into x.sorted by KV layer,
// keeping their order within a layer (a stable counting sort: a request's
// chains number its units, so a comparison sort would dominate submit),
// and within a layer those that read another transfer's data after the
// others, grouped by that transfer (rare: a stable sort of the few).
func (c *Cache) sortChains() {
	t, x := &c.tx, &c.xfer
	n := 0
	for i := range t.chains {
		n = max(n, int(t.chains[i].kvLayer)+2) // -1 (every layer) first
	}
	start := slices.Grow(x.layerStart[:0], n+1)[:n+1]
	clear(start)
	after := false
	for i := range t.chains {
		start[t.chains[i].kvLayer+2]++
		after = after || t.chains[i].after != 0
	}
	for k := 1; k <= n; k++ {
		start[k] += start[k-1]
	}
	x.sorted = slices.Grow(x.sorted[:0], len(t.chains))[:len(t.chains)]
	for _, ch := range t.chains {
		k := ch.kvLayer + 1
		x.sorted[start[k]] = ch
		start[k]++
	}
	x.layerStart = start
	if !after {
		return
	}
	for lo := 0; lo < len(x.sorted); {
		hi := lo
		for hi < len(x.sorted) && x.sorted[hi].kvLayer == x.sorted[lo].kvLayer {
			hi++
		}
		slices.SortStableFunc(x.sorted[lo:hi], func(a, b chain) int { return cmp.Compare(a.after, b.after) })
		lo = hi
	}
}

// newTransfer adds a transfer of the running operation.
func (c *Cache) newTransfer(kvLayer int32) *transfer {
	tr := c.xfer.add(kvLayer)
	c.tx.submitted = append(c.tx.submitted, tr.id)
	return tr
}

// add registers a new transfer in flight, under an id no known transfer
// uses.
func (x *transfers) add(kvLayer int32) *transfer {
	for {
		x.next++
		if _, used := x.byID[x.next]; x.next != 0 && !used {
			break
		}
	}
	tr := &transfer{id: x.next, kvLayer: kvLayer}
	x.byID[tr.id] = tr
	x.inFlight++
	return tr
}

// addDep makes tr start after transfer on, if that is unfinished.
func (x *transfers) addDep(tr *transfer, on transferID, data bool) {
	if d, ok := x.byID[on]; !ok || d.done {
		return
	}
	tr.deps++
	x.dependents[on] = append(x.dependents[on], dependent{id: tr.id, data: data})
}

// start hands tr to the engine.
func (c *Cache) start(tr *transfer) {
	if c.xfer.broken {
		// The engine broke its contract (startTransfer): nothing more
		// is handed to it, and what it holds stays held.
		return
	}
	tr.started = true
	id, in := tr.id, &c.xfer.inbox
	c.startTransfer(tr.copies, func(err error) { in.push(id, err) })
}

// startTransfer calls the engine. A Start that panics or ends its
// goroutine may have begun copies that still run: the cache cannot free
// any slot the transfer reads or writes, so it poisons itself (every
// later change fails with an error wrapping ErrCopyFailed and the
// PanicError) and starts nothing more; the transfer stays in flight
// unless the engine reports it done.
func (c *Cache) startTransfer(copies []Copy, done func(error)) {
	returned := false
	name := "TransferEngine.Start"
	defer func() {
		if r := panicValue(recover(), returned); r != nil {
			c.xfer.broken = true
			if c.poisoned == nil {
				c.poisoned = fmt.Errorf("%w: %w", ErrCopyFailed, newPanicError(name, r))
			}
		}
	}()
	if c.keyed != nil {
		name = "KeyedEngine.StartKeyed"
		c.keyed.StartKeyed(copies, c.unitKeys(copies), done)
	} else {
		c.engine.Start(copies, done)
	}
	returned = true
}

// wait registers s as waiting on unfinished transfer id, once. A
// sequence's waits hold only unfinished transfers (a finished one takes
// itself off them, see finish), so their length, and the cost of this
// check, is bounded by what is in flight for the sequence, not by how
// many transfers it ever waited on; a transfer's waiters are few (its
// operation's sequence, a fork, sequences that hit units it loads).
func (x *transfers) wait(s *sequence, id transferID) {
	tr, ok := x.byID[id]
	if !ok || tr.done || slices.Contains(tr.waiters, s) {
		return
	}
	s.waits = append(s.waits, id)
	tr.waiters = append(tr.waiters, s)
}

// unwait drops s's waits (the sequence ends).
func (x *transfers) unwait(s *sequence) {
	for _, id := range s.waits {
		if tr, ok := x.byID[id]; ok {
			tr.waiters = removeOne(tr.waiters, s)
		}
	}
	s.waits = s.waits[:0]
	clear(s.failed)
	s.failed = s.failed[:0]
}

// settleWaiters takes finished transfer tr off the waits of the sequences
// that wait on it, handing each the units of its blocks whose bytes did
// not arrive (Readiness reports them).
func (c *Cache) settleWaiters(tr *transfer) {
	for _, s := range tr.waiters {
		s.waits = removeOne(s.waits, tr.id)
		for _, u := range tr.failed {
			if _, ok := c.indexIn(s, u); ok {
				s.failed = append(s.failed, u)
			}
		}
	}
	clear(tr.waiters)
	tr.waiters = nil
}

// removeOne removes the first element of xs equal to x, moving the last
// one into its place (the order of waits and waiters does not matter).
func removeOne[T comparable](xs []T, x T) []T {
	for i, y := range xs {
		if y == x {
			last := len(xs) - 1
			xs[i] = xs[last]
			var zero T
			xs[last] = zero
			return xs[:last]
		}
	}
	return xs
}

// poll applies the transfers the engine has finished (Cache.mu held, no
// transaction open), at most a step's worth of their moves per call (a
// layer's share of a long prompt is thousands: see slices.go), and
// returns how many transfers it finished applying. A transfer is done
// once all its moves are applied: until then it is in flight for every
// other purpose (its units are, sequences wait on it, transfers made
// meanwhile depend on it). When moves remain, the inbox signals again
// (Completed, WaitReady), so that the next call goes on.
func (c *Cache) poll() int {
	x := &c.xfer
	if x.byID == nil {
		return 0
	}
	n, budget := 0, c.applyBudget()
	for budget > 0 {
		// (Applying a transfer may start another that an engine
		// completes at once: the inbox is taken again each round.)
		if x.inbox.ready() {
			x.scratch = x.inbox.take(x.scratch[:0])
			for _, f := range x.scratch {
				if tr, ok := x.byID[f.id]; ok && tr.started && !tr.done && !tr.applying {
					c.beginFinish(tr, f.err)
				}
			}
		}
		if len(x.applying) == 0 {
			break
		}
		c.statsUnchanged = false
		tr := x.applying[0]
		budget -= c.applyMoves(tr, budget)
		if int(tr.applied) < len(tr.moves) {
			break
		}
		x.applying[0] = nil
		x.applying = x.applying[1:]
		c.endFinish(tr)
		n++
	}
	if len(x.applying) > 0 {
		x.inbox.poke()
	} else {
		x.applying = x.applying[:0:0]
	}
	return n
}

// hasWork reports whether finished transfers left work (Cache.mu held):
// moves of those poll began, reports it has not taken, or commits they let
// through.
func (x *transfers) hasWork() bool {
	return len(x.applying) > 0 || x.behind || x.byID != nil && x.inbox.ready()
}

// applyBudget is the most moves one call applies (see poll).
func (c *Cache) applyBudget() int { return c.placeBudget().max }

// beginFinish queues finished transfer tr (err: what the engine reported)
// to be applied: its error, or each copy's when the engine reported them
// (CopyErrors), is kept for its moves.
func (c *Cache) beginFinish(tr *transfer, err error) {
	tr.applying = true
	var ce CopyErrors
	switch {
	case !errors.As(err, &ce):
	case len(ce) == len(tr.copies):
		if err = ce.Err(); err != nil { // nil when every copy completed
			tr.errs = copyFailures(tr.copies, ce)
		}
	default:
		// Which copies failed is unknown: all did, and none counts as
		// missing or corrupt.
		err = fmt.Errorf("%w: the engine reported %d copy errors for %d copies: %v", ErrCopyFailed, len(ce), len(tr.copies), err)
	}
	tr.err = err
	c.xfer.applying = append(c.xfer.applying, tr)
}

// applyMoves applies up to budget moves of finished transfer tr from the
// first not applied yet: the success of each, or the compensation of its
// failure (see the top of this file). It returns how many it applied.
func (c *Cache) applyMoves(tr *transfer, budget int) int {
	end := min(len(tr.moves), int(tr.applied)+budget)
	for _, m := range tr.moves[tr.applied:end] {
		err := tr.err
		if tr.errs != nil && m.copy >= 0 {
			err = tr.errs[m.copy]
		}
		switch m.kind {
		case moveDown:
			c.units.of(m.u).storeBy = 0
			c.finishDown(m, err)
		case moveLoad:
			c.units.of(m.u).loadBy = 0
			c.finishLoad(tr, m, err)
		case moveCopy:
			c.units.of(m.u).loadBy = 0
			c.finishCopy(tr, m, err)
		case moveBackup:
			c.finishBackup(m, err)
		case moveVacate:
			// The slot is the unit's whether or not the victim that
			// left it arrived below.
			c.units.of(m.u).loadBy = 0
			c.unhold(m.u)
		}
	}
	k := end - int(tr.applied)
	tr.applied = int32(end)
	return max(k, 1)
}

// endFinish ends transfer tr, every move of which is applied: the
// transfers that waited for it start, or fail unstarted when they read
// what it failed to write (queued to be applied like it), and the
// sequences that waited on it learn its failures.
func (c *Cache) endFinish(tr *transfer) {
	x := &c.xfer
	tr.done = true
	x.inFlight--
	deps := x.dependents[tr.id]
	delete(x.dependents, tr.id)
	for _, dep := range deps {
		d, ok := x.byID[dep.id]
		if !ok || d.done || d.applying {
			continue
		}
		if dep.data && tr.err != nil && d.depErr == nil {
			// (%v: the units it moves are not the ones a store lacked,
			// so countUnreadable must not count them.)
			d.depErr = fmt.Errorf("%w: it reads what transfer %d was to write, which failed: %v", ErrCopyFailed, tr.id, tr.err)
		}
		if d.deps--; d.deps > 0 {
			continue
		}
		if d.depErr != nil {
			d.started = true
			c.beginFinish(d, d.depErr)
		} else {
			c.start(d)
		}
	}
	c.settleWaiters(tr)
	delete(x.byID, tr.id)
}

// finishDown applies the end of victim m.u's move down from tier m.from.
func (c *Cache) finishDown(m move, err error) {
	to := m.from + 1
	st := c.units.of(m.u)
	if err != nil {
		da := c.tiers.arena(to, c.poolOf(m.u))
		da.failed++
		if st.tier == to && st.slot == m.slot {
			// Its bytes did not arrive, and its old slot went to
			// another unit: it is dropped.
			da.remove(m.u, true)
			da.push(m.slot)
			st.flags &^= unitClaimed // a claim inherited the transfer's pin
			c.loseBytes(c.units.block(m.u))
			c.emitMove(m.u, to, Dropped)
			c.dropUnit(m.u)
		}
		// Otherwise it left the slot since (the slot is in
		// xfer.left): loaded back by a transfer that reads it, which
		// fails too, or recomputed.
	}
	c.unhold(m.u)
}

// leftSlot is a slot of a lower tier that a unit left while a transfer
// may still read or write it: a load's source, or the copy below of a
// unit recomputed while held (its move down may still write it, a
// copy-on-write still read it).
type leftSlot struct {
	tier   Tier
	slot   int32
	backup bool
}

// leaveSlot releases slot s of tier t, which unit u left and which is
// still tracked there, pinned, under u's id, from a transfer's finish
// (whose own hold on u is released right after): now if no other
// transfer holds u, else when the last one ends (unhold), since it may
// be a copy-on-write that reads the slot. backup keeps it as u's backup
// (see writethrough.go) if u still is a written GPU unit of the tree
// then.
func (c *Cache) leaveSlot(u UnitID, t Tier, s int32, backup bool) {
	if c.units.of(u).busy > 1 {
		c.xfer.left[u] = append(c.xfer.left[u], leftSlot{tier: t, slot: s, backup: backup})
		return
	}
	c.freeLeft(u, leftSlot{tier: t, slot: s, backup: backup})
}

// freeLeft releases l, a slot u left.
func (c *Cache) freeLeft(u UnitID, l leftSlot) {
	a := c.tiers.arena(l.tier, c.poolOf(u))
	st := c.units.of(u)
	if l.backup && c.aboveWriteThrough(st.tier) && st.backup == 0 && st.flags&unitUnwritten == 0 && c.units.rec(u).node != nil {
		// (A block a truncation detached meanwhile is rewritten.)
		a.unpin(u)
		a.backups++
		st.backup = l.slot + 1
		return
	}
	a.remove(u, true)
	a.push(l.slot)
}

// finishLoad applies the end of unit m.u's load from (m.from, m.slot).
func (c *Cache) finishLoad(tr *transfer, m move, err error) {
	// Its copy there stays as its backup on the write-through tier.
	c.leaveSlot(m.u, m.from, m.slot, err == nil && m.from == c.wt.tier)
	if err != nil {
		c.countUnreadable(m.from, m.u, err)
		c.loadFailed(tr, m.u)
	}
	c.unhold(m.u)
}

// finishCopy applies the end of unit m.u's copy-on-write from m.src.
func (c *Cache) finishCopy(tr *transfer, m move, err error) {
	if err != nil {
		c.countUnreadable(m.from, m.u, err)
		c.loadFailed(tr, m.u)
	}
	c.unhold(m.u)
	c.unhold(m.src)
}

// countUnreadable counts unit u, whose load from store tier t failed with
// err, when err says the store lacked it or held corrupt bytes.
func (c *Cache) countUnreadable(t Tier, u UnitID, err error) {
	if s, ok := c.engine.(storeTiers); !ok || !s.Stores(t) {
		// A memory tier in the same failed transfer: its load did not
		// miss (an engine may report one error for a whole transfer).
		return
	}
	a := c.tiers.arena(t, c.poolOf(u))
	switch {
	case errors.Is(err, ErrUnitMissing):
		a.missing++
	case errors.Is(err, ErrUnitCorrupt):
		a.corrupt++
	}
}

// loadFailed marks GPU unit u, whose bytes did not arrive, unwritten: its
// block no longer counts it (no other request reuses the block) and the
// sequences that wait on tr recompute it (Readiness).
func (c *Cache) loadFailed(tr *transfer, u UnitID) {
	tr.failed = append(tr.failed, u)
	c.tiers.arena(GPU, c.poolOf(u)).failed++
	if c.units.of(u).flags&unitUnwritten == 0 {
		c.setUnwritten(u)
		c.loseBytes(c.units.block(u))
		c.emitMove(u, GPU, Dropped)
	}
}

// hold counts a transfer's hold on u (markInFlight).
func (c *Cache) hold(u UnitID) {
	c.units.of(u).busy++
	c.units.rec(u).pending++
}

// unhold ends a transfer's hold on u. The last hold gone, u's policy
// unpins it unless a sequence pins it (or it has no bytes: it is then
// dropped), and its block is forgotten if it was to be meanwhile.
func (c *Cache) unhold(u UnitID) {
	st := c.units.of(u)
	st.busy--
	if st.busy == 0 {
		if left, ok := c.xfer.left[u]; ok {
			delete(c.xfer.left, u)
			for _, l := range left {
				c.freeLeft(u, l)
			}
		}
		switch {
		case st.tier == GPU && st.pins == 0 && st.flags&unitUnwritten != 0:
			c.dropUnwritten(u)
		case st.tier == GPU && st.pins == 0:
			c.tiers.arena(GPU, c.poolOf(u)).unpin(u)
		case st.tier != GPU && st.tier != Dropped && st.flags&unitClaimed == 0:
			c.tiers.arena(st.tier, c.poolOf(u)).unpin(u)
		}
	}
	c.unpend(c.units.block(u))
}

// setUnwritten marks GPU unit u as without bytes (see unitUnwritten); its
// caller counts it out of its block's held units.
func (c *Cache) setUnwritten(u UnitID) {
	c.dropBackup(u)
	c.units.of(u).flags |= unitUnwritten
	c.units.rec(u).pending++
}

// clearUnwritten ends u's unwritten state: rewritten, or dropped.
func (c *Cache) clearUnwritten(u UnitID) {
	c.units.of(u).flags &^= unitUnwritten
	c.unpend(c.units.block(u))
}

// unpend counts one pending unit of block b out, and forgets b when it
// was to be forgotten and that was the last.
func (c *Cache) unpend(b int32) {
	r := c.units.blk(b)
	r.pending--
	if r.pending > 0 {
		return
	}
	switch {
	case r.orphan:
		r.orphan = false
		c.discardPrivate(b, false) // its twin is released already
	case r.live && r.refs == 0 && r.held == 0:
		c.gcQueue = append(c.gcQueue, b)
	}
}

// dropLater queues u, a GPU unit without bytes that no pin holds, to drop
// when the running operation is over (a rollback may pin it again).
func (c *Cache) dropLater(u UnitID) { c.xfer.drops = append(c.xfer.drops, u) }

// dropQueued drops the queued units that are still without bytes, pins
// and holds.
func (c *Cache) dropQueued() {
	x := &c.xfer
	for len(x.drops) > 0 {
		u := x.drops[len(x.drops)-1]
		x.drops = x.drops[:len(x.drops)-1]
		if !c.units.current(u, c.geom.slices) {
			continue
		}
		if st := c.units.of(u); st.tier == GPU && st.flags&unitUnwritten != 0 && st.pins == 0 && st.busy == 0 {
			c.dropUnwritten(u)
		}
	}
}

// dropUnwritten frees the GPU slot of u, an unwritten unit that nothing
// holds. Its block counted it out, and its drop was reported, when it
// became unwritten.
func (c *Cache) dropUnwritten(u UnitID) {
	a := c.tiers.arena(GPU, c.poolOf(u))
	a.remove(u, true)
	a.push(c.units.slotOf(u))
	c.units.place(u, Dropped, -1)
	b := c.units.block(u)
	if c.units.blk(b).held == 0 {
		c.gcQueue = append(c.gcQueue, b)
	}
	c.clearUnwritten(u)
}

// settleTransfers is the part of unlock that belongs to transfers: it
// applies finished ones, retries the commits that waited for them, and
// drops the units without bytes that nothing holds.
func (c *Cache) settleTransfers() {
	x := &c.xfer
	if x.byID == nil {
		c.dropQueued() // units without bytes exist without an engine too (voidRestores)
		return
	}
	c.poll()
	x.behind = false
	if len(x.declared) > 0 {
		// A commit that still waits adds its sequence back.
		retry := c.scratch.declared[:0]
		for s := range x.declared {
			retry = append(retry, s)
		}
		clear(x.declared)
		B := c.geom.blockTokens
		for _, s := range retry {
			if c.seqs[s.id] != s {
				continue
			}
			// A step's worth per call (see slices.go): what is left
			// stays declared, for the next.
			full := s.declaredUpTo / B
			c.commitBlocks(s, min(full, s.firstPrivate+c.commitBudget())*B)
			if _, waits := x.declared[s]; !waits && s.firstPrivate < full {
				x.declared[s] = struct{}{}
				x.behind = true
				x.inbox.poke()
			}
		}
		clear(retry)
		c.scratch.declared = retry[:0]
	}
	c.dropQueued()
}

// Poll applies the transfers the TransferEngine has finished since the
// last call: loaded units become readable, victims that moved down become
// evictable there, the slots the transfers held are freed, and the
// sequences that waited on a failed transfer learn which tokens to
// recompute (Readiness). Every call that changes the cache, and
// Readiness, polls too; a server calls Poll when Completed signals and it
// has nothing else to call. One call applies at most a step's worth of
// moves (see Long operations in the package doc), so that a finished
// 32k-token onboard does not hold the lock for its 10⁵ units at once;
// while moves are left, Completed signals again, so a server that polls
// whenever it signals applies them all. A transfer counts as finished
// once all its moves are applied. It returns how many transfers it
// finished; without an engine it does nothing. Applying a transfer calls the tiers'
// policies: one that breaks its contract makes Poll return an error
// wrapping ErrPolicy, like any call that changes the cache.
func (c *Cache) Poll() (n int, err error) {
	if err := c.lock("Poll"); err != nil {
		return 0, err
	}
	defer c.unlock(&err)
	return c.poll(), nil
}

// Completed returns a channel that receives a value whenever a transfer
// finishes (one value stands for any number since the last receive), for
// the one goroutine that drives a server's steps: receive, then Poll or
// Readiness. Goroutines that each wait for a sequence use WaitReady,
// which sees every finish. It returns nil without a TransferEngine.
func (c *Cache) Completed() <-chan struct{} {
	if c.engine == nil {
		return nil
	}
	return c.xfer.inbox.signal
}
