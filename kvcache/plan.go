package kvcache

import (
	"slices"

	"github.com/kvtier/kvtier/radix"
)

// Plan tells the server what an operation did and what it must do next.
// Copies listed in a Plan were already executed through the Mover (or, with
// no Mover, only counted); Compute lists the tokens the server must compute
// to fill the fresh slots the sequence's block tables now point to.
type Plan struct {
	// Seq is the sequence the plan is for.
	Seq SeqID
	// Tokens is the number of tokens the sequence holds after the call.
	Tokens int
	// Pending is, for a sparse Acquire, the prompt tokens not taken from
	// the cache: the server feeds them through Append, block by block.
	Pending int
	// ReusedTokens counts tokens of cached blocks that need no compute:
	// every unit the sequence pins was on the GPU or copied from the CPU.
	ReusedTokens int
	// HitUnits were already on the GPU; OnboardedUnits were copied from the
	// CPU; CopiedUnits were filled by a copy-on-write copy; FreshUnits got
	// a slot the server must fill by computing. A block that is recomputed
	// (a needed unit of it had no bytes, see Compute) is never copied
	// into: its units on the CPU, or whose copy-on-write source they are,
	// count as FreshUnits (the CPU copies are released), while its units
	// already on the GPU count as HitUnits (kept pinned: the recompute
	// writes the same bytes into them).
	HitUnits, OnboardedUnits, CopiedUnits, FreshUnits int
	// OffloadedUnits and DroppedUnits count the victims evicted to make
	// room (GPU victims offloaded to the CPU; GPU or CPU victims dropped).
	OffloadedUnits, DroppedUnits int
	// Compute lists the token ranges the server must compute, in order:
	// new tokens and the tokens of cached blocks a unit of which was
	// dropped (recompute).
	Compute []TokenRange
	// RecomputeTokens counts the tokens of Compute that were cached once
	// and must be recomputed because a unit was dropped.
	RecomputeTokens int
	// BeingWrittenTokens counts, for Acquire, the prompt tokens past the
	// cached prefix whose blocks other live sequences are writing now
	// (computed, not yet committed). They are not shared before their
	// commit, so this request computes its own copy (in Compute, or in
	// Pending for a sparse request); a scheduler that would rather reuse
	// them can Release or Abort it and retry after the writer's next step.
	BeingWrittenTokens int
	// Copies is the batch handed to the Mover, in order: victims'
	// offloads, onboards and copy-on-write copies.
	Copies []Copy
}

// scratch holds buffers reused across operations.
type scratch struct {
	nodes  []*radix.Node[int32]
	lo     []int32
	fresh  []int
	blocks []int32
	units  []UnitID
	lost   []Copy
	hashes []uint64
	pools  []bool
	copies []int
}

// queuePinDiff queues into the transaction what takes a sequence from
// pinning, in pool p, blocks oldBlocks[oldLo[p]:oldHi] to pinning
// newBlocks[newLo[p]:newHi]. Unpins are queued last block first, so that
// recency policies (whose Unpin counts as the latest use) evict a chain's
// tail first. A new block equal to cowDst is filled by copying cowSrc. The
// indices of blocks that get fresh (to compute) units are left in
// c.scratch.fresh, ascending; the other units those blocks newly pin are
// not copied (see recomputeBlock).
func (c *Cache) queuePinDiff(oldBlocks, oldLo []int32, oldHi int, newBlocks, newLo []int32, newHi int, cowDst, cowSrc int32) {
	t := &c.tx
	in := func(blocks, lo []int32, hi, p, i int) bool {
		return i < len(blocks) && i >= int(lo[p]) && i < hi
	}
	n := max(len(oldBlocks), len(newBlocks))
	for i := n - 1; i >= 0; i-- {
		for p := range c.pools {
			if !in(oldBlocks, oldLo, oldHi, p, i) {
				continue
			}
			if in(newBlocks, newLo, newHi, p, i) && oldBlocks[i] == newBlocks[i] {
				continue
			}
			base := c.units(oldBlocks[i])
			for _, sl := range c.pools[p].slices {
				t.unpins = append(t.unpins, base|UnitID(sl))
			}
		}
	}
	c.scratch.fresh = c.scratch.fresh[:0]
	for i := range newBlocks {
		fresh := false
		first := len(t.needs)
		for p := range c.pools {
			if !in(newBlocks, newLo, newHi, p, i) {
				continue
			}
			if in(oldBlocks, oldLo, oldHi, p, i) && oldBlocks[i] == newBlocks[i] {
				continue
			}
			b := newBlocks[i]
			base := c.units(b)
			for _, sl := range c.pools[p].slices {
				var a action
				if b == cowDst {
					a = c.addCopyNeed(base|UnitID(sl), c.unit(cowSrc, sl))
				} else {
					a = c.addNeed(base | UnitID(sl))
				}
				fresh = fresh || a == actFresh
			}
		}
		if fresh {
			c.scratch.fresh = append(c.scratch.fresh, i)
			c.recomputeBlock(t.needs[first:])
		}
	}
}

// recomputeBlock adjusts the needs of one block that will be recomputed
// (one of its needed units has no bytes). The server then recomputes the
// block's tokens through every layer and writes all of its units, so bytes
// copied into them would be overwritten: units on the CPU are not onboarded
// but get fresh slots (their CPU copies are released), and copy-on-write
// copies are not made. Units already on the GPU stay pinned where they are
// (hits): the recompute rewrites the same bytes into them, which costs no
// slot and no copy, and other sequences may be reading them meanwhile.
func (c *Cache) recomputeBlock(needs []need) {
	for i := range needs {
		switch needs[i].act {
		case actOnboard:
			needs[i].act = actRecompute
		case actCopy:
			needs[i].act = actFresh
		}
	}
}

// fillPlan counts the committed transaction into p and the stats.
func (c *Cache) fillPlan(p *Plan) {
	t := &c.tx
	for i := range t.needs {
		switch t.needs[i].act {
		case actHit:
			p.HitUnits++
		case actOnboard:
			p.OnboardedUnits++
		case actCopy:
			p.CopiedUnits++
		case actFresh, actRecompute:
			p.FreshUnits++
		}
	}
	p.OffloadedUnits = 0
	for _, v := range t.gpuVictims {
		if v.to >= 0 {
			p.OffloadedUnits++
		} else {
			p.DroppedUnits++
		}
	}
	p.DroppedUnits += len(t.cpuVictims)
	if len(t.batch) > 0 {
		p.Copies = slices.Clone(t.batch)
	}
}

// addRange appends [start, end) to rs, merging it with the last range when
// they touch.
func addRange(rs []TokenRange, start, end int) []TokenRange {
	if start >= end {
		return rs
	}
	if n := len(rs); n > 0 && rs[n-1].End >= start {
		rs[n-1].End = max(rs[n-1].End, end)
		return rs
	}
	return append(rs, TokenRange{Start: start, End: end})
}

// wantLo fills lo with the first block s pins in each pool when its next
// write starts at token writeFrom.
func (c *Cache) wantLo(lo []int32, s *sequence) []int32 {
	lo = lo[:0]
	for p := range c.pools {
		var b int
		if s.sparse {
			b = s.writeFrom / c.blockTokens
		} else if w := c.pools[p].window; w > 0 && s.writeFrom+1 > w {
			b = (s.writeFrom + 1 - w) / c.blockTokens
		}
		lo = append(lo, int32(b))
	}
	return lo
}
