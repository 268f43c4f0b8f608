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
// layer's window moves back). The tables of a dense sequence then cover the
// window of the last token kept as well as of the next one, so a server
// that needs the last kept token's logits again (speculative decoding has
// them from its verifying pass; another server may not) reruns that
// token's forward pass over the K/V the tables give, writing nothing. With
// a TransferEngine the tables also cover the window of the first token of
// a partial block being copied on write: if the copy fails, the server
// recomputes that block from its first token (see Readiness). A committed
// block one of whose units to pin has no bytes is recomputed whole into a private copy, as Acquire does;
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
	c.applyFinished()
	s, err := c.lookupToChange(id)
	if err != nil {
		return Plan{}, err
	}
	if n < 0 || n > s.tokens.len() {
		return Plan{}, fmt.Errorf("%w: truncate %d tokens of a sequence of %d", ErrOutOfRange, n, s.tokens.len())
	}
	if n == 0 {
		return Plan{Seq: id, Tokens: s.tokens.len()}, nil
	}
	c.begin(s)
	cut := c.planTruncate(s, s.tokens.len()-n)
	c.queuePins(s.span(), pinSpan{blocks: cut.blocks, lo: cut.lo}, cut.same, cut.cowDst, cut.cowSrc)
	c.queueStepUnpins(s)
	if err := c.execute(); err != nil {
		return Plan{}, err
	}
	plan := Plan{Seq: id, Tokens: cut.length}
	c.fillPlan(&plan, s)
	if compute, recomputed := c.computeRanges(s, cut.length, len(cut.blocks)); len(compute) > 0 {
		plan.Compute, plan.RecomputeTokens = compute, recomputed
	}
	c.st.recomputed += int64(plan.RecomputeTokens)
	c.applyTruncate(s, &cut)
	s.undeclare(cut.writeFrom)
	return plan, nil
}

// truncation is what a Truncate changes, planned (with its block records
// and references logged) before its transaction runs.
type truncation struct {
	// length is the sequence's tokens after the call; blocks its blocks,
	// the last one partial when length is not a whole number of blocks.
	length int
	blocks []int32
	// same is the index of the first block that differs from the
	// sequence's (len(blocks) when only the tail is cut).
	same int
	// lo is the first block the sequence pins in each pool; writeFrom the
	// first token the server computes next.
	lo        []int32
	writeFrom int
	// copies lists the blocks replaced by recompute copies.
	copies []int
	// cowDst, when not -1, replaces the partial last block cowSrc, a
	// committed block the sequence shares: it is filled by copying it.
	cowDst, cowSrc int32
	// detach says that the partial last block, committed, a leaf and the
	// sequence's alone, leaves the tree and becomes private again.
	detach bool
}

// planTruncate plans cutting s to length tokens.
func (c *Cache) planTruncate(s *sequence, length int) truncation {
	B := c.geom.blockTokens
	nb := c.geom.numBlocks(length)
	t := truncation{length: length, same: nb, cowDst: -1, cowSrc: -1}
	t.blocks = append(c.scratch.blocks[:0], s.blocks[:nb]...)
	c.scratch.blocks = t.blocks
	partial := length%B != 0
	if partial {
		last := nb - 1
		b := t.blocks[last]
		// A private block (refs 1) just becomes partial again.
		if r := c.units.blk(b); r.node != nil {
			if r.refs == 1 && r.node.IsLeaf() && !c.unsettled(b) {
				// (A transfer may still read it: a copy-on-write of
				// another sequence's Truncate or Fork.)
				t.detach = true
			} else {
				prio, dur := c.priority(s, last)
				t.cowDst = c.newBlock(last, s.chunks(nb), prio, dur, s.keys.Namespace)
				c.ref(t.cowDst, s.sparse)
				t.cowSrc = b
				t.blocks[last] = t.cowDst
				t.same = last
			}
		}
	}
	from := min(s.writeFrom, length)
	pinFrom := from
	if !s.sparse {
		// The server may rerun the last kept token for its logits: its
		// window stays pinned. (A sparse sequence reads through
		// SparseAccess instead.)
		pinFrom = min(pinFrom, max(0, length-1))
	}
	if t.cowDst >= 0 && c.engine != nil {
		// The copy runs after the call and may fail; the server then
		// recomputes the partial block from its first token, which
		// reads that token's window: pin it now, so that the block
		// tables cover what the recompute reads.
		pinFrom = min(pinFrom, (nb-1)*B)
	}
	t.lo, t.copies, t.writeFrom = c.repinRange(s, t.blocks, from, pinFrom, partial, t.cowDst, t.cowSrc)
	for _, i := range t.copies {
		t.same = min(t.same, i)
	}
	return t
}

// applyTruncate brings s to the state t planned, once its transaction has
// committed: the sequence's tokens, blocks, pins and tables, the partial
// block's place (detached from the tree, or out of the index of blocks
// being written), and the references it no longer holds.
func (c *Cache) applyTruncate(s *sequence, t *truncation) {
	B := c.geom.blockTokens
	nb := len(t.blocks)
	s.stepPins = s.stepPins[:0]
	s.restored = s.restored[:0]
	// The copy writes old[:nb] only: the blocks past the new end stay
	// readable in old until they are released below.
	old := s.blocks
	s.blocks = append(s.blocks[:0], t.blocks...)
	s.tokens.truncate(t.length)
	s.pinLo = append(s.pinLo[:0], t.lo...)
	s.writeFrom = t.writeFrom
	s.firstPrivate = min(s.firstPrivate, t.length/B)
	for _, i := range t.copies {
		s.firstPrivate = min(s.firstPrivate, i)
	}
	c.syncTables(s)
	if t.length%B != 0 {
		b := s.blocks[nb-1]
		if t.detach {
			c.emitBlock(BlockRemoved, b, GPU)
			if err := c.tree.Remove(c.units.blk(b).node); err == nil {
				c.st.removed++
			}
			c.units.blk(b).node = nil
			for sl := range c.geom.slices {
				// Its units are rewritten past the cut: their
				// backups are stale.
				c.voidBackup(c.units.id(b, sl))
			}
		} else if r := c.units.blk(b); r.node == nil {
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
	if t.cowSrc >= 0 {
		c.unref(t.cowSrc, s.sparse)
	}
}

// repinRange returns the pin starts (per pool) of a Truncate that leaves
// blocks (the last one partial when partial is set; cowDst, if any,
// copied from cowSrc), the indices of the blocks it replaced in blocks by
// recompute copies (allocated for the running transaction), and the first
// token the server then writes. The pins cover the window of token
// pinFrom (at most from: the first token the server may have to compute
// if an asynchronous copy fails) and, with a TransferEngine, of the first
// token of every block the range loads (a load that fails is recomputed
// from there). Starting from writing at token from, every
// committed block that the range pins newly and that lacks a unit's bytes
// there is recomputed into a private copy; the first token to compute then
// moves back to that block, so the range grows in every pool to cover the
// window of that token, which may pin more blocks; it stops when nothing
// more is recomputed before from.
func (c *Cache) repinRange(s *sequence, blocks []int32, from, pinFrom int, partial bool, cowDst, cowSrc int32) ([]int32, []int, int) {
	B := c.geom.blockTokens
	copies := c.scratch.copies[:0]
	pools := c.scratch.pools[:0]
	for range c.geom.pools {
		pools = append(pools, false)
	}
	c.scratch.pools = pools
	span := s.span()
	for {
		pinFrom = min(pinFrom, from)
		lo := c.wantLo(c.scratch.lo, s.sparse, pinFrom)
		c.scratch.lo = lo
		first, loads := len(blocks), len(blocks)
		for i, b := range blocks {
			for p := range c.geom.pools {
				// Units the sequence pins already need nothing.
				pools[p] = i >= int(lo[p]) && !(span.pins(i, p) && s.blocks[i] == b)
			}
			if loads == len(blocks) && c.engine != nil && c.mayFailLoad(b, pools) {
				loads = i
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
			if c.units.blk(b).node != nil && !(partial && i == len(blocks)-1) {
				blocks[i] = c.recomputeCopy(b, s.sparse)
				copies = append(copies, i)
			}
			// A private block's missing units get fresh slots, and so do
			// those of the partial block the Truncate leaves (it is
			// detached from the tree by the same call): the server
			// computes it whole again.
			first = min(first, i)
		}
		again := false
		if first*B < from {
			from, again = first*B, true
		}
		if loads*B < min(pinFrom, from) {
			// A load that fails makes the server recompute its block
			// from its first token, reading that token's window.
			pinFrom, again = loads*B, true
		}
		if !again {
			c.scratch.copies = copies
			return lo, copies, from
		}
	}
}

// mayFailLoad reports whether a unit of block b in a pool of pools gets its
// GPU bytes from a transfer that may still fail: it is on a lower tier (a
// pin loads it) or a transfer still brings it to the GPU.
func (c *Cache) mayFailLoad(b int32, pools []bool) bool {
	for p, want := range pools {
		if !want {
			continue
		}
		for _, sl := range c.geom.pools[p].slices {
			st := c.units.of(c.units.id(b, sl))
			if (st.tier != GPU && st.tier != Dropped) || st.loading() {
				return true
			}
		}
	}
	return false
}
