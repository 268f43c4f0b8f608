package kvcache

import (
	"fmt"

	"github.com/kvtier/kvtier/radix"
)

// The life of a block. A sequence writes only into its private blocks: the
// blocks of an Acquire's prompt past the cached prefix, the blocks an Append
// fills, copy-on-write copies, and private copies of cached blocks it
// recomputes (recomputeCopy). A private block is invisible to every other
// sequence. It becomes shared when the server declares its bytes written
// (Commit, or implicitly the sequence's next Append or Fork): it is then
// inserted into the prefix tree (a BlockStored event), or, when another
// sequence committed an equal block first, merged into that block
// (mergeBlock). A sequence that ends (Release, Abort) or truncates before
// that discards its private blocks: nothing it had not declared written is
// ever read by anyone else. So every unit of a tree block that holds bytes
// holds written KV, and a request never reuses a block whose prefill was
// dropped, failed or is still running in another chunk.
//
// A request whose prompt continues into blocks another live sequence is
// writing computes its own copy (nothing is shared before it is written);
// Plan.BeingWrittenTokens and Admission.BeingWrittenTokens tell a scheduler
// how many of its tokens it could reuse by waiting for that commit. The
// private full blocks of live sequences are indexed by chain hash for that
// answer (writing).

// Commit declares that the KV of the first upTo tokens of sequence id is
// written (every layer), so the full blocks among them become reusable by
// other requests: each is inserted into the prefix tree, or adopted from it
// when an equal block was committed first (the sequence's table may then
// point at that block's slots). A server calls it after each chunk of a
// chunked prefill, and before Release when it wants the tokens of the
// sequence's last step shared. Append and Fork commit every token the
// sequence held before them without being asked; Release and Abort commit
// nothing. Committing fewer tokens than already committed does nothing.
//
// With a TransferEngine, a block whose units' slots are still being
// vacated (a victim's bytes moving down out of them), or whose equal
// cached block is still being loaded, is committed when those transfers
// finish, by the calls that apply them (a step's worth of blocks per
// call): until then other requests do not reuse it, and a Release or
// Abort of the sequence before then discards it like an uncommitted
// block. The sequence's Readiness counts such a commit as pending until
// it is done, so a server that wants the blocks shared waits for Pending
// 0 (WaitReady with layer -1) before it releases the sequence.
//
// It returns an error wrapping ErrUnknownSequence, or ErrOutOfRange when
// upTo is negative or more than the sequence holds.
func (c *Cache) Commit(id SeqID, upTo int) (err error) {
	if err := c.lock("Commit"); err != nil {
		return err
	}
	s, err := c.lookupToChange(id)
	if err == nil && (upTo < 0 || upTo > s.tokens.len()) {
		err = fmt.Errorf("%w: commit %d tokens of a sequence of %d", ErrOutOfRange, upTo, s.tokens.len())
	}
	if err == nil && c.longCommit(s, upTo) {
		return c.commitInSteps("Commit", s, upTo, &err)
	}
	if err == nil {
		c.commitThrough(s, upTo)
	}
	c.unlock(&err)
	return err
}

// longCommit reports whether committing s through token upTo takes more
// than a step (see slices.go).
func (c *Cache) longCommit(s *sequence, upTo int) bool {
	return c.isLong((upTo/c.geom.blockTokens - s.firstPrivate) * c.geom.slices)
}

// commitInSteps commits s through token upTo in steps, for method call,
// which holds the lock: the units s owes are declared written now, s is
// marked busy (other calls on it wait, see waitIdle), the lock is released
// (its unlock reports *err), and the blocks are committed a slice at a
// time, as a chunked prefill's commits would be. A commit that has to
// wait for a transfer stops there (it is retried as transfers finish, as
// a one-step commit's is). It returns the first error.
func (c *Cache) commitInSteps(call string, s *sequence, upTo int, err *error) error {
	c.rewritten(s, upTo)
	s.restored = s.restored[:0]
	s.busy = true
	c.long++
	c.unlock(err)
	for done := *err != nil; !done; {
		if serr := c.step(call, func() error {
			full := upTo / c.geom.blockTokens
			next := min(full, s.firstPrivate+c.commitBudget())
			c.commitBlocks(s, next*c.geom.blockTokens)
			_, waits := c.xfer.declared[s]
			if waits {
				// The rest waits with it.
				s.declaredUpTo = max(s.declaredUpTo, upTo)
			}
			done = waits || s.firstPrivate >= full || c.poisoned != nil
			return nil
		}); serr != nil {
			*err = serr
			done = true
		}
	}
	// The sequence is idle again, whatever happened.
	c.lockWait()
	s.busy = false
	c.long--
	c.idle.Broadcast()
	c.mu.Unlock()
	return *err
}

// Abort ends sequence id whose pending computation will not run (the
// forward pass failed, the client went away before its prefill): its
// committed blocks stay cached, everything it had not committed is
// discarded and never shared. Release does the same for a sequence that
// finished; they differ in what Stats counts (Stats.Aborted).
//
// It returns an error wrapping ErrUnknownSequence for an id that is not
// live.
func (c *Cache) Abort(id SeqID) (err error) {
	return c.endSequence("Abort", id, true)
}

// commitThrough commits, in order, the private full blocks of s below
// token upTo (see the top of this file), and reports whether it committed
// any.
func (c *Cache) commitThrough(s *sequence, upTo int) (committed bool) {
	c.rewritten(s, upTo)
	s.restored = s.restored[:0]
	return c.commitBlocks(s, upTo)
}

// commitBlocks is commitThrough without declaring s's owed units written:
// a commit that waited for a transfer is retried with it (the server
// declared the writes it had made then, not those it learns it owes
// since).
func (c *Cache) commitBlocks(s *sequence, upTo int) (committed bool) {
	full := upTo / c.geom.blockTokens
	for i := s.firstPrivate; i < full; i++ {
		b := s.blocks[i]
		if c.units.blk(b).node != nil {
			continue
		}
		var parent *radix.Node[int32]
		if i > 0 {
			parent = c.units.blk(s.blocks[i-1]).node
		}
		if c.engine != nil && !c.settled(s, i, parent) {
			// A unit of the block, or of the equal block cached
			// already, is still in flight: the commit waits for it
			// (poll and unlock come back to it).
			s.firstPrivate = i
			s.declaredUpTo = max(s.declaredUpTo, upTo)
			c.xfer.declared[s] = struct{}{}
			return committed
		}
		c.unindexWriting(b)
		c.commitBlock(s, i, parent)
		committed = true
	}
	s.firstPrivate = max(s.firstPrivate, full)
	return committed
}

// settled reports whether private block i of s can be committed now: none
// of its units, nor of the equal block already cached under parent (which
// it would merge into), is in flight or waiting to be rewritten.
func (c *Cache) settled(s *sequence, i int, parent *radix.Node[int32]) bool {
	if c.unsettled(s.blocks[i]) {
		return false
	}
	B := c.geom.blockTokens
	n, err := c.tree.Child(parent, s.keys, s.tokens.span(i*B, (i+1)*B), s.extra)
	return err != nil || n == nil || !c.unsettled(n.Value)
}

// commitGoesOn reports whether the declared commit of s goes on without
// the server (see Readiness.Pending): the block it stopped at, or the
// equal block cached already, has a unit in flight, or neither is
// unsettled any more (the commit stopped for want of budget). A block
// held up only by unwritten units waits for the server to write them.
func (c *Cache) commitGoesOn(s *sequence) bool {
	B := c.geom.blockTokens
	i := s.firstPrivate
	if i >= len(s.blocks) || i >= s.declaredUpTo/B {
		return false
	}
	var parent *radix.Node[int32]
	if i > 0 {
		parent = c.units.blk(s.blocks[i-1]).node
	}
	blocks := [2]int32{s.blocks[i], -1}
	if n, err := c.tree.Child(parent, s.keys, s.tokens.span(i*B, (i+1)*B), s.extra); err == nil && n != nil {
		blocks[1] = n.Value
	}
	settled := true
	for _, b := range blocks {
		if b < 0 {
			continue
		}
		for sl := range c.geom.slices {
			st := c.units.of(c.units.id(b, sl))
			if st.busy > 0 {
				return true
			}
			settled = settled && st.flags&^unitClaimed == 0
		}
	}
	return settled
}

// unsettled reports whether a unit of block b is in flight or unwritten.
func (c *Cache) unsettled(b int32) bool {
	for sl := range c.geom.slices {
		if st := c.units.of(c.units.id(b, sl)); st.busy > 0 || st.flags&^unitClaimed != 0 {
			return true
		}
	}
	return false
}

// rewritten declares written the units s owed (see Readiness and
// actRewrite) whose blocks lie wholly below token upTo or end there with
// the sequence: they hold bytes again.
func (c *Cache) rewritten(s *sequence, upTo int) {
	if len(s.rewrite) == 0 {
		return
	}
	B := c.geom.blockTokens
	keep := s.rewrite[:0]
	for _, u := range s.rewrite {
		i, ok := c.indexIn(s, u)
		switch {
		case !ok || c.units.of(u).flags&unitUnwritten == 0:
			// Not the sequence's any more, or rewritten by another.
		case min((i+1)*B, s.tokens.len()) <= upTo:
			c.clearUnwritten(u)
			c.gainBytes(c.units.block(u))
			c.emitMove(u, Dropped, GPU)
		default:
			keep = append(keep, u)
		}
	}
	s.rewrite = keep
}

// commitBlock inserts full block i of s into the tree under parent (the
// node of block i-1, nil for the first block). When an equal block is
// cached there already (another sequence committed the same tokens first,
// or s recomputed a cached block), s adopts it and its own copy is merged
// away (mergeBlock).
func (c *Cache) commitBlock(s *sequence, i int, parent *radix.Node[int32]) {
	B := c.geom.blockTokens
	n, created, err := c.tree.InsertChild(parent, s.keys, s.tokens.span(i*B, (i+1)*B), s.extra)
	if err != nil {
		// Unreachable: the parent is live (referenced by s), the keys
		// are s's and the extra keys were validated by Acquire.
		return
	}
	b := s.blocks[i]
	if created {
		n.Value = b
		c.units.blk(b).node = n
		c.st.stored++
		c.emitBlock(BlockStored, b, GPU)
		// A unit the block lost while it was private (a windowed
		// layer's unit out of the window, evicted while the commit
		// waited for a transfer) made no event: a router learns it
		// now, as if it had left the GPU after the store.
		for sl := range c.geom.slices {
			u := c.units.id(b, sl)
			st := c.units.of(u)
			to := st.tier
			if st.flags&unitUnwritten != 0 {
				to = Dropped
			}
			if to != GPU {
				c.emitMove(u, GPU, to)
			}
		}
		c.queueBackups(b)
		return
	}
	c.mergeBlock(s, i, n)
	c.queueBackups(n.Value)
}

// chainState returns the hash chain's state after block i-1 of s, from
// which block i is hashed.
func (c *Cache) chainState(s *sequence, i int) radix.State {
	h := c.tree.Hasher()
	if i == 0 {
		return h.Start(s.keys)
	}
	r := c.units.blk(s.blocks[i-1])
	if r.node != nil {
		return r.node.State()
	}
	return h.Resume(s.keys, r.hash, i)
}

// indexWriting records the chain hashes of the private full blocks of s
// from block first to the last full one that are not recompute copies
// (their twin is in the tree already).
func (c *Cache) indexWriting(s *sequence, first int) {
	c.indexWritingRange(s, first, s.tokens.len()/c.geom.blockTokens)
}

// indexWritingRange is indexWriting of the full blocks of s in [first,
// end) (the blocks before first are indexed or committed).
func (c *Cache) indexWritingRange(s *sequence, first, end int) {
	full := min(end, s.tokens.len()/c.geom.blockTokens)
	if first >= full {
		return
	}
	st := c.chainState(s, first)
	B := c.geom.blockTokens
	for i := first; i < full; i++ {
		b := s.blocks[i]
		r := c.units.blk(b)
		if r.node != nil {
			st = r.node.State()
			continue
		}
		if r.twin >= 0 || r.indexed {
			st = c.tree.Hasher().Resume(s.keys, r.hash, i+1)
			continue
		}
		var one [1]uint64
		hs, next, err := c.tree.Hasher().Append(one[:0], st, s.tokens.span(i*B, (i+1)*B), s.extra)
		if err != nil || len(hs) != 1 {
			return // unreachable: the extra keys were validated by Acquire
		}
		st = next
		r.hash, r.indexed = hs[0], true
		c.writing[hs[0]]++
	}
}

// unindexWriting removes private block b from the index of blocks being
// written, if it is there.
func (c *Cache) unindexWriting(b int32) {
	r := c.units.blk(b)
	if !r.indexed {
		return
	}
	r.indexed = false
	if c.writing[r.hash]--; c.writing[r.hash] <= 0 {
		delete(c.writing, r.hash)
	}
}

// beingWritten returns how many tokens of the full blocks of tokens from
// block matched on (continuing the chain st of the matched prefix) live
// sequences are writing now, counted up to the first block nobody writes.
func (c *Cache) beingWritten(st radix.State, tokens []uint32, extra []radix.ExtraKey, matched int) int {
	B := c.geom.blockTokens
	if len(c.writing) == 0 || (matched+1)*B > len(tokens) {
		return 0
	}
	hs, _, err := c.tree.Hasher().Append(c.scratch.hashes[:0], st, tokens[matched*B:len(tokens)/B*B], extra)
	c.scratch.hashes = hs[:0]
	if err != nil {
		return 0
	}
	n := 0
	for _, h := range hs {
		if c.writing[h] == 0 {
			break
		}
		n += B
	}
	return n
}

// matchState returns the chain state after the matched nodes (the empty
// sequence with keys k when none matched).
func (c *Cache) matchState(k radix.Keys, nodes []*radix.Node[int32]) radix.State {
	if len(nodes) == 0 {
		return c.tree.Hasher().Start(k)
	}
	return nodes[len(nodes)-1].State()
}
