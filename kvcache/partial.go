package kvcache

import (
	"github.com/kvtier/kvtier/costmodel"
	"github.com/kvtier/kvtier/radix"
)

// Partial-block reuse (Config.PartialReuse). A dense prompt whose first
// uncached block agrees with a cached block on its leading tokens gets a
// private block filled by copying the cached one, the copy-on-write that
// Truncate and Fork do, and computes only the tokens after those that
// agree. The copy is a need of the Acquire's transaction (addCopyNeed
// through queuePins), so it pins its source while it runs, becomes a
// compute of the whole block when a unit of the source has no bytes
// (recomputeBlock), and, with a TransferEngine, fails into
// Readiness.Recompute like any copy.

// matchPrompt matches req's prompt (see match) and leaves out the block
// of its last token when Request.ComputeLast asks (see leaveLast): it
// returns the prompt's keys, its cached prefix, and the block the first
// block past the prefix copies its first partial tokens from (see
// partialSource), or -1 and 0.
func (c *Cache) matchPrompt(req *Request) (radix.Keys, []*radix.Node[int32], int32, int, error) {
	keys, nodes, err := c.match(req)
	if err != nil {
		return keys, nil, -1, 0, err
	}
	var dropped *radix.Node[int32]
	if kept := c.leaveLast(req, nodes); len(kept) < len(nodes) {
		dropped, nodes = nodes[len(kept)], kept
	}
	src, partial := c.partialSource(req, len(nodes), c.scratch.partial, dropped)
	return keys, nodes, src, partial, nil
}

// partialSource returns the cached block whose leading tokens the
// prompt's block matched (the first block past nodes, the matched prefix)
// reuses, and how many, or -1 and 0. part is what the match found
// (c.scratch.partial); dropped, when not nil, is the block the prompt's
// last token lies in, which Request.ComputeLast left out of nodes: it
// agrees up to the token before the last.
func (c *Cache) partialSource(req *Request, matched int, part radix.Partial[int32], dropped *radix.Node[int32]) (int32, int) {
	if !c.partialReuse || req.Sparse {
		return -1, 0
	}
	B := c.geom.blockTokens
	rest := len(req.Tokens) - matched*B
	k := 0
	var src *radix.Node[int32]
	switch {
	case dropped != nil:
		src, k = dropped, rest-1
	case part.Node != nil:
		src, k = part.Node, min(part.Tokens, rest)
		if req.ComputeLast {
			k = min(k, rest-1)
		}
	}
	if k <= 0 || !c.whole(src.Value) || c.restoredUnwritten(src.Value) || !c.partialPays(src.Value, k) {
		return -1, 0
	}
	return src.Value, k
}

// restoredUnwritten reports whether a unit of block b was restored by a
// live sequence's SparseAccess that has not declared it written yet: its
// slot holds bytes only once that sequence's kernel has run, and a copy
// could run before.
func (c *Cache) restoredUnwritten(b int32) bool {
	for _, s := range c.seqs {
		for _, u := range s.restored {
			if c.units.block(u) == b && c.units.current(u, c.geom.slices) {
				return true
			}
		}
	}
	return false
}

// partialPays reports whether copying block b (whole) to reuse its first k
// tokens costs less than computing them: always without Config.Recompute;
// with it, when loading b's units that are not on the GPU (a copy between
// GPU slots is taken as free) is strictly cheaper than k/B of recomputing
// the block's units, as costmodel.Choose decides. A cost that cannot be
// computed reuses nothing.
func (c *Cache) partialPays(b int32, k int) bool {
	if c.recompute == nil {
		return true
	}
	g := c.geom
	e := c.blockEntry(b)
	var load, recompute float64
	for sl := range g.slices {
		u := c.units.id(b, sl)
		cost, err := c.recompute.Cost(c.sliceEntry(e, sl).Unit)
		if err != nil {
			return false
		}
		recompute += cost
		if t := c.units.of(u).tier; t != GPU {
			s, err := c.tiers.loadSeconds(t, g.pools[g.slicePool[sl]].unitBytes)
			if err != nil {
				return false
			}
			load += s
		}
	}
	recompute *= float64(k) / float64(g.blockTokens)
	return costmodel.Choose(load, recompute) == costmodel.Offload
}

// cutRanges drops from rs, sorted, every token from cut on.
func cutRanges(rs []TokenRange, cut int) []TokenRange {
	for len(rs) > 0 && rs[len(rs)-1].Start >= cut {
		rs = rs[:len(rs)-1]
	}
	if n := len(rs); n > 0 {
		rs[n-1].End = min(rs[n-1].End, cut)
	}
	return rs
}
