package kvcache

import (
	"fmt"
	"slices"
)

// Selection is what one model layer's sparse attention reads for one
// sequence in one step (block-sparse attention, MoBA): for each stored KV
// head, the token blocks of the sequence that any query head of its group
// selected. A server whose kernel selects per query head takes the union
// over each group (layout.Model.KVHeadOf gives a query head's KV head).
type Selection struct {
	// Layer is the model layer, in [0, Model.Layers).
	Layer int
	// Blocks[h] lists the block indices KV head h reads, in any order,
	// duplicates allowed; len(Blocks) must be the model's stored KV heads
	// (Model.StoredHeads: the KV heads, or 1 under MLA).
	Blocks [][]int
	// Keep adds this call's pins to those of the sequence's previous
	// SparseAccess calls instead of replacing them, and leaves their
	// restored units undeclared. A server that finds a unit to restore
	// (SparseUnit.From Dropped) at layer l rebuilds it from the block's
	// tokens, which needs their hidden state at layer l: it keeps layer
	// l's selection pinned while it runs those tokens through layers 0
	// to l-1 (a SparseAccess with Keep for each, then that layer's
	// kernel), then runs layer l. The pins of all of them last until the
	// next SparseAccess without Keep, Append, Truncate or Release.
	Keep bool
	// Queries is the range of token positions whose attention at this
	// layer reads the selection; it matters only for a sliding-window
	// layer, whose blocks wholly before the window of the range's first
	// token are not touched. The zero range means the tokens the
	// sequence's last Acquire or Append wrote (its last token when that
	// wrote none): an Append of several tokens keeps the window of the
	// first. A server that restores a unit runs that block's older tokens
	// through the layers below (see Keep) and names them here, so that
	// their windows are touched and pinned. Otherwise 0 <= Start < End <=
	// the sequence's length.
	Queries TokenRange
}

// SparseUnit is one unit a SparseAccess touched.
type SparseUnit struct {
	// Block is the logical block index in the sequence; KVHead the stored
	// KV head (-1 when the unit holds every head of its layer); Slice the
	// layout slice.
	Block, KVHead, Slice int
	// Pool and Slot locate the unit on the GPU after the call.
	Pool int
	Slot int32
	// From is where the unit was: GPU (a hit), a lower tier (onboarded by
	// this call) or Dropped (a fresh slot: the server must recompute this
	// unit's KV).
	From Tier
}

// SparseResult is the answer of SparseAccess. Reuse one across calls: its
// slices keep their capacity.
type SparseResult struct {
	// Units lists the touched units, by slice then block.
	Units []SparseUnit
	// Counts says what happened to them, in the words of Plan: Hits,
	// Onboarded, Computed (restored units the server recomputes;
	// Stats.RecomputedTokens counts their blocks' tokens), and the victims
	// Offloaded and Dropped to make room.
	Counts
	// BytesRead is the bytes of every touched unit: what attention reads.
	BytesRead int64
	// BytesOnboarded is the bytes copied to the GPU from lower tiers.
	BytesOnboarded int64
	// Executed is the batch of copies handed to the Mover.
	Executed []Copy
}

func (r *SparseResult) reset() {
	units, copies := r.Units[:0], r.Executed[:0]
	*r = SparseResult{Units: units, Executed: copies}
}

// SparseAccess answers, for one model layer of sequence id, which units the
// blocks sel selects touch, and brings the missing ones to the GPU: KV head
// h reads its unit of each block of sel.Blocks[h] (BSA), or its layer's
// unit (other layouts, whose units hold every head). Blocks wholly before
// the sliding window of the first query token (Selection.Queries) are not
// touched.
//
// Touched units on a lower tier are onboarded, dropped ones get fresh slots
// (the server recomputes them), evicting others as needed. A restored unit
// (SparseUnit.From Dropped) of a block other sequences share is visible to
// them at once: the server must write it with the layer's kernel of this
// step, before any of them reads it (as a forward pass writes a layer's KV
// before its attention reads it). The sequence's next SparseAccess, Append
// or Commit declares those writes done; a sequence that ends (Release,
// Abort) before that drops the units it alone still holds again, so a
// restore that never ran is never served. All touched units are pinned for
// the layer's attention: until the sequence's next SparseAccess (of any
// layer: it replaces these pins), Append, Truncate or Release, which unpins
// them from the last block to the first (tail first, like Release). So the
// GPU needs to hold one layer's selection per sequence, not a whole
// step's: a server runs, for each layer, SparseAccess for every sequence of
// the batch and then the layer's kernel. A Selection with Keep adds to the
// previous pins instead (see Selection.Keep: restoring a unit needs the
// block's earlier layers). res is overwritten.
//
// It returns an error wrapping ErrUnknownSequence, ErrInvalidRequest
// (len(sel.Blocks) is not the model's stored KV heads, or res is nil),
// ErrOutOfRange (bad layer, block or Queries), ErrNoSpace or ErrCopyFailed; nothing
// is then changed and the previous pins stay.
func (c *Cache) SparseAccess(id SeqID, sel Selection, res *SparseResult) (err error) {
	if err := c.lock("SparseAccess"); err != nil {
		return err
	}
	defer c.unlock(&err)
	c.applyFinished()
	s, err := c.lookupToChange(id)
	if err != nil {
		return err
	}
	keys, err := c.selectedUnits(s, sel)
	if err != nil {
		return err
	}
	if res == nil {
		return fmt.Errorf("%w: nil SparseResult", ErrInvalidRequest)
	}
	res.reset()
	c.begin(s)
	if !sel.Keep {
		c.queueStepUnpins(s)
	}
	for _, k := range keys {
		sl, b := int(k>>32), int(uint32(k))
		c.tx.addNeed(&c.units, c.units.id(s.blocks[b], sl))
	}
	if err := c.execute(); err != nil {
		return err
	}
	c.countLookups()
	res.Counts = c.countUnits()
	c.fillSparse(s, keys, res, sel.Keep)
	res.Executed = append(res.Executed, c.tx.batch...)
	c.syncTables(s)
	if c.poisoned != nil {
		c.voidRestores(keys)
	}
	return nil
}

// voidRestores marks unwritten the units of shared blocks that the
// committed SparseAccess restored (fresh slots for dropped units), when
// its commit met a policy's breach: the call returns ErrPolicy, so no
// server writes them, and no request may read them as the block's bytes.
func (c *Cache) voidRestores(keys []UnitID) {
	for i := range keys {
		n := &c.tx.needs[i]
		if n.act != actFresh || c.units.rec(n.u).node == nil || c.units.of(n.u).flags&unitUnwritten != 0 {
			continue
		}
		c.loseBytes(c.units.block(n.u))
		c.setUnwritten(n.u)
		c.emitMove(n.u, GPU, Dropped)
	}
}

// selectedUnits returns the units sel selects in s, as keys
// slice<<32 | block, sorted and without duplicates, skipping the blocks
// wholly before the sliding window of the first query token (see
// Selection.Queries); it returns an error for a bad layer, head count,
// block or query range.
func (c *Cache) selectedUnits(s *sequence, sel Selection) ([]UnitID, error) {
	g := c.geom
	if sel.Layer < 0 || sel.Layer >= g.layers {
		return nil, fmt.Errorf("%w: layer %d not in [0, %d)", ErrOutOfRange, sel.Layer, g.layers)
	}
	if len(sel.Blocks) != g.storedHeads {
		return nil, fmt.Errorf("%w: %d KV heads selected, the model stores %d", ErrInvalidRequest, len(sel.Blocks), g.storedHeads)
	}
	n := s.tokens.len()
	first := max(0, min(s.writeFrom, n-1))
	if q := sel.Queries; q != (TokenRange{}) {
		if q.Start < 0 || q.Start >= q.End || q.End > n {
			return nil, fmt.Errorf("%w: queries [%d, %d) of a sequence of %d tokens", ErrOutOfRange, q.Start, q.End, n)
		}
		first = q.Start
	}
	nb := len(s.blocks)
	kv := int(g.layerKV[sel.Layer])
	keys := c.scratch.units[:0]
	for h, blocks := range sel.Blocks {
		sl := g.sliceFor[kv*g.storedHeads+h]
		w := g.pools[g.slicePool[sl]].window
		from := 0
		if w > 0 && first+1 > w {
			from = (first + 1 - w) / g.blockTokens
		}
		for _, b := range blocks {
			if b < 0 || b >= nb {
				c.scratch.units = keys[:0]
				return nil, fmt.Errorf("%w: layer %d KV head %d selects block %d, sequence has %d", ErrOutOfRange, sel.Layer, h, b, nb)
			}
			if b < from {
				continue
			}
			keys = append(keys, UnitID(uint64(sl)<<32|uint64(b)))
		}
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	c.scratch.units = keys
	return keys, nil
}

// fillSparse fills res with the units of keys (the needs of the committed
// transaction, in the same order), makes them the step pins of s (added to
// the previous ones when keep is set), records the units it restored, and
// counts the tokens of the blocks it recomputes.
func (c *Cache) fillSparse(s *sequence, keys []UnitID, res *SparseResult, keep bool) {
	g := c.geom
	B := g.blockTokens
	recomputed := c.scratch.fresh[:0]
	pins := s.stepPins[:0]
	if keep {
		// A unit pinned by both calls is pinned twice and unpinned twice.
		pins = s.stepPins
	} else {
		// The previous call's restores were written by that layer's
		// kernel.
		s.restored = s.restored[:0]
	}
	for i, k := range keys {
		n := &c.tx.needs[i]
		sl, b := int(k>>32), int(uint32(k))
		p := g.poolOfSlice(sl)
		ub := g.pools[p].unitBytes
		from := GPU
		switch n.act {
		case actHit:
		case actOnboard:
			from = n.from
			res.BytesOnboarded += ub
		case actRewrite:
			// Its load failed: the layer's kernel restores it now, as
			// a dropped unit.
			c.clearUnwritten(n.u)
			c.gainBytes(c.units.block(n.u))
			c.emitMove(n.u, Dropped, GPU)
			from = Dropped
			recomputed = append(recomputed, b)
			s.restored = append(s.restored, n.u)
		default:
			from = Dropped
			recomputed = append(recomputed, b)
			s.restored = append(s.restored, n.u)
		}
		if from == Dropped && c.units.rec(n.u).node == nil {
			s.undeclare(b * B)
		}
		res.BytesRead += ub
		res.Units = append(res.Units, SparseUnit{Block: b, KVHead: int(g.sliceHead[sl]), Slice: sl, Pool: p, Slot: n.slot, From: from})
		pins = append(pins, n.u)
	}
	s.stepPins = pins
	// A block's recompute counts its tokens once per call: the server
	// rebuilds the layer's KV of a block from its tokens in one pass,
	// whatever the number of its heads (units) that were dropped.
	slices.Sort(recomputed)
	recomputed = slices.Compact(recomputed)
	for _, b := range recomputed {
		c.st.recomputed += int64(min((b+1)*B, s.tokens.len()) - b*B)
	}
	c.scratch.fresh = recomputed
}
