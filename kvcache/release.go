package kvcache

import (
	"cmp"
	"slices"
)

// Release ends sequence id: its units are unpinned and its committed
// blocks stay cached (lazy eviction) until a policy picks them; what it had
// not committed (see Commit) is discarded, never shared. A server that wants
// the tokens of a sequence's last step shared calls Commit first (and, with
// a TransferEngine, waits until the sequence's Readiness reports nothing
// pending: a commit that waits for transfers is discarded by a Release
// that comes first). Blocks are
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
	return c.endSequence("Release", id, false)
}

// endSequence is Release and Abort (aborted): it ends live sequence id,
// in steps when its pins exceed one (see slices.go).
func (c *Cache) endSequence(call string, id SeqID, aborted bool) (err error) {
	if err := c.lock(call); err != nil {
		return err
	}
	s, err := c.lookupToChange(id)
	if err != nil {
		c.unlock(&err)
		return err
	}
	if aborted {
		c.st.aborted++
	}
	if c.longEnd(s) {
		return c.endInSteps(call, s, &err)
	}
	c.end(s)
	c.unlock(&err)
	return err
}

// endInSteps ends s, whose pins exceed a step, for method call (Release,
// Abort), which holds the lock: s is taken out now, the lock released (its
// unlock reports *err), and its pins and references released in steps
// (see slices.go).
func (c *Cache) endInSteps(call string, s *sequence, err *error) error {
	e := &ending{s: s, span: s.span()}
	c.beginEnd(e)
	c.unlock(err)
	if *err != nil {
		// A breach met while taking s out: the steps still release what
		// it held.
		_ = c.runEnd(call, e)
		return *err
	}
	return c.runEnd(call, e)
}

// end unpins and forgets sequence s (Release, Abort). Units its last
// SparseAccess restored that it never declared written are dropped again
// unless another sequence pins them.
func (c *Cache) end(s *sequence) {
	c.xfer.unwait(s)
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

// ending is a sequence that a long Release or Abort, or a failed long
// Acquire, ends in steps (see slices.go): out of the live sequences from
// the first step, its pins released from its last block to its first (as
// end does), then its references, a slice at a time.
type ending struct {
	s *sequence
	// pinned reports whether the sequence pins unit sl of block i; when
	// nil, span says it, per block and pool (a live sequence's pins).
	pinned func(i, sl int) bool
	span   pinSpan
	// unpinned and unrefed count the blocks, from the last, whose pins
	// and references are gone.
	unpinned, unrefed int
}

// longEnd reports whether ending s takes more than one step: a dense
// sequence whose pins exceed a step (a sparse one pins a few blocks).
func (c *Cache) longEnd(s *sequence) bool {
	if s.sparse || len(s.stepPins) > 0 || len(s.restored) > 0 {
		return false
	}
	n := 0
	for p, pg := range c.geom.pools {
		n += (len(s.blocks) - int(s.pinLo[p])) * pg.unitsPerBlock
	}
	return c.isLong(n)
}

// beginEnd takes e's sequence out of the live ones (Cache.mu held): its
// waits, a commit it waited to make, what it owed, are dropped, as end
// drops them; its pins and references go in the steps of runEnd.
func (c *Cache) beginEnd(e *ending) {
	s := e.s
	c.xfer.unwait(s)
	if c.xfer.declared != nil {
		delete(c.xfer.declared, s)
	}
	s.rewrite = s.rewrite[:0]
	if c.seqs[s.id] == s {
		delete(c.seqs, s.id)
	}
	c.long++
}

// runEnd releases e's pins and references, one step at a time.
func (c *Cache) runEnd(call string, e *ending) error {
	for done := false; !done; {
		if err := c.step(call, func() error { done = c.endStep(e); return nil }); err != nil {
			return err
		}
	}
	return nil
}

// endStep releases the next slice of e's pins, from its last block, and
// then of its references; the last step counts the long operation done
// and reports true.
func (c *Cache) endStep(e *ending) bool {
	g := c.geom
	s := e.s
	bud := c.newBudget()
	n := len(s.blocks)
	for ; e.unpinned < n && (bud.units == 0 || !bud.spent()); e.unpinned++ {
		i := n - 1 - e.unpinned
		base := c.units.base(s.blocks[i])
		for p := range g.pools {
			if e.pinned == nil && !e.span.pins(i, p) {
				continue
			}
			for _, sl := range g.pools[p].slices {
				if e.pinned == nil || e.pinned(i, sl) {
					c.unpinUnit(base | UnitID(sl))
				}
			}
		}
		bud.units += g.slices
	}
	for ; e.unpinned == n && e.unrefed < n && (bud.units == 0 || !bud.spent()); e.unrefed++ {
		c.unref(s.blocks[n-1-e.unrefed], s.sparse)
		bud.units += g.slices
	}
	c.statsUnchanged = false
	if e.unrefed < n {
		return false
	}
	c.long--
	return true
}
