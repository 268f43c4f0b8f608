package kvcache

// Write-through (TierConfig.WriteThrough) gives committed GPU units a
// backup on one tier below the GPU, the write-through tier, as soon as it
// has free slots. Tiers stay exclusive for everything but backups: a
// unit's location is one tier (or Dropped), and a unit on a tier above the
// write-through tier may in addition hold one slot of it
// (unitState.backup), tracked by that tier's policy under the unit's id
// like a unit of its own. A unit keeps its backup while it moves between
// the tiers above (the bytes are the same). The backup is used twice:
//
//   - when the tier right above the write-through tier evicts the unit
//     and the Decider moves it down, the move is free: the backup becomes
//     its location (no copy, no bytes moved, counted as an offload);
//   - when a unit is loaded back from the write-through tier, its copy
//     there stays as its backup.
//
// A backup is given up when the unit is dropped, freed or recomputed
// (its bytes rewritten) and when the write-through tier's policy evicts
// it (which costs nothing: a tier above has the bytes). It is written after the operation that
// committed the block, at unlock (writeThroughQueued), never evicting for
// room; a failed or panicking copy gives the backups up, counts them in
// the tier's TierStats.Failed, and fails nothing else.

// writeThrough is the write-through tier and its work.
type writeThrough struct {
	// tier is the write-through tier, 0 without one.
	tier Tier
	// queue lists the blocks committed since the last unlock, whose GPU
	// units get backups.
	queue []int32
	batch []Copy
	units []UnitID
}

// queueBackups queues the GPU units of block b, just committed, for
// backups.
func (c *Cache) queueBackups(b int32) {
	if c.wt.tier != 0 {
		c.wt.queue = append(c.wt.queue, b)
	}
}

// aboveWriteThrough reports whether a unit on tier t may have a backup: t
// is a tier above the write-through tier.
func (c *Cache) aboveWriteThrough(t Tier) bool { return t != Dropped && t < c.wt.tier }

// hasBackup reports whether st has a backup that holds its bytes.
func (c *Cache) hasBackup(st *unitState) bool {
	return st.backup != 0 && st.flags&unitBacking == 0
}

// writeQueued writes the backups of the queued blocks' GPU units into
// free slots of the write-through tier (Cache.mu held, no transaction
// open).
func (c *Cache) writeQueued() {
	w := &c.wt
	if len(w.queue) == 0 {
		return
	}
	defer func() { w.queue = w.queue[:0] }()
	if c.poisoned != nil {
		return
	}
	w.batch, w.units = w.batch[:0], w.units[:0]
	for _, b := range w.queue {
		r := c.units.blk(b)
		if !r.live || r.node == nil {
			continue
		}
		for sl := range c.geom.slices {
			u := c.units.id(b, sl)
			st := c.units.of(u)
			if st.tier != GPU || st.backup != 0 || st.busy > 0 || st.flags != 0 {
				continue
			}
			p := c.poolOf(u)
			a := c.tiers.arena(w.tier, p)
			if a.atCap(u) {
				continue // a backup takes a free slot, never past the cap
			}
			s, ok := a.pop()
			if !ok {
				continue
			}
			a.setOwner(s, u)
			st.backup = s + 1
			w.units = append(w.units, u)
			w.batch = append(w.batch, Copy{Pool: p, From: GPU, FromSlot: st.slot, To: w.tier, ToSlot: s})
		}
	}
	if len(w.units) == 0 {
		return
	}
	if c.engine != nil {
		c.startBackups()
		c.poll() // an engine that completed it at once (MoverEngine)
		return
	}
	if c.mover != nil {
		returned := false
		defer func() {
			if !returned {
				// The Mover ended the goroutine (runtime.Goexit): its
				// writes are unknown, the backups are given up, and
				// what unlock would have done after this is done here
				// (but the user code it calls: pruning's policy calls).
				for _, u := range w.units {
					c.freeBackup(u, false)
				}
				w.queue = w.queue[:0]
				c.collectPending()
				c.fillStats(&c.snap)
			}
		}()
		err := c.moveBackups()
		returned = true
		if err != nil {
			for _, u := range w.units {
				c.tiers.arena(w.tier, c.poolOf(u)).failed++
				c.freeBackup(u, false)
			}
			return
		}
	}
	for _, u := range w.units {
		a := c.tiers.arena(w.tier, c.poolOf(u))
		c.place(a, u, false)
		a.backups++
		a.backupsWritten++
	}
	c.statsUnchanged = false
}

// moveBackups runs the backups' batch through the Mover, recovering a
// panic as a failure: the batch writes only the backups' slots. (A Mover
// that ends the goroutine is handled by writeQueued.)
func (c *Cache) moveBackups() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = newPanicError("Mover.Copy", r)
		}
	}()
	return c.mover.Copy(c.wt.batch)
}

// startBackups hands the backups' batch to the engine as one transfer
// that holds its units (their GPU slots are not reused meanwhile).
func (c *Cache) startBackups() {
	w := &c.wt
	tr := c.xfer.add(-1)
	tr.copies = append(tr.copies, w.batch...)
	for i, u := range w.units {
		st := c.units.of(u)
		if st.pins == 0 && !gpuHeld(st) {
			c.tiers.arena(GPU, c.poolOf(u)).pin(u)
		}
		c.hold(u)
		st.flags |= unitBacking
		a := c.tiers.arena(w.tier, c.poolOf(u))
		c.place(a, u, true)
		a.backups++
		tr.moves = append(tr.moves, move{kind: moveBackup, u: u, slot: w.batch[i].ToSlot, copy: int32(i)})
	}
	c.statsUnchanged = false
	c.start(tr)
}

// finishBackup applies the end of the backup of unit m.u.
func (c *Cache) finishBackup(m move, err error) {
	st := c.units.of(m.u)
	a := c.tiers.arena(c.wt.tier, c.poolOf(m.u))
	if err != nil || !c.aboveWriteThrough(st.tier) || st.flags&(unitUnwritten|unitBackupVoid) != 0 {
		if err != nil {
			a.failed++
		}
		c.freeBackup(m.u, true) // pinned while being written
		st.flags &^= unitBacking | unitBackupVoid
	} else {
		st.flags &^= unitBacking
		a.unpin(m.u)
		a.backupsWritten++
	}
	c.unhold(m.u)
}

// freeBackup gives up u's backup, if any; tracked says whether the
// tier's policy tracks it (pinned while being written).
func (c *Cache) freeBackup(u UnitID, tracked bool) {
	st := c.units.of(u)
	if st.backup == 0 {
		return
	}
	a := c.tiers.arena(c.wt.tier, c.poolOf(u))
	s := st.backup - 1
	if tracked {
		a.remove(u, st.flags&unitBacking != 0)
		a.backups--
	}
	a.push(s)
	st.backup = 0
}

// voidBackup gives up the backup of u, whose bytes are about to change
// (one being written is given up when its transfer ends, finishBackup).
func (c *Cache) voidBackup(u UnitID) {
	if st := c.units.of(u); st.flags&unitBacking != 0 {
		st.flags |= unitBackupVoid
	} else {
		c.dropBackup(u)
	}
}

// dropBackup gives up the backup of u, which leaves the GPU other than by
// a move down (one being written is given up when its transfer ends).
func (c *Cache) dropBackup(u UnitID) {
	if st := c.units.of(u); st.backup != 0 && st.flags&unitBacking == 0 {
		c.freeBackup(u, true)
	}
}
