package kvcache

// A tree node (and its block record) is forgotten when none of its units
// holds bytes, no sequence references it and it has no children: then a
// later request can learn nothing from it. Removing a leaf can make its
// parent such a node, so collection walks up the chain.

// collectPending collects the blocks queued by dropUnit.
func (c *Cache) collectPending() {
	for len(c.gcQueue) > 0 {
		b := c.gcQueue[len(c.gcQueue)-1]
		c.gcQueue = c.gcQueue[:len(c.gcQueue)-1]
		c.collect(b)
	}
}

// collect forgets block b if nothing needs it, then its ancestors.
func (c *Cache) collect(b int32) {
	for {
		r := c.units.blk(b)
		if !r.live || r.refs > 0 || r.held > 0 || r.pending > 0 {
			// In use, or a transfer or a unit without bytes holds one
			// of its slots (unpend comes back to it).
			return
		}
		if r.node == nil {
			c.forgetRecord(b)
			return
		}
		if !r.node.IsLeaf() {
			c.meta.markHollow(&c.units, b)
			return
		}
		c.meta.unmarkHollow(&c.units, b)
		parent := r.node.Parent()
		c.emitBlock(BlockRemoved, b, GPU)
		if err := c.tree.Remove(r.node); err != nil {
			// Unreachable: the node is a live leaf of this tree.
			return
		}
		c.st.removed++
		c.forgetRecord(b)
		if parent == nil {
			return
		}
		b = parent.Value
	}
}

// forgetRecord releases block record b, whose units hold no bytes and
// which nothing references, after telling the policies that keep history
// of keys they no longer track (eviction.Forgetter: S3-FIFO's ghost) that
// its units are gone for good: a UnitID is never given to another block,
// so a ghost of one only takes the room of live units' ghosts, and, under
// the TaggedIndex, would send every lookup of the record's next block to
// the index's overflow map.
func (c *Cache) forgetRecord(b int32) {
	if c.tiers.forgets {
		base := c.units.base(b)
		for sl := range c.geom.slices {
			p := int(c.geom.slicePool[sl])
			for t := GPU; t <= c.tiers.last(); t++ {
				if a := c.tiers.arena(t, p); a.forgetter != nil {
					a.forget(base | UnitID(sl))
				}
			}
		}
	}
	c.units.release(b)
}

// discardPrivate frees a private block that no sequence holds any more: its
// units leave their tiers (nothing uncommitted is reusable). sparse says
// whether its last holder was sparse (the reference it held on a recompute
// copy's twin was counted so). Units that a transfer still holds are freed
// when it ends, and the block with them (see unpend).
func (c *Cache) discardPrivate(b int32, sparse bool) {
	for sl := range c.geom.slices {
		if u := c.units.id(b, sl); c.units.of(u).busy == 0 {
			c.freeUnit(u)
		}
	}
	c.unindexWriting(b)
	r := c.units.blk(b)
	twin := r.twin
	r.twin = -1
	if r.pending > 0 {
		// A transfer still holds some of its units: the record goes
		// when the last is done (unpend).
		r.orphan = true
	} else {
		c.forgetRecord(b)
	}
	if twin >= 0 {
		c.unref(twin, sparse)
	}
}

// freeUnit releases u's slot, if any, and marks it dropped without an
// event: the unit was never reusable or is being forgotten. No transfer
// may hold it.
func (c *Cache) freeUnit(u UnitID) {
	st := c.units.of(u)
	t := st.tier
	if t == Dropped {
		return
	}
	c.dropBackup(u)
	a := c.tiers.arena(t, c.poolOf(u))
	a.remove(u, t == GPU && (st.pins > 0 || gpuHeld(st)) || t != GPU && st.flags&unitClaimed != 0)
	st.flags &^= unitClaimed
	a.push(st.slot)
	c.units.place(u, Dropped, -1)
	st.pins = 0
	if st.flags&unitUnwritten != 0 {
		// Counted out of its block already.
		c.clearUnwritten(u)
		return
	}
	c.loseBytes(c.units.block(u))
}

// dropResident drops u, an evictable unit holding a slot: its bytes are
// not to be trusted (a restore nobody declared written, a slot a panicking
// Mover may have written). A GPU unit a transfer still holds becomes
// unwritten instead, and is dropped when the transfer ends.
func (c *Cache) dropResident(u UnitID) {
	st := c.units.of(u)
	t := st.tier
	c.loseBytes(c.units.block(u))
	c.emitMove(u, t, Dropped)
	c.dropBackup(u)
	if t == GPU && st.busy > 0 {
		c.setUnwritten(u)
		return
	}
	a := c.tiers.arena(t, c.poolOf(u))
	a.remove(u, t != GPU && st.flags&unitClaimed != 0)
	st.flags &^= unitClaimed
	a.push(st.slot)
	c.dropUnit(u)
}
