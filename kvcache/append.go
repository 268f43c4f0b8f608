package kvcache

import "slices"

// Append adds tokens to sequence id (decode, or a chunk of a sparse
// prefill) and returns the plan: a new block gets fresh GPU slots whenever
// the last one fills. Calling Append declares that the KV of every token
// the sequence held before it is written (the forward pass that produced
// the new tokens wrote it), so Append first commits those tokens (see
// Commit); that commit stays even if the rest of the call fails. The
// appended tokens themselves stay private to the sequence until the next
// Append or Commit.
//
// The server computes the appended tokens (Plan.Compute) into the slots the
// sequence's block tables give. For sliding-window layers, units of blocks
// that fall wholly out of the window of the first appended token are
// unpinned (they stay cached and reusable). A sparse sequence pins only the
// blocks this Append writes and unpins those the previous Append wrote.
// With a TransferEngine the new block's fresh slots may still be the
// sources of victims' moves down (Plan.Loading counts them): the server
// writes a layer once Readiness reports it, as after Acquire.
//
// Append with no tokens does nothing. It returns an error wrapping
// ErrUnknownSequence, ErrNoSpace or ErrCopyFailed; the sequence is then
// unchanged but for the commit.
func (c *Cache) Append(id SeqID, tokens ...uint32) (Plan, error) {
	p, again, err := c.append(id, tokens, false)
	if again {
		// The commit ran in steps; the Append runs now.
		p, _, err = c.append(id, tokens, true)
	}
	return p, err
}

// append is Append. Unless committed, an implicit commit of more than a
// step runs in steps first (see slices.go), and append returns again.
func (c *Cache) append(id SeqID, tokens []uint32, committed bool) (_ Plan, again bool, err error) {
	if err := c.lock("Append"); err != nil {
		return Plan{}, false, err
	}
	applied := c.applyFinishedLocked()
	s, err := c.lookupToChange(id)
	if err == nil && !committed && len(tokens) > 0 && c.longCommit(s, s.tokens.len()) {
		err := c.commitInSteps("Append", s, s.tokens.len(), &err)
		return Plan{}, err == nil, err
	}
	defer c.unlock(&err)
	if err != nil {
		return Plan{}, false, err
	}
	p, err := c.appendTo(s, tokens)
	if applied {
		c.statsUnchanged = false // what appendTo says, transfers aside
	}
	return p, false, err
}

// appendTo is Append of tokens to s (Cache.mu held).
func (c *Cache) appendTo(s *sequence, tokens []uint32) (Plan, error) {
	id := s.id
	if len(tokens) == 0 {
		return Plan{Seq: id, Tokens: s.tokens.len()}, nil
	}
	// The forward pass that produced these tokens wrote the KV of every
	// token before them: that much is committed whatever happens next.
	stored := c.commitThrough(s, s.tokens.len())
	if c.poisoned != nil {
		return Plan{}, c.poisoned // a merge met a policy that broke its contract
	}
	n := s.tokens.len()
	n2 := n + len(tokens)
	nb, nb2 := len(s.blocks), c.geom.numBlocks(n2)
	lo := c.wantLo(c.scratch.lo, s.sparse, n)
	c.scratch.lo = lo
	if nb2 == nb && len(s.stepPins) == 0 && slices.Equal(lo, s.pinLo) {
		// The tokens fit in the sequence's partial block and no window
		// moves past a block: nothing to pin or unpin, as for most
		// decode steps.
		s.tokens.append(tokens...)
		s.writeFrom = n
		s.compute = append(s.compute[:0], TokenRange{Start: n, End: n2})
		c.indexWriting(s, n/c.geom.blockTokens)
		// Stats report none of this, unless the implicit commit stored
		// blocks.
		c.statsUnchanged = !stored
		return Plan{Seq: id, Tokens: n2, Compute: s.compute}, nil
	}
	c.begin(s)
	// The new blocks go after the sequence's in its spare capacity, which
	// s.blocks (of length nb) does not see until the call succeeds.
	blocks := s.blocks
	for i := nb; i < nb2; i++ {
		prio, dur := c.priority(s, i)
		b := c.newBlock(i, s.chunks(nb2), prio, dur, s.keys.Namespace)
		c.ref(b, s.sparse)
		blocks = append(blocks, b)
	}
	c.queuePins(s.span(), pinSpan{blocks: blocks, lo: lo}, nb, -1, -1)
	// The step of the last SparseAccess is over: its pins go.
	c.queueStepUnpins(s)
	if err := c.execute(); err != nil {
		return Plan{}, err
	}
	s.stepPins = s.stepPins[:0]
	s.tokens.append(tokens...)
	s.blocks = blocks
	s.pinLo = append(s.pinLo[:0], lo...)
	s.writeFrom = n
	plan := Plan{Seq: id, Tokens: n2}
	c.fillPlan(&plan, s)
	s.compute = append(s.compute[:0], TokenRange{Start: n, End: n2})
	plan.Compute = s.compute
	c.syncTables(s)
	c.indexWriting(s, n/c.geom.blockTokens)
	return plan, nil
}
