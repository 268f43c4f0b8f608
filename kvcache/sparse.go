package kvcache

import (
	"fmt"
	"slices"
)

// SparseUnit is one unit a SparseAccess touched.
type SparseUnit struct {
	// Block is the logical block index in the sequence; KVHead the stored
	// KV head (-1 when the unit holds every head of its layer); Slice the
	// layout slice.
	Block, KVHead, Slice int
	// Pool and Slot locate the unit on the GPU after the call.
	Pool int
	Slot int32
	// From is where the unit was: GPU (a hit), CPU (onboarded by this call)
	// or Dropped (a fresh slot: the server must recompute this unit's KV).
	From Tier
}

// SparseResult is the answer of SparseAccess. Reuse one across calls: its
// slices keep their capacity.
type SparseResult struct {
	// Units lists the touched units, by slice then block.
	Units []SparseUnit
	// Hits counts units already on the GPU; Misses the others, of which
	// Onboarded were copied from the CPU and Recompute got fresh slots
	// (Stats.RecomputedTokens counts their blocks' tokens).
	Hits, Misses, Onboarded, Recompute int
	// BytesRead is the bytes of every touched unit: what attention reads.
	BytesRead int64
	// BytesOnboarded is the bytes copied from the CPU.
	BytesOnboarded int64
	// OffloadedUnits and DroppedUnits count the victims evicted for room.
	OffloadedUnits, DroppedUnits int
	// Copies is the batch handed to the Mover.
	Copies []Copy
}

func (r *SparseResult) reset() {
	units, copies := r.Units[:0], r.Copies[:0]
	*r = SparseResult{Units: units, Copies: copies}
}

// SparseAccess answers, for one model layer of sequence id, which units the
// blocks selected by each query head touch, and brings the missing ones to
// the GPU. heads[q] lists the token blocks query head q selected (block
// indices of the sequence, duplicates allowed); a head reads its KV head's
// unit (BSA) or its layer's unit (other layouts). Blocks wholly before a
// sliding window are not touched.
//
// Touched units on the CPU are onboarded, dropped ones get fresh slots (the
// server recomputes them), evicting others as needed. A restored unit
// (SparseUnit.From Dropped) of a block other sequences share is visible to
// them at once: the server must write it with the layer's kernel of this
// step, before any of them reads it (as a forward pass writes a layer's KV
// before its attention reads it). The sequence's next SparseAccess, Append
// or Commit declares those writes done; a sequence that ends (Release,
// Abort) before that drops the units it alone still holds again, so a
// restore that never ran is never served. All touched units are
// pinned for the layer's attention: until the sequence's next SparseAccess
// (of any layer: it replaces these pins), Append, Truncate or Release,
// which unpins them from the last block to the first (tail first, like
// Release). So the GPU needs to hold one layer's selection per sequence,
// not a whole step's: a server runs, for each layer, SparseAccess for every
// sequence of the batch and then the layer's kernel. res is overwritten.
//
// It returns an error wrapping ErrUnknownSequence, ErrInvalidRequest
// (len(heads) is not the model's query heads, or res is nil), ErrOutOfRange
// (bad layer or block), ErrNoSpace or ErrCopyFailed; nothing is then changed
// and the previous pins stay.
func (c *Cache) SparseAccess(id SeqID, layer int, heads [][]int64, res *SparseResult) (err error) {
	if err := c.lock("SparseAccess"); err != nil {
		return err
	}
	defer c.unlock(&err)
	s, err := c.lookupToChange(id)
	if err != nil {
		return err
	}
	if layer < 0 || layer >= c.layers {
		return fmt.Errorf("%w: layer %d not in [0, %d)", ErrOutOfRange, layer, c.layers)
	}
	if len(heads) != c.queryHeads {
		return fmt.Errorf("%w: %d query heads selected, model has %d", ErrInvalidRequest, len(heads), c.queryHeads)
	}
	if res == nil {
		return fmt.Errorf("%w: nil SparseResult", ErrInvalidRequest)
	}
	nb := int64(len(s.blocks))
	kv := int(c.layerKV[layer])
	B := c.blockTokens
	keys := c.scratch.units[:0]
	for q, blocks := range heads {
		h := q / c.headGroup
		sl := c.sliceFor[kv*c.storedHeads+h]
		w := c.pools[c.slicePool[sl]].window
		from := 0
		if w > 0 && len(s.tokens) > w {
			from = (len(s.tokens) - w) / B
		}
		for _, b := range blocks {
			if b < 0 || b >= nb {
				c.scratch.units = keys[:0]
				return fmt.Errorf("%w: layer %d query head %d selects block %d, sequence has %d", ErrOutOfRange, layer, q, b, nb)
			}
			if int(b) < from {
				continue
			}
			keys = append(keys, UnitID(uint64(sl)<<32|uint64(b)))
		}
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	c.scratch.units = keys
	res.reset()
	c.tx.reset()
	c.tx.seq = s
	c.queueStepUnpins(s)
	for _, k := range keys {
		sl, b := int(k>>32), int(uint32(k))
		c.addNeed(c.unit(s.blocks[b], sl))
	}
	if err := c.runTxn(); err != nil {
		return err
	}
	c.countAccess()
	recomputed := c.scratch.fresh[:0]
	pins := s.stepPins[:0]
	// The previous call's restores were written by that layer's kernel.
	s.restored = s.restored[:0]
	for i, k := range keys {
		n := &c.tx.needs[i]
		sl, b := int(k>>32), int(uint32(k))
		p := int(c.slicePool[sl])
		ub := c.pools[p].unitBytes
		from := GPU
		switch n.act {
		case actHit:
			res.Hits++
		case actOnboard:
			from = CPU
			res.Misses++
			res.Onboarded++
			res.BytesOnboarded += ub
		default:
			from = Dropped
			res.Misses++
			res.Recompute++
			recomputed = append(recomputed, b)
			s.restored = append(s.restored, n.u)
		}
		res.BytesRead += ub
		res.Units = append(res.Units, SparseUnit{Block: b, KVHead: c.sliceHead[sl], Slice: sl, Pool: p, Slot: n.slot, From: from})
		pins = append(pins, n.u)
	}
	s.stepPins = pins
	// A block's recompute counts its tokens once per call: the server
	// rebuilds the layer's KV of a block from its tokens in one pass,
	// whatever the number of its heads (units) that were dropped.
	slices.Sort(recomputed)
	recomputed = slices.Compact(recomputed)
	for _, b := range recomputed {
		c.st.recomputed += int64(min((b+1)*B, len(s.tokens)) - b*B)
	}
	c.scratch.fresh = recomputed
	for _, v := range c.tx.gpuVictims {
		if v.to >= 0 {
			res.OffloadedUnits++
		} else {
			res.DroppedUnits++
		}
	}
	res.DroppedUnits += len(c.tx.cpuVictims)
	res.Copies = append(res.Copies, c.tx.batch...)
	c.collectPending()
	return nil
}
