package kvcache

import (
	"cmp"
	"slices"
)

// Release ends sequence id: its units are unpinned and its committed
// blocks stay cached (lazy eviction) until a policy picks them; what it had
// not committed (see Commit) is discarded, never shared. A server that wants
// the tokens of a sequence's last step shared calls Commit first. Blocks are
// unpinned from the sequence's last block to its first (with the blocks its
// last SparseAccess pinned, in the same order), so a recency policy (whose
// Unpin counts as the latest use, as vLLM's free queue does) evicts a
// released chain from its tail. A unit whose descendants are still cached
// may nevertheless be evicted: it becomes dropped and stays in the tree,
// and a later match reports its tokens for recompute while later blocks
// still hit.
//
// It returns an error wrapping ErrUnknownSequence for an id that is not
// live.
func (c *Cache) Release(id SeqID) (err error) {
	if err := c.lock("Release"); err != nil {
		return err
	}
	defer c.unlock(&err)
	s, err := c.lookupToChange(id)
	if err != nil {
		return err
	}
	c.end(s)
	return nil
}

// end unpins and forgets sequence s (Release, Abort). Units its last
// SparseAccess restored that it never declared written are dropped again
// unless another sequence pins them.
func (c *Cache) end(s *sequence) {
	c.unwait(s)
	if c.xfer.declared != nil {
		// A commit that waited for a transfer is given up: the
		// sequence's private blocks are discarded below.
		delete(c.xfer.declared, s)
	}
	s.rewrite = s.rewrite[:0]
	c.tx.unpins = c.tx.unpins[:0]
	us := c.tx.unpins
	span := s.span()
	for i := len(s.blocks) - 1; i >= 0; i-- {
		base := c.units.base(s.blocks[i])
		for p := range c.geom.pools {
			if !span.pins(i, p) {
				continue
			}
			for _, sl := range c.geom.pools[p].slices {
				us = append(us, base|UnitID(sl))
			}
		}
	}
	c.tx.unpins = us
	c.queueStepUnpins(s)
	for _, u := range c.tx.unpins {
		c.unpinUnit(u)
	}
	c.tx.unpins = c.tx.unpins[:0]
	s.stepPins = s.stepPins[:0]
	for _, u := range s.restored {
		if c.units.tierOf(u) == GPU && c.units.pinsOf(u) == 0 {
			c.dropResident(u)
		}
	}
	s.restored = s.restored[:0]
	for i := len(s.blocks) - 1; i >= 0; i-- {
		c.unref(s.blocks[i], s.sparse)
	}
	delete(c.seqs, s.id)
	c.collectPending()
}

// queueStepUnpins appends the pins of s's last SparseAccess to the
// transaction's unpins, which already hold s's block pins to release from
// its last block to its first, and orders the whole list tail first: by
// block index, last first, keeping the order within a block. A recency
// policy takes the first Unpin as the oldest use, so the blocks a step
// selected leave from the tail, as a released sequence's do (Release).
func (c *Cache) queueStepUnpins(s *sequence) {
	t := &c.tx
	if len(s.stepPins) == 0 {
		return
	}
	t.unpins = append(t.unpins, s.stepPins...)
	slices.SortStableFunc(t.unpins, func(a, b UnitID) int {
		return cmp.Compare(c.units.rec(b).index, c.units.rec(a).index)
	})
}
