package kvcache

import "fmt"

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
	c.begin(s)
	B := c.geom.blockTokens
	L := len(s.tokens) - n
	nb := c.geom.numBlocks(L)
	blocks := append(c.scratch.blocks[:0], s.blocks[:nb]...)
	c.scratch.blocks = blocks
	cowDst, cowSrc := int32(-1), int32(-1)
	detach := false
	same := nb
	if L%B != 0 {
		last := nb - 1
		b := blocks[last]
		// A private block (refs 1) just becomes partial again.
		if r := &c.units.blocks[b]; r.node != nil {
			if r.refs == 1 && r.node.IsLeaf() {
				detach = true
			} else {
				prio, dur := c.priority(s, last)
				cowDst = c.newBlock(last, s.chunks(nb), prio, dur)
				c.ref(cowDst, s.sparse)
				cowSrc = b
				blocks[last] = cowDst
				same = last
			}
		}
	}
	writeFrom := min(s.writeFrom, L)
	lo, copies, writeFrom := c.repinRange(s, blocks, writeFrom, L%B != 0, cowDst, cowSrc)
	for _, i := range copies {
		same = min(same, i)
	}
	c.queuePins(s.span(), pinSpan{blocks: blocks, lo: lo}, same, cowDst, cowSrc)
	c.queueStepUnpins(s)
	if err := c.execute(); err != nil {
		return Plan{}, err
	}
	s.stepPins = s.stepPins[:0]
	s.restored = s.restored[:0]
	plan := Plan{Seq: id, Tokens: L}
	c.fillPlan(&plan, s)
	compute := s.compute[:0]
	for _, i := range c.scratch.fresh {
		end := min((i+1)*B, L)
		compute = addRange(compute, i*B, end)
		plan.RecomputeTokens += end - i*B
	}
	s.compute = compute
	if len(compute) > 0 {
		plan.Compute = compute
	}
	c.st.recomputed += int64(plan.RecomputeTokens)
	// The copy writes old[:nb] only: the blocks past the new end stay
	// readable in old until they are released below.
	old := s.blocks
	s.blocks = append(s.blocks[:0], blocks...)
	s.tokens = s.tokens[:L]
	s.pinLo = append(s.pinLo[:0], lo...)
	s.writeFrom = writeFrom
	s.firstPrivate = min(s.firstPrivate, L/B)
	for _, i := range copies {
		s.firstPrivate = min(s.firstPrivate, i)
	}
	c.syncTables(s)
	if L%B != 0 {
		b := s.blocks[nb-1]
		if detach {
			c.emitBlock(BlockRemoved, b)
			if err := c.tree.Remove(c.units.blocks[b].node); err == nil {
				c.st.removed++
			}
			c.units.blocks[b].node = nil
		} else if r := &c.units.blocks[b]; r.node == nil {
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
	return plan, nil
}

// repinRange returns the pin starts (per pool) of a Truncate that leaves
// blocks (the last one partial when partial is set; cowDst, if any,
// copied from cowSrc), the indices of the blocks it replaced in blocks by
// recompute copies (allocated for the running transaction), and the first
// token the server then writes. Starting from writing at token from, every
// committed block that the range pins newly and that lacks a unit's bytes
// there is recomputed into a private copy; the first token to compute then
// moves back to that block, so the range grows in every pool to cover the
// window of that token, which may pin more blocks; it stops when nothing
// more is recomputed before from.
func (c *Cache) repinRange(s *sequence, blocks []int32, from int, partial bool, cowDst, cowSrc int32) ([]int32, []int, int) {
	B := c.geom.blockTokens
	copies := c.scratch.copies[:0]
	pools := c.scratch.pools[:0]
	for range c.geom.pools {
		pools = append(pools, false)
	}
	c.scratch.pools = pools
	span := s.span()
	for {
		lo := c.wantLo(c.scratch.lo, s.sparse, from)
		c.scratch.lo = lo
		first := len(blocks)
		for i, b := range blocks {
			for p := range c.geom.pools {
				// Units the sequence pins already need nothing.
				pools[p] = i >= int(lo[p]) && !(span.pins(i, p) && s.blocks[i] == b)
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
			if c.units.blocks[b].node != nil && !(partial && i == len(blocks)-1) {
				blocks[i] = c.recomputeCopy(b, s.sparse)
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
			return lo, copies, from
		}
		from = first * B
	}
}
