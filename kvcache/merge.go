package kvcache

import "github.com/kvtier/kvtier/radix"

// mergeBlock makes sequence s use the cached node n for its block i, whose
// tokens (and keys) equal n's: s filled a private block while another
// sequence committed the same block first. Unit by unit, the copy that is
// on the GPU wins: if n's unit is on the GPU, s's slot is freed and s pins
// n's unit; otherwise s's slot becomes n's unit (a copy of n's unit on a
// lower tier is freed, a dropped one is restored). The KV of equal prefixes
// is equal, so either copy serves. s's private block is then forgotten, and
// its block tables point at n's units.
//
// Handing s's slot to n's unit swaps keys in the GPU policy. A policy that
// refuses the new key poisons the cache (ErrPolicy); n's unit takes the
// slot all the same, so that slots and pins stay exact.
func (c *Cache) mergeBlock(s *sequence, i int, n *radix.Node[int32]) {
	b, e := s.blocks[i], n.Value
	for sl := range c.geom.slices {
		u, x := c.units.id(b, sl), c.units.id(e, sl)
		if c.units.tierOf(u) != GPU {
			// s does not pin this unit (outside its window): n's unit
			// stays as it is.
			continue
		}
		p := c.geom.poolOfSlice(sl)
		ga := c.tiers.arena(GPU, p)
		pins, slot := c.units.pinsOf(u), c.units.slotOf(u)
		ga.remove(u, pins > 0)
		c.units.place(u, Dropped, -1)
		c.units.of(u).pins = 0
		c.loseBytes(b)
		if c.units.tierOf(x) == GPU {
			ga.push(slot)
			for range pins {
				c.pinUnit(x)
			}
			if pins > 0 {
				s.tables.set(sl, i, c.units.slotOf(x))
			}
			continue
		}
		// Insert before releasing x's slot below, so that a refusal
		// leaves x as it was.
		ga.setOwner(slot, x)
		if err := ga.insert(x, c.entryOf(x), pins > 0); err != nil {
			// x takes the slot all the same, so that slots and pins
			// stay exact; only the policy does not know it.
			c.poison(ga, "Insert of unit %d: %w", x, err)
			ga.track(x, pins > 0)
		}
		switch t := c.units.tierOf(x); t {
		case Dropped:
			c.gainBytes(e)
			c.emitMove(x, Dropped, GPU)
		default:
			// s computed the unit again: its copy below is given up,
			// and for a router the unit was dropped and then restored.
			a := c.tiers.arena(t, p)
			st := c.units.of(x)
			a.remove(x, st.flags&unitClaimed != 0) // (no transfer holds it: settled)
			st.flags &^= unitClaimed
			a.push(c.units.slotOf(x))
			c.emitMove(x, t, Dropped)
			c.emitMove(x, Dropped, GPU)
		}
		c.units.place(x, GPU, slot)
		c.units.of(x).pins = pins
	}
	for j, u := range s.stepPins {
		if c.units.block(u) == b {
			s.stepPins[j] = c.units.id(e, c.units.slice(u))
		}
	}
	if c.units.blk(b).twin != e {
		// A recompute copy's sequence holds its twin already.
		c.addRefNow(e, s.sparse)
	}
	c.forgetRecord(b)
	s.blocks[i] = e
}
