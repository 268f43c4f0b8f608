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
		r := &c.blocks[b]
		if !r.live || r.refs > 0 || r.held > 0 {
			return
		}
		if r.node == nil {
			c.freeBlock(b)
			return
		}
		if !r.node.IsLeaf() {
			c.markHollow(b)
			return
		}
		c.unmarkHollow(b)
		parent := r.node.Parent()
		c.emitBlock(BlockRemoved, b)
		if err := c.tree.Remove(r.node); err != nil {
			// Unreachable: the node is a live leaf of this tree.
			return
		}
		c.st.removed++
		c.freeBlock(b)
		if parent == nil {
			return
		}
		b = parent.Value
	}
}

// discardPrivate frees a private block that no sequence holds any more: its
// units leave their tiers (nothing uncommitted is reusable). sparse says
// whether its last holder was sparse (the reference it held on a recompute
// copy's twin was counted so).
func (c *Cache) discardPrivate(b int32, sparse bool) {
	for sl := range c.numSlices {
		u := c.unit(b, sl)
		c.freeUnit(u)
	}
	c.unindexWriting(b)
	twin := c.blocks[b].twin
	c.freeBlock(b)
	if twin >= 0 {
		c.unref(twin, sparse)
	}
}

// freeUnit releases u's slot, if any, and marks it dropped without a drop
// event: the unit was never reusable or is being forgotten.
func (c *Cache) freeUnit(u UnitID) {
	t := c.uTier[c.ix(u)]
	if t == Dropped {
		return
	}
	a := c.arenaOf(t, c.poolOfUnit(u))
	a.remove(u, t == GPU && c.uPins[c.ix(u)] > 0)
	a.push(c.uSlot[c.ix(u)])
	c.uTier[c.ix(u)] = Dropped
	c.uSlot[c.ix(u)] = -1
	c.uPins[c.ix(u)] = 0
	c.blocks[c.blockOf(u)].held--
}

// unref removes one reference to block b from a sequence (sparse or not)
// and collects the block when it was the last and the block is private or
// holds nothing.
func (c *Cache) unref(b int32, sparse bool) {
	r := &c.blocks[b]
	r.refs--
	if sparse {
		r.sparseRefs--
	}
	if r.refs > 0 {
		return
	}
	if r.node == nil {
		c.discardPrivate(b, sparse)
		return
	}
	if r.held == 0 {
		c.collect(b)
	}
}

// dropResident drops u, an evictable unit holding a slot: its bytes are
// not to be trusted (a restore nobody declared written).
func (c *Cache) dropResident(u UnitID) {
	t := c.uTier[c.ix(u)]
	a := c.arenaOf(t, c.poolOfUnit(u))
	a.remove(u, false)
	a.push(c.uSlot[c.ix(u)])
	c.dropUnit(u)
	c.emitTier(u, t, Dropped)
}
