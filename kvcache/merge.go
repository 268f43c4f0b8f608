package kvcache

import "github.com/kvtier/kvtier/radix"

// mergeBlock makes sequence s use the cached node n for its block i, whose
// tokens (and keys) equal n's: s filled a private block while another
// sequence committed the same block first. Unit by unit, the copy that is
// on the GPU wins: if n's unit is on the GPU, s's slot is freed and s pins
// n's unit; otherwise s's slot becomes n's unit (a CPU copy of n's unit is
// freed, a dropped one is restored). The KV of equal prefixes is equal, so
// either copy serves. s's private block is then forgotten.
//
// Handing s's slot to n's unit swaps keys in the GPU policy. A policy that
// refuses the new key poisons the cache (ErrPolicy); n's unit takes the
// slot all the same, so that slots and pins stay exact.
func (c *Cache) mergeBlock(s *sequence, i int, n *radix.Node[int32]) {
	b, e := s.blocks[i], n.Value
	for sl := range c.numSlices {
		u, x := c.unit(b, sl), c.unit(e, sl)
		if c.uTier[c.ix(u)] != GPU {
			// s does not pin this unit (outside its window): n's unit
			// stays as it is.
			continue
		}
		p := c.poolOfUnit(u)
		ga := c.gpu[p]
		pins, slot := c.uPins[c.ix(u)], c.uSlot[c.ix(u)]
		ga.remove(u, pins > 0)
		c.uTier[c.ix(u)], c.uSlot[c.ix(u)], c.uPins[c.ix(u)] = Dropped, -1, 0
		c.blocks[b].held--
		if c.uTier[c.ix(x)] == GPU {
			ga.push(slot)
			for range pins {
				c.pinUnit(x)
			}
			continue
		}
		// Insert before releasing x's CPU slot, so that a refusal leaves
		// x as it was.
		ga.owner[slot] = x
		if err := ga.insert(x, c.entryOf(x), pins > 0); err != nil {
			// x takes the slot all the same, so that slots and pins
			// stay exact; only the policy does not know it.
			c.poison(ga, "Insert of unit %d: %w", x, err)
			ga.track(pins > 0)
		}
		switch c.uTier[c.ix(x)] {
		case CPU:
			// s computed the unit again: its CPU copy is given up, and
			// for a router the unit was dropped and then restored.
			ca := c.cpu[p]
			ca.remove(x, false)
			ca.push(c.uSlot[c.ix(x)])
			c.emitTier(x, CPU, Dropped)
			c.emitTier(x, Dropped, GPU)
		case Dropped:
			c.gainBytes(e)
			c.emitTier(x, Dropped, GPU)
		}
		c.uTier[c.ix(x)], c.uSlot[c.ix(x)], c.uPins[c.ix(x)] = GPU, slot, pins
	}
	for j, u := range s.stepPins {
		if c.blockOf(u) == b {
			s.stepPins[j] = c.unit(e, c.sliceOf(u))
		}
	}
	if c.blocks[b].twin != e {
		// A recompute copy's sequence holds its twin already.
		c.addRef(e, s.sparse)
	}
	c.freeBlock(b)
	s.blocks[i] = e
}
