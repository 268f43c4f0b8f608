package kvcache

import (
	"fmt"
	"slices"
)

// Truncate removes the last n tokens of sequence id (speculative decoding
// rollback) and returns the plan. Blocks past the new end are released
// (they stay cached if committed; a partial one is freed, and if the
// Truncate evicts its units to make room they are dropped, never copied to
// the CPU). When the new end falls inside a
// committed block, the sequence needs a private partial block again: if it
// is the block's only user and the block is a leaf of the tree, the block
// is detached from the tree (a BlockRemoved event) and kept; otherwise it is
// copied on write into fresh GPU slots (the copies are in the plan's batch).
// When a unit to copy or to pin again has no bytes (dropped), its block is
// planned for recompute and none of the block's units is copied: as in
// Acquire, they get fresh slots (units on the GPU stay pinned). The pins of
// the sequence's SparseAccess calls are released.
//
// It returns an error wrapping ErrUnknownSequence, ErrOutOfRange (n
// negative or more than the sequence holds), ErrNoSpace or ErrCopyFailed;
// the sequence is then unchanged.
func (c *Cache) Truncate(id SeqID, n int) (_ Plan, err error) {
	c.mu.Lock()
	defer c.unlock()
	defer c.reportBreach(&err)
	s, err := c.lookupToChange(id)
	if err != nil {
		return Plan{}, err
	}
	if n < 0 || n > len(s.tokens) {
		return Plan{}, fmt.Errorf("%w: truncate %d tokens of a sequence of %d", ErrOutOfRange, n, len(s.tokens))
	}
	if n == 0 {
		return Plan{Seq: id, Tokens: len(s.tokens)}, nil
	}
	B := c.blockTokens
	L := len(s.tokens) - n
	nb := c.numBlocks(L)
	newBlocks := append(c.scratch.blocks[:0], s.blocks[:nb]...)
	c.scratch.blocks = newBlocks
	cowDst, cowSrc := int32(-1), int32(-1)
	detach := false
	if L%B != 0 {
		last := nb - 1
		b := newBlocks[last]
		r := &c.blocks[b]
		if r.node != nil {
			if r.refs == 1 && r.node.IsLeaf() {
				detach = true
			} else {
				prio, dur := c.priority(s, last)
				cowDst = c.allocBlock(last, s.chunks(nb), prio, dur)
				c.addRef(cowDst, s.sparse)
				cowSrc = b
				newBlocks[last] = cowDst
			}
		}
	}
	oldWrite := s.writeFrom
	s.writeFrom = min(s.writeFrom, L)
	lo := c.wantLo(c.scratch.lo, s)
	c.scratch.lo = lo
	c.tx.reset()
	c.queuePinDiff(s.blocks, s.pinLo, s.pinHi, newBlocks, lo, nb, cowDst, cowSrc)
	c.queueStepUnpins(s)
	if err := c.runTxn(); err != nil {
		s.writeFrom = oldWrite
		if cowDst >= 0 {
			c.blocks[cowDst].refs = 0
			c.freeBlock(cowDst)
		}
		return Plan{}, err
	}
	s.stepPins = s.stepPins[:0]
	plan := Plan{Seq: id, Tokens: L}
	c.fillPlan(&plan)
	for _, i := range c.scratch.fresh {
		end := min((i+1)*B, L)
		plan.Compute = addRange(plan.Compute, i*B, end)
		plan.RecomputeTokens += end - i*B
	}
	c.st.recomputed += int64(plan.RecomputeTokens)
	old := s.blocks
	s.blocks = slices.Clone(newBlocks)
	s.tokens = s.tokens[:L]
	s.pinLo = append(s.pinLo[:0], lo...)
	s.pinHi = nb
	if detach {
		b := s.blocks[nb-1]
		c.emitBlock(BlockRemoved, b)
		if err := c.tree.Remove(c.blocks[b].node); err == nil {
			c.st.removed++
		}
		c.blocks[b].node = nil
	}
	for i := len(old) - 1; i >= nb; i-- {
		c.unref(old[i], s.sparse)
	}
	if cowSrc >= 0 {
		c.unref(cowSrc, s.sparse)
	}
	c.collectPending()
	return plan, nil
}

// Fork starts a new sequence that shares every full block of sequence id
// (parallel sampling, beam search) and gets a copy of its partial block
// (copy-on-write, executed now through the Mover). The child has the
// parent's tokens, keys, priorities and mode.
//
// It returns an error wrapping ErrUnknownSequence, ErrNoSpace or
// ErrCopyFailed; nothing is then created.
func (c *Cache) Fork(id SeqID) (_ Plan, err error) {
	c.mu.Lock()
	defer c.unlock()
	defer c.reportBreach(&err)
	s, err := c.lookupToChange(id)
	if err != nil {
		return Plan{}, err
	}
	B := c.blockTokens
	child := &sequence{
		keys:         s.keys,
		extra:        slices.Clone(s.extra),
		tokens:       slices.Clone(s.tokens),
		blocks:       slices.Clone(s.blocks),
		sparse:       s.sparse,
		prio:         s.prio,
		writeFrom:    s.writeFrom,
		promptBlocks: s.promptBlocks,
	}
	nb := len(child.blocks)
	cowDst, cowSrc := int32(-1), int32(-1)
	full := len(s.tokens) / B
	for i := range full {
		c.addRef(child.blocks[i], child.sparse)
	}
	if full < nb {
		prio, dur := c.priority(s, full)
		cowSrc = child.blocks[full]
		cowDst = c.allocBlock(full, s.chunks(nb), prio, dur)
		c.addRef(cowDst, child.sparse)
		child.blocks[full] = cowDst
	}
	lo := c.wantLo(nil, child)
	c.tx.reset()
	c.queuePinDiff(nil, nil, 0, child.blocks, lo, nb, cowDst, cowSrc)
	if err := c.runTxn(); err != nil {
		for i := range full {
			r := &c.blocks[child.blocks[i]]
			r.refs--
			if child.sparse {
				r.sparseRefs--
			}
		}
		if cowDst >= 0 {
			c.blocks[cowDst].refs = 0
			c.freeBlock(cowDst)
		}
		return Plan{}, err
	}
	plan := Plan{Tokens: len(child.tokens)}
	c.fillPlan(&plan)
	for _, i := range c.scratch.fresh {
		end := min((i+1)*B, len(child.tokens))
		plan.Compute = addRange(plan.Compute, i*B, end)
		plan.RecomputeTokens += end - i*B
	}
	c.st.recomputed += int64(plan.RecomputeTokens)
	plan.HitUnits = 0 // shared units are not cache hits, just more pins
	child.pinLo = lo
	child.pinHi = nb
	c.register(child)
	c.collectPending()
	plan.Seq = child.id
	return plan, nil
}
