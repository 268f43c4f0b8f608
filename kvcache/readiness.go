package kvcache

import (
	"context"
	"fmt"
	"slices"
)

// Readiness is what the kernels of a sequence may read now, with a
// TransferEngine: the layers whose units are all in place, and the tokens
// to recompute because a load failed.
type Readiness struct {
	// Layers reports, for each model layer, whether every unit of the
	// sequence that the layer reads is readable: no load, copy or move
	// that brings it is still in flight. A server runs layer l's
	// attention once Layers[l] is true, so it can overlap it with the
	// loads of the layers after it (the cache starts an operation's
	// transfers layer by layer).
	Layers []bool
	// Pending counts the unfinished transfers the sequence waits on, and
	// one more while a Commit of the sequence goes on without the server:
	// it waits for transfers that vacate its blocks' slots (or load the
	// equal block it merges into), or it goes on a step's worth of blocks
	// per call once they are done. A server that wants its committed
	// blocks shared before it releases the sequence waits for Pending 0
	// (WaitReady with layer -1). A Commit held up by units the server
	// must write first (Recompute, or units a SparseAccess restored) is
	// not counted: the server's next Commit or Append declares them.
	Pending int
	// Recompute lists the token ranges of the sequence's blocks whose
	// loads or copies failed: the server computes them into the slots its
	// block tables give (every layer), then declares them written (the
	// sequence's next Append, or a Commit that covers them). Every call
	// reports every range the sequence still owes, from the call that
	// finds the failure until the server declares it written, so a
	// scheduler that polls Readiness and a worker that waits in WaitReady
	// both see it; a server that has computed a range but not declared it
	// yet sees it again and need not compute it twice. Until then no
	// other request reuses those blocks. The block tables cover what the
	// recompute reads: the window of its first token, in every layer.
	//
	// A sparse sequence (Request.Sparse) pins only what its SparseAccess
	// calls touched, so it cannot recompute a whole block in every layer:
	// a range names blocks in which a unit such a call onboarded (From a
	// lower tier) did not arrive, and the server rewrites the units its
	// calls onboarded in those blocks, at their layers. A unit rewritten
	// once may be reported again while its block is (it may have been
	// moved down, loaded back and failed again since).
	Recompute []TokenRange
}

// Readiness fills r with what sequence id's kernels may read now, after
// applying up to a step's worth of the moves of finished transfers (see
// Poll). A transfer whose moves are not all applied still counts in
// Pending and keeps its layers unready; Completed signals again while
// moves are left, so a server that calls Readiness (or Poll) whenever it
// signals sees every layer become ready. WaitReady does this loop. Without
// a TransferEngine every layer is always ready. Reuse r across calls: its
// slices keep their capacity.
//
// It returns an error wrapping ErrUnknownSequence for an id that is not
// live, ErrInvalidRequest for a nil r, and ErrPolicy when a policy broke
// its contract, here or in the transfers it applied first (see Poll).
func (c *Cache) Readiness(id SeqID, r *Readiness) (err error) {
	if r == nil {
		return fmt.Errorf("%w: nil Readiness", ErrInvalidRequest)
	}
	if err := c.lock("Readiness"); err != nil {
		return err
	}
	defer c.unlock(&err)
	c.poll()
	s, err := c.lookup(id)
	if err != nil {
		return err
	}
	c.readiness(s, r)
	return nil
}

// readiness computes r for s (Cache.mu held): the layers its unfinished
// waits block, and the blocks of the units it owes (s.rewrite): those
// whose transfers failed, until it declares them written.
func (c *Cache) readiness(s *sequence, r *Readiness) {
	g := c.geom
	r.Layers = r.Layers[:0]
	for range g.layers {
		r.Layers = append(r.Layers, true)
	}
	r.Pending = len(s.waits)
	if _, ok := c.xfer.declared[s]; ok && c.commitGoesOn(s) {
		r.Pending++
	}
	r.Recompute = r.Recompute[:0]
	for _, id := range s.waits {
		tr := c.xfer.byID[id]
		for l := range g.layers {
			if tr.kvLayer < 0 || g.layerKV[l] == tr.kvLayer {
				r.Layers[l] = false
			}
		}
	}
	if len(s.failed) > 0 {
		owed := len(s.rewrite)
		for _, u := range s.failed {
			if _, ok := c.indexIn(s, u); ok && c.units.of(u).flags&unitUnwritten != 0 {
				s.rewrite = append(s.rewrite, u)
			}
		}
		clear(s.failed)
		s.failed = s.failed[:0]
		if len(s.rewrite) > owed {
			// A unit reported twice (it failed, was rewritten by another
			// sequence, and failed again) is owed once.
			slices.Sort(s.rewrite)
			s.rewrite = slices.Compact(s.rewrite)
		}
	}
	if len(s.rewrite) == 0 {
		return
	}
	// Every call reports all the sequence owes, not only what failed since
	// the last one: a scheduler that polls Readiness and a worker that
	// waits in WaitReady must both see the ranges until they are written.
	owed := c.scratch.fresh[:0]
	for _, u := range s.rewrite {
		if i, ok := c.indexIn(s, u); ok && c.units.of(u).flags&unitUnwritten != 0 {
			owed = append(owed, i)
		}
	}
	slices.Sort(owed)
	B, n := g.blockTokens, s.tokens.len()
	for _, i := range slices.Compact(owed) {
		r.Recompute = addRange(r.Recompute, i*B, min((i+1)*B, n))
	}
	c.scratch.fresh = owed[:0]
}

// indexIn returns the index of u's block in s, if u is a unit of one of
// s's blocks.
func (c *Cache) indexIn(s *sequence, u UnitID) (int, bool) {
	if !c.units.current(u, c.geom.slices) {
		return 0, false
	}
	i := int(c.units.rec(u).index)
	return i, i < len(s.blocks) && s.blocks[i] == c.units.block(u)
}

// WaitReady blocks until layer (every layer when layer is negative) of
// sequence id is ready (see Readiness), or ctx is done, and returns the
// ranges to recompute that the wait found, sorted and merged (a block
// whose transfers of several layers failed appears once). It polls as
// transfers finish.
func (c *Cache) WaitReady(ctx context.Context, id SeqID, layer int) ([]TokenRange, error) {
	if layer >= c.geom.layers {
		return nil, fmt.Errorf("%w: layer %d not in [0, %d)", ErrOutOfRange, layer, c.geom.layers)
	}
	var r Readiness
	var recompute []TokenRange
	for {
		var next <-chan struct{}
		if c.engine != nil {
			next = c.xfer.inbox.next()
		}
		if err := c.Readiness(id, &r); err != nil {
			return recompute, err
		}
		recompute = mergeRanges(recompute, r.Recompute)
		ready := r.Pending == 0
		if layer >= 0 {
			ready = r.Layers[layer]
		}
		if ready {
			return recompute, nil
		}
		select {
		case <-ctx.Done():
			return recompute, ctx.Err()
		case <-next:
		}
	}
}

// mergeRanges adds the ranges of add to rs and returns them sorted, with
// overlapping or touching ranges merged.
func mergeRanges(rs, add []TokenRange) []TokenRange {
	if len(add) == 0 {
		return rs
	}
	rs = append(rs, add...)
	slices.SortFunc(rs, func(a, b TokenRange) int { return a.Start - b.Start })
	out := rs[:1]
	for _, r := range rs[1:] {
		if last := &out[len(out)-1]; r.Start <= last.End {
			last.End = max(last.End, r.End)
		} else {
			out = append(out, r)
		}
	}
	return out
}
