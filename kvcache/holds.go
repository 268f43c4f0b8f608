package kvcache

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
