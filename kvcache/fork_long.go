package kvcache

// A long Fork runs in steps (see slices.go). The child of a 32k-token
// sequence paged per layer pins 57,344 units, which held the lock for 14
// to 70 ms in one transaction. So, as a long Acquire claims its cached
// prefix, a long Fork first references the parent's blocks and pins their
// units in the child's span a slice at a time (the claim), and plans the
// rest (the partial block's copy, the blocks the claim stopped at) in a
// last step that is the one-step Fork with the claimed blocks counted as
// already pinned.
//
// The parent is busy meanwhile (other calls on it wait, see waitIdle), so
// its blocks and the span the child copies stay as they were. Only units
// that are settled hits are claimed: on the GPU, with bytes, and no
// transfer bringing them (a load that failed between two steps would make
// a unit the child counted as a hit one it has to recompute). Pinned,
// such a unit stays as it is until the child is live. The claim stops at
// the first block with a unit that is not settled; the last step plans
// that block and the rest as one transaction, as a one-step Fork would.
//
// The claim covers the units the child pins. The references to the full
// blocks outside its pins (below a window), and the blocks from the first
// unsettled one on, are taken by the last step, so a Fork of a sequence
// whose units are still loading, or of a sparse one, is one hold as
// before: the claim bounds the common case, a dense sequence at rest.
//
// Another caller can see the claimed pins between the steps (Stats), not
// the child, which has no SeqID until the last step. If the last step
// fails (no room for the partial block's copy, a failed copy, a policy's
// breach), the claims are released in steps, as a Release would, and the
// Fork returns the error with nothing created.

// forkClaim is what a long Fork's steps claimed: child is the child as
// far as it is claimed, its blocks the parent's first blocks it references
// and its span (pinLo, the parent's) the units of them it pins; its
// tables give their slots.
type forkClaim struct {
	child *sequence
	// stop says that the claim met a block with a unit that is not a
	// settled hit: the last step plans the rest.
	stop bool
}

// longFork reports whether a Fork of s runs in steps: a dense sequence
// whose full blocks pin more units than a step.
func (c *Cache) longFork(s *sequence) bool {
	if s.sparse {
		return false
	}
	full := s.tokens.len() / c.geom.blockTokens
	var buf [8]int32
	lo := c.wantLo(buf[:0], false, s.writeFrom)
	n := 0
	for p, pg := range c.geom.pools {
		n += max(0, full-int(lo[p])) * pg.unitsPerBlock
	}
	return c.isLong(n)
}

// forkInSteps is Fork of s, whose pins exceed a step, for a call that
// holds the lock: s is committed and marked busy, the lock released (its
// unlock reports *err), the child's claim runs in steps and the last step
// forks.
func (c *Cache) forkInSteps(s *sequence, err *error) (Plan, error) {
	*err = c.forkable(s)
	if *err != nil {
		c.unlock(err)
		return Plan{}, *err
	}
	cl := &forkClaim{child: &sequence{
		blocks: make([]int32, 0, s.tokens.len()/c.geom.blockTokens),
		pinLo:  c.wantLo(nil, false, s.writeFrom),
	}}
	s.busy = true
	c.long++
	c.unlock(err)
	var plan Plan
	if *err == nil {
		*err = c.runForkClaim(s, cl)
	}
	if *err == nil {
		*err = c.step("Fork", func() (ferr error) {
			if c.poisoned != nil {
				return c.poisoned
			}
			plan, ferr = c.forkOf(s, cl)
			return ferr
		})
	}
	if *err != nil && len(cl.child.blocks) > 0 {
		// The claims are released as a Release would release them, in
		// steps; a breach a step reports does not stop them (as in
		// endInSteps), so that the count of long operations comes back.
		e := &ending{s: cl.child, span: cl.child.span()}
		_ = c.step("Fork", func() error { c.beginEnd(e); return nil })
		_ = c.runEnd("Fork", e)
	}
	// The parent is idle again, whatever happened.
	c.lockWait()
	s.busy = false
	c.long--
	c.idle.Broadcast()
	c.mu.Unlock()
	return plan, *err
}

// runForkClaim claims s's full blocks for cl's child, a slice at a time
// (see the top of this file).
func (c *Cache) runForkClaim(s *sequence, cl *forkClaim) error {
	full := s.tokens.len() / c.geom.blockTokens
	for len(cl.child.blocks) < full && !cl.stop {
		if err := c.step("Fork", func() error { return c.forkClaimStep(s, cl, full) }); err != nil {
			return err
		}
	}
	return nil
}

// forkClaimStep claims the next slice of s's first full blocks for cl's
// child. A step that fails leaves cl as it was: its references and pins
// are rolled back with its transaction.
func (c *Cache) forkClaimStep(s *sequence, cl *forkClaim, full int) error {
	if c.poisoned != nil {
		return c.poisoned
	}
	child := cl.child
	c.begin(nil)
	c.tx.owner = child
	bud := c.newBudget()
	from := len(child.blocks)
	end, stop := from, false
	for end < full && (end == from || !bud.spent()) {
		if !c.settledIn(s.blocks[end], end, child.pinLo) {
			stop = true
			break
		}
		c.ref(s.blocks[end], false)
		bud.units += c.geom.slices
		end++
	}
	// The child comes to pin blocks [from, end) as the parent does.
	c.queuePins(child.span(), pinSpan{blocks: s.blocks[:end], lo: child.pinLo}, from, -1, -1)
	if err := c.execute(); err != nil {
		return err
	}
	child.blocks = append(child.blocks, s.blocks[from:end]...)
	cl.stop = stop
	// The child's tables are filled as its pins are taken (the last
	// step's syncTables sees only that step's).
	c.syncTables(child)
	c.statsUnchanged = false
	return nil
}

// settledIn reports whether every unit of block b, block i of a sequence,
// in the span from lo is a settled hit: on the GPU, with bytes, and no
// transfer bringing them.
func (c *Cache) settledIn(b int32, i int, lo []int32) bool {
	states := c.units.statesOf(b)
	for p, pg := range c.geom.pools {
		if i < int(lo[p]) {
			continue
		}
		for _, sl := range pg.slices {
			st := &states[sl]
			if st.tier != GPU || st.flags&unitUnwritten != 0 || st.loading() {
				return false
			}
		}
	}
	return true
}
