package kvcache

import "fmt"

// Release ends sequence id: its units are unpinned and stay cached (lazy
// eviction) until a policy picks them; its private partial block is freed.
// Blocks are unpinned from the sequence's last block to its first, so a
// recency policy (whose Unpin counts as the latest use, as vLLM's free queue
// does) evicts a released chain from its tail. A unit whose descendants are
// still cached may nevertheless be evicted: it becomes dropped and stays in
// the tree, and a later match reports its tokens for recompute while later
// blocks still hit.
//
// It returns an error wrapping ErrUnknownSequence for an id that is not
// live.
func (c *Cache) Release(id SeqID) error {
	c.mu.Lock()
	defer c.unlock()
	if c.poisoned != nil {
		return c.poisoned
	}
	s, ok := c.seqs[id]
	if !ok {
		return fmt.Errorf("%w: %d", ErrUnknownSequence, id)
	}
	c.clearStepPins(s)
	for i := len(s.blocks) - 1; i >= 0; i-- {
		b := s.blocks[i]
		for p := range c.pools {
			if i < int(s.pinLo[p]) || i >= s.pinHi {
				continue
			}
			for _, sl := range c.pools[p].slices {
				c.unpinUnit(c.unit(b, sl))
			}
		}
	}
	for i := len(s.blocks) - 1; i >= 0; i-- {
		c.unref(s.blocks[i])
	}
	delete(c.seqs, id)
	c.collectPending()
	return nil
}

// clearStepPins removes the pins of s's last SparseAccess.
func (c *Cache) clearStepPins(s *sequence) {
	for _, u := range s.stepPins {
		c.unpinUnit(u)
	}
	s.stepPins = s.stepPins[:0]
}
