package kvcache

import (
	"errors"
	"fmt"
)

// submit turns the committed transaction's chains into transfers, one per
// KV layer (and dependency; cut into pieces of at most s.maxLoadTokens
// tokens of loads, one after the other, when it is positive), starts them
// in layer order, and registers s (nil: none) as waiting on them and on
// the transfers that bring the units it hit. It returns how many of the
// operation's needs are still in flight.
func (c *Cache) submit(s *sequence) int {
	b := &c.xfer.build
	b.reset(c.geom.kvLayers, c.geom.blockTokens, s)
	c.xfer.addChains(b, &c.tx, &c.units)
	c.startBuilt(b)
	return b.loading
}

// startBuilt ends the building of b's transfers and hands those that wait
// for no other to the engine, in the order they were made (layer order);
// one whose source failed meanwhile fails unstarted.
func (c *Cache) startBuilt(b *xferBuild) {
	for _, id := range b.made {
		tr, ok := c.xfer.byID[id]
		if !ok {
			continue
		}
		tr.building = false
		switch {
		case tr.started || tr.deps > 0:
		case tr.depErr != nil:
			// What it reads failed while it was being built.
			tr.started = true
			c.xfer.finished(tr, tr.depErr)
		default:
			c.start(tr)
		}
	}
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
		x.collect()
		tr := x.oldest()
		if tr == nil {
			break
		}
		c.statsUnchanged = false
		budget -= c.applyMoves(tr, budget)
		if int(tr.applied) < len(tr.moves) {
			break
		}
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

// applyFinished applies what the engine reported finished since the
// last call (up to a step's worth, see poll) before an operation that
// places units looks at the cache (Cache.mu held, no transaction open):
// the slots those transfers held are then free or evictable for it, so
// that it does not fail with ErrNoSpace for want of slots that only the
// cache's books still hold, and its hits on units they loaded are
// readable at once. It reports whether it applied anything.
func (c *Cache) applyFinished() bool {
	if c.xfer.byID == nil || !c.xfer.hasWork() {
		return false
	}
	c.poll()
	return true
}

// applyStep applies, in a call of its own, a step's worth of the moves of
// the transfers the engine has finished, and reports whether there were
// any (Acquire retries after it).
func (c *Cache) applyStep() bool {
	if c.engine == nil {
		return false
	}
	if err := c.lock("Acquire"); err != nil {
		return false
	}
	var err error
	defer c.unlock(&err)
	return c.applyFinished()
}

// applyFinishedLocked is applyFinished for a call that has not deferred
// its unlock yet: user code that ends the goroutine (runtime.Goexit) in
// the transfers' finish (a policy's Unpin, an engine's Start) leaves the
// lock released, as every call does.
func (c *Cache) applyFinishedLocked() bool {
	returned := false
	defer func() {
		if !returned {
			c.mu.Unlock()
		}
	}()
	applied := c.applyFinished()
	returned = true
	return applied
}

// applyBudget is the most moves one call applies (see poll).
func (c *Cache) applyBudget() int { return c.placeBudget().max }

// applyMoves applies up to budget moves of finished transfer tr from the
// first not applied yet: the success of each, or the compensation of its
// failure (see the top of this file). It returns how many it applied.
func (c *Cache) applyMoves(tr *transfer, budget int) int {
	end := min(len(tr.moves), int(tr.applied)+budget)
	for _, m := range tr.moves[tr.applied:end] {
		err := tr.errOf(m)
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
// what it failed to write (see transfers.end), and the sequences that
// waited on it learn its failures.
func (c *Cache) endFinish(tr *transfer) {
	for _, d := range c.xfer.end(tr) {
		c.start(d)
	}
	c.settleWaiters(tr)
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
			full, before := s.declaredUpTo/B, s.firstPrivate
			c.commitBlocks(s, min(full, s.firstPrivate+c.commitBudget())*B)
			if _, waits := x.declared[s]; !waits && s.firstPrivate < full {
				x.declared[s] = struct{}{}
				x.behind = true
			}
			if _, still := x.declared[s]; s.firstPrivate > before || !still {
				// Waiters see the commit go on, or end (Readiness
				// counts it pending until then).
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
