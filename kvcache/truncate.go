package kvcache

import (
	"fmt"
	"slices"
)

// Truncate removes the last n tokens of sequence id (speculative decoding
// rollback) and returns the plan. Blocks past the new end are released
// (they stay cached if committed; uncommitted ones are discarded, and if
// the Truncate evicts their units to make room they are dropped, never
// copied to the CPU). When the new end falls inside a committed block, the
// sequence needs a private partial block again: if it is the block's only
// user and the block is a leaf of the tree, the block is detached from the
// tree (a BlockRemoved event) and kept; otherwise it is copied on write
// into fresh GPU slots (the copies are in the plan's batch). When a unit to
// copy has no bytes, the partial block is computed instead and none of its
// units is copied.
//
// Truncate may pin blocks the sequence no longer pinned (a sliding-window
// layer's window moves back). A committed block one of whose units to pin
// has no bytes is recomputed whole into a private copy, as Acquire does;
// the plan's Compute then starts earlier than the new end, and the
// sequence pins, in every pool, every block that recomputing from there
// reads or writes (the window of the first recomputed token), so that no
// layer is told to compute tokens it has no slot for. The pins of the
// sequence's SparseAccess calls are released.
//
// It returns an error wrapping ErrUnknownSequence, ErrOutOfRange (n
// negative or more than the sequence holds), ErrNoSpace or ErrCopyFailed;
// the sequence is then unchanged.
func (c *Cache) Truncate(id SeqID, n int) (_ Plan, err error) {
	if err := c.lock("Truncate"); err != nil {
		return Plan{}, err
	}
	defer c.unlock(&err)
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
		// A private block (refs 1) just becomes partial again.
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
	lo, copies := c.repinRange(s, newBlocks, min(s.writeFrom, L), L%B != 0, cowDst, cowSrc)
	c.tx.reset()
	c.tx.seq = s
	c.queuePinDiff(s.blocks, s.pinLo, s.pinHi, newBlocks, lo, nb, cowDst, cowSrc)
	c.queueStepUnpins(s)
	if err := c.runTxn(); err != nil {
		s.writeFrom = oldWrite
		if cowDst >= 0 {
			c.dropNew(cowDst)
		}
		for _, i := range copies {
			c.dropNew(newBlocks[i])
		}
		return Plan{}, err
	}
	s.stepPins = s.stepPins[:0]
	s.restored = s.restored[:0]
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
	s.firstPrivate = min(s.firstPrivate, L/B)
	for _, i := range copies {
		s.firstPrivate = min(s.firstPrivate, i)
	}
	if L%B != 0 {
		b := s.blocks[nb-1]
		if detach {
			c.emitBlock(BlockRemoved, b)
			if err := c.tree.Remove(c.blocks[b].node); err == nil {
				c.st.removed++
			}
			c.blocks[b].node = nil
		} else if r := &c.blocks[b]; r.node == nil {
			// A partial block is never committed: it leaves the index of
			// blocks being written and a recompute copy's twin.
			c.unindexWriting(b)
			if r.twin >= 0 {
				twin := r.twin
				r.twin = -1
				c.unref(twin, s.sparse)
			}
		}
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

// repinRange sets s.writeFrom and returns the pin range (first block per
// pool) of a Truncate that leaves newBlocks (the last one partial when
// partial is set; cowDst, if any, copied from cowSrc), and the indices of
// the blocks it replaced in newBlocks by recompute copies. Starting from writing at
// token from, every committed block that the range pins newly and that
// lacks a unit's bytes there is recomputed into a private copy; the first
// token the server then computes moves back to that block, so the range
// grows in every pool to cover the window of that token, which may pin
// more blocks; it stops when nothing more is recomputed before from.
func (c *Cache) repinRange(s *sequence, newBlocks []int32, from int, partial bool, cowDst, cowSrc int32) ([]int32, []int) {
	B := c.blockTokens
	copies := c.scratch.copies[:0]
	pools := c.scratch.pools[:0]
	for range c.pools {
		pools = append(pools, false)
	}
	c.scratch.pools = pools
	for {
		s.writeFrom = from
		lo := c.wantLo(c.scratch.lo, s)
		c.scratch.lo = lo
		first := len(newBlocks)
		for i, b := range newBlocks {
			for p := range c.pools {
				// Units the sequence pins already need nothing.
				pools[p] = i >= int(lo[p]) && !(i < len(s.blocks) && s.blocks[i] == b && i >= int(s.pinLo[p]) && i < s.pinHi)
			}
			if b == cowDst {
				// Filled by copying cowSrc, unless a unit to copy has
				// no bytes: then it is computed.
				if c.lacksBytes(cowSrc, pools) {
					first = min(first, i)
				}
				continue
			}
			if !c.lacksBytes(b, pools) {
				continue
			}
			if c.blocks[b].node != nil && !(partial && i == len(newBlocks)-1) {
				newBlocks[i] = c.recomputeCopy(b, s.sparse)
				copies = append(copies, i)
			}
			// A private block's missing units get fresh slots, and so do
			// those of the partial block the Truncate leaves (it is
			// detached from the tree by the same call): the server
			// computes it whole again.
			first = min(first, i)
		}
		if first*B >= from {
			c.scratch.copies = copies
			return lo, copies
		}
		from = first * B
	}
}

// Fork starts a new sequence that shares every full block of sequence id
// (parallel sampling, beam search) and gets a copy of its partial block
// (copy-on-write, executed now through the Mover). The child has the
// parent's tokens, keys, priorities and mode. Since the copy reads the
// parent's KV now, calling Fork declares it written: Fork first commits
// the parent's tokens, as Append does (and that commit stays if the Fork
// then fails).
//
// It returns an error wrapping ErrUnknownSequence, ErrNoSpace or
// ErrCopyFailed; nothing is then created.
func (c *Cache) Fork(id SeqID) (_ Plan, err error) {
	if err := c.lock("Fork"); err != nil {
		return Plan{}, err
	}
	defer c.unlock(&err)
	s, err := c.lookupToChange(id)
	if err != nil {
		return Plan{}, err
	}
	// Fork copies the partial block now: its KV, and everything before
	// it, is written, and the child shares only committed blocks.
	c.commitThrough(s, len(s.tokens))
	if c.poisoned != nil {
		return Plan{}, c.poisoned // a merge met a policy that broke its contract
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
			c.dropNew(cowDst)
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
	child.firstPrivate = full
	c.register(child)
	c.collectPending()
	plan.Seq = child.id
	return plan, nil
}
