package kvcache

import (
	"fmt"
	"slices"
)

// Fork starts a new sequence that shares every full block of sequence id
// (parallel sampling, beam search) and gets a copy of its partial block
// (copy-on-write: through the Mover now, or as a transfer of the Engine
// that the child waits on, see Readiness; the parent waits on it too, so
// that its server does not write the block, with its next tokens or after
// a Truncate, while the copy reads it). The child has the
// parent's tokens, keys, priorities and mode. Since the copy reads the
// parent's KV now, calling Fork declares it written: Fork first commits
// the parent's tokens, as Append does (and that commit stays if the Fork
// then fails).
//
// A Fork whose child pins more than a step's units runs in steps (see
// Acquire); other calls on the parent wait for it meanwhile. It either
// succeeds or leaves no child and no pin behind.
//
// It returns an error wrapping ErrUnknownSequence, ErrNoSpace or
// ErrCopyFailed, or ErrBusy when a full block of the parent cannot be
// committed yet because a transfer still moves one of its units (with a
// TransferEngine; see Readiness); nothing is then created.
func (c *Cache) Fork(id SeqID) (Plan, error) {
	p, again, err := c.fork(id, false)
	if again {
		// The commit ran in steps; the Fork runs now.
		p, _, err = c.fork(id, true)
	}
	return p, err
}

// fork is Fork. Unless committed, an implicit commit of more than a step
// runs in steps first (see slices.go), and fork returns again.
func (c *Cache) fork(id SeqID, committed bool) (_ Plan, again bool, err error) {
	if err := c.lock("Fork"); err != nil {
		return Plan{}, false, err
	}
	c.applyFinishedLocked()
	s, err := c.lookupToChange(id)
	if err == nil && !committed && c.longCommit(s, s.tokens.len()) {
		err := c.commitInSteps("Fork", s, s.tokens.len(), &err)
		return Plan{}, err == nil, err
	}
	if err == nil && c.longFork(s) {
		p, err := c.forkInSteps(s, &err)
		return p, false, err
	}
	defer c.unlock(&err)
	if err != nil {
		return Plan{}, false, err
	}
	if err := c.forkable(s); err != nil {
		return Plan{}, false, err
	}
	p, err := c.forkOf(s, nil)
	return p, false, err
}

// forkable commits s's tokens for a Fork (Cache.mu held) and reports
// whether s can be forked now.
func (c *Cache) forkable(s *sequence) error {
	// Fork copies the partial block now: its KV, and everything before
	// it, is written, and the child shares only committed blocks.
	c.commitThrough(s, s.tokens.len())
	if c.poisoned != nil {
		return c.poisoned // a merge met a policy that broke its contract
	}
	if full := s.tokens.len() / c.geom.blockTokens; s.firstPrivate < full {
		// The commit waits for a transfer (commitThrough): the child
		// could share only committed blocks.
		return fmt.Errorf("%w: sequence %d has block %d in flight; fork it once Readiness reports no pending transfer", ErrBusy, s.id, s.firstPrivate)
	}
	return nil
}

// forkOf is Fork of s (Cache.mu held), whose tokens are committed
// (forkable). cl, when not nil, is what the steps of a long Fork have
// claimed already: the child's references to s's first blocks and its
// pins of their units in its span.
func (c *Cache) forkOf(s *sequence, cl *forkClaim) (Plan, error) {
	c.begin(nil)
	B := c.geom.blockTokens
	child := &sequence{
		keys:         s.keys,
		extra:        slices.Clone(s.extra),
		tokens:       s.tokens.clone(),
		blocks:       slices.Clone(s.blocks),
		sparse:       s.sparse,
		prio:         s.prio,
		writeFrom:    s.writeFrom,
		promptBlocks: s.promptBlocks,

		maxLoadTokens: s.maxLoadTokens,
	}
	c.tx.owner = child
	nb := len(child.blocks)
	cowDst, cowSrc := int32(-1), int32(-1)
	full := s.tokens.len() / B
	old, same := pinSpan{}, 0
	if cl != nil {
		// The claimed span in the claim's own block list: repinRange
		// below may replace a claimed block of child.blocks by a
		// recompute copy in place, and an old span sharing that array
		// would then name the copy too, so queuePins would keep the
		// claim's pin on the cached block and give the copy no slot.
		old, same = cl.child.span(), len(cl.child.blocks)
		child.tables = cl.child.tables
	}
	for i := same; i < full; i++ {
		c.ref(child.blocks[i], child.sparse)
	}
	if full < nb {
		prio, dur := c.priority(s, full)
		cowSrc = child.blocks[full]
		cowDst = c.newBlock(full, s.chunks(nb), prio, dur, s.keys.Namespace)
		c.ref(cowDst, child.sparse)
		child.blocks[full] = cowDst
	}
	child.pinLo = c.wantLo(nil, child.sparse, child.writeFrom)
	firstPrivate := full
	if cowDst >= 0 && c.engine != nil {
		// The copy runs after the call and may fail; the child's server
		// then recomputes the partial block from its first token, which
		// reads that token's window: the child pins it, as a Truncate
		// does (a block of it without bytes is recomputed, which moves
		// the first token to compute back; see repinRange).
		lo, copies, from := c.repinRange(child, child.blocks, child.writeFrom, full*B, true, cowDst, cowSrc)
		child.pinLo = append(child.pinLo[:0], lo...)
		child.writeFrom = from
		for _, i := range copies {
			firstPrivate = min(firstPrivate, i)
		}
	}
	c.queuePins(old, child.span(), same, cowDst, cowSrc)
	if err := c.execute(); err != nil {
		return Plan{}, err
	}
	child.firstPrivate = firstPrivate
	c.register(child)
	if cowDst >= 0 {
		// The copy reads the parent's last block, which the parent's
		// server goes on writing (its next tokens, a rewrite after a
		// truncation): the parent is not ready, for reads or writes,
		// until the copy has read it.
		for _, id := range c.tx.submitted {
			c.xfer.wait(s, id)
		}
	}
	for _, w := range s.waits {
		// The child reads the blocks the parent waits for.
		c.xfer.wait(child, w)
	}
	plan := Plan{Seq: child.id, Tokens: child.tokens.len()}
	c.fillPlan(&plan, child)
	plan.Hits = 0 // shared units are not cache hits, just more pins
	if compute, recomputed := c.computeRanges(child, child.tokens.len(), nb); len(compute) > 0 {
		plan.Compute, plan.RecomputeTokens = compute, recomputed
	}
	c.st.recomputed += int64(plan.RecomputeTokens)
	c.syncTables(child)
	return plan, nil
}
