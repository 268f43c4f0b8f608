package kvcache

import "github.com/kvtier/kvtier/radix"

// TokenRange is the half-open token interval [Start, End) of a sequence.
type TokenRange struct {
	Start, End int
}

// Len returns the number of tokens in r.
func (r TokenRange) Len() int { return r.End - r.Start }

// Counts says what an operation did to units. Plan and SparseResult embed
// it, so an Acquire, an Append and a SparseAccess report in the same words.
type Counts struct {
	// Hits were on the GPU already; Onboarded were copied to the GPU from
	// a lower tier; Copied were filled by a copy-on-write copy; Computed
	// got a GPU slot the server fills by computing (new tokens, or a
	// recompute). A block that is recomputed (a needed unit of it had no
	// bytes) is never copied into: its units on a lower tier, or whose
	// copy-on-write source they are, count as Computed (their copies are
	// released), while its units already on the GPU count as Hits (kept
	// pinned: the recompute writes the same bytes into them).
	Hits, Onboarded, Copied, Computed int
	// Offloaded and Dropped count the victims evicted to make room: moved
	// down a tier, or left with no bytes.
	Offloaded, Dropped int
}

// Plan tells the server what an operation did and what it must do next:
// the tokens to compute into the slots the sequence's block tables now
// give.
//
// Compute and Executed share buffers with the sequence: its next operation
// reuses them, so read (or copy) them before. That keeps a decode step
// free of allocations.
type Plan struct {
	// Seq is the sequence the plan is for.
	Seq SeqID
	// Tokens is the number of tokens the sequence holds after the call.
	Tokens int
	// Pending is, for a sparse Acquire, the prompt tokens not taken from
	// the cache: the server feeds them through Append, block by block.
	Pending int
	Counts
	// Compute lists the token ranges the server must compute, in order:
	// new tokens and the tokens of cached blocks a unit of which was
	// dropped (recompute). It is empty for an Acquire of a prompt cached
	// whole (see Request.ComputeLast for the last token's logits).
	Compute []TokenRange
	// ReusedTokens counts tokens of cached blocks that need no compute:
	// every unit the sequence pins was on the GPU or copied to it.
	ReusedTokens int
	// PartialTokens counts, for an Acquire with Config.PartialReuse, the
	// leading tokens of the prompt's first uncached block that a cached
	// block agreed with and that were copied from it (Counts.Copied counts
	// its units) instead of computed; they are in ReusedTokens, and
	// Compute starts after them.
	PartialTokens int
	// RecomputeTokens counts the tokens of Compute that were cached once
	// and must be recomputed because a unit was dropped.
	RecomputeTokens int
	// Loading counts, with a TransferEngine, the units the call placed
	// whose bytes are still moving when it returns (loads, copies, and
	// fresh units whose slot's old content is still moving down), and the
	// units it hit that other operations are still loading: the
	// sequence's kernels wait for them (Readiness). It is 0 with a Mover.
	Loading int
	// BeingWrittenTokens counts, for Acquire, the prompt tokens past the
	// cached prefix whose blocks other live sequences are writing now
	// (computed, not yet committed). They are not shared before their
	// commit, so this request computes its own copy (in Compute, or in
	// Pending for a sparse request); a scheduler that would rather reuse
	// them can Release or Abort it and retry after the writer's next step.
	BeingWrittenTokens int
	// Executed is the batch of copies the operation handed to the Mover,
	// in order (victims' moves, onboards, copy-on-write copies): done by
	// the time the call returns (with no Mover, only counted).
	Executed []Copy
}

// scratch holds buffers reused across operations.
type scratch struct {
	nodes []*radix.Node[int32]
	// partial is what the last match found of a cached block that the
	// first unmatched one agrees with, when Config.PartialReuse asked.
	partial radix.Partial[int32]
	lo      []int32
	fresh   []int
	blocks  []int32
	units   []UnitID
	lost    []Copy
	hashes  []uint64
	pools   []bool
	copies  []int
	// hits is the set of block keys whose hits countLookups reported
	// (block keys only; see arena.access).
	hits map[UnitID]struct{}
	// adopted and room are planAdoption's buffers.
	adopted []adoptedUnit
	room    []int
	// declared holds the sequences whose waiting commits are retried.
	declared []*sequence
}

// countUnits returns what the committed transaction did, by Counts.
func (c *Cache) countUnits() Counts {
	var k Counts
	t := &c.tx
	for i := range t.needs {
		switch t.needs[i].act {
		case actHit:
			k.Hits++
		case actOnboard:
			k.Onboarded++
		case actCopy:
			k.Copied++
		case actFresh, actRecompute, actRewrite:
			k.Computed++
		}
	}
	for _, v := range t.victims {
		if v.to >= 0 {
			k.Offloaded++
		} else {
			k.Dropped++
		}
	}
	return k
}

// fillPlan sets p's counts and Executed from the committed transaction,
// with s's buffer behind Executed.
func (c *Cache) fillPlan(p *Plan, s *sequence) {
	p.Counts = c.countUnits()
	p.Loading = c.tx.loading
	s.executed = append(s.executed[:0], c.tx.batch...)
	if len(s.executed) > 0 {
		p.Executed = s.executed
	}
}

// countLookups adds the committed transaction's needs to the hit and miss
// counters of the tiers (a unit found on tier t is a miss on every tier
// above it and a hit on t; one found nowhere, or recomputed, a miss on
// every tier), and reports each hit to the GPU policy (Access): pinning is
// not a use for every policy (S3-FIFO counts hits in Access only). Policies
// known to ignore it are skipped (see tellsHits).
func (c *Cache) countLookups() {
	seen := c.scratch.hits
	clear(seen)
	for i := range c.tx.needs {
		n := &c.tx.needs[i]
		found := lookupTier(n)
		if found == GPU {
			if a := c.tiers.arena(GPU, c.poolOf(n.u)); a.tellHits {
				a.access(n.u, seen)
			}
		}
		c.countLookup(c.poolOf(n.u), found, 1)
	}
}

// lookupTier returns the tier need n found its unit on: GPU for a hit, the
// tier it is loaded from, or Dropped (computed, or recomputed).
func lookupTier(n *need) Tier {
	switch n.act {
	case actHit:
		return GPU
	case actOnboard:
		return n.from
	}
	return Dropped
}

// countLookup counts k lookups of units of pool p found on tier found (a
// miss on every tier above it, a hit on it; Dropped: a miss everywhere).
func (c *Cache) countLookup(p int, found Tier, k uint64) {
	for t := GPU; t <= c.tiers.last(); t++ {
		a := c.tiers.arena(t, p)
		if t == found {
			a.hits += k
			return
		}
		a.misses += k
	}
}

// computeRanges returns the token ranges, below token end, of the blocks to
// which the committed transaction gave fresh units (c.scratch.fresh), in
// s's buffer, and how many of their tokens were in the sequence's cached
// blocks before the call (the blocks below cached) and so are recomputed.
func (c *Cache) computeRanges(s *sequence, end, cached int) ([]TokenRange, int) {
	B := c.geom.blockTokens
	ranges, recomputed := s.compute[:0], 0
	for _, i := range c.scratch.fresh {
		e := min((i+1)*B, end)
		ranges = addRange(ranges, i*B, e)
		if i < cached {
			recomputed += e - i*B
		}
	}
	s.compute = ranges
	return ranges, recomputed
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
