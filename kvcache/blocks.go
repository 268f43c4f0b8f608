package kvcache

import (
	"fmt"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/radix"
)

// poolOf returns the pool of unit u.
func (c *Cache) poolOf(u UnitID) int { return int(c.geom.slicePool[c.units.slice(u)]) }

// entryOf returns what the policies are told about unit u.
func (c *Cache) entryOf(u UnitID) eviction.Entry {
	return c.sliceEntry(c.blockEntry(c.units.block(u)), c.units.slice(u))
}

// blockEntry returns what every unit of block b tells the policies but its
// layer: entryOf is sliceEntry of it, so that a caller placing many units
// of one block reads the block's record once.
func (c *Cache) blockEntry(b int32) eviction.Entry {
	r := c.units.blk(b)
	e := eviction.Entry{Size: 1, Priority: int(r.prio), PriorityDuration: r.prioDur}
	e.Chunk = int(r.index)
	e.Chunks = int(r.chunks)
	e.ContextTokens = int64(r.index) * int64(c.geom.blockTokens)
	return e
}

// sliceEntry returns e, a blockEntry, as the entry of the block's unit of
// slice s.
func (c *Cache) sliceEntry(e eviction.Entry, s int) eviction.Entry {
	if l := c.geom.sliceLayer[s]; l >= 0 {
		e.Layer = int(l)
		e.Layers = c.geom.kvLayers
	}
	return e
}

// gainBytes counts a unit of block b that got bytes back.
func (c *Cache) gainBytes(b int32) {
	r := c.units.blk(b)
	r.held++
	if r.held == 1 {
		c.meta.unmarkHollow(&c.units, b)
	}
}

// loseBytes counts a unit of block b that lost its bytes, or that is
// counted out of them (a victim to drop, an unwritten unit). Every
// decrease of a block's held count goes through here and counts in
// Cache.losses, which tells a long Adopt whether a prefix it saw whole may
// have lost a unit since (see adoptProgress).
func (c *Cache) loseBytes(b int32) {
	c.units.blk(b).held--
	c.losses++
}

// whole reports whether every unit of block b holds bytes.
func (c *Cache) whole(b int32) bool { return c.units.blk(b).held == int32(c.geom.slices) }

// wholePrefix returns how many of nodes, from the first, are whole.
func (c *Cache) wholePrefix(nodes []*radix.Node[int32]) int {
	k := 0
	for k < len(nodes) && c.whole(nodes[k].Value) {
		k++
	}
	return k
}

// match returns req's keys and the nodes of its longest cached prefix
// (whole blocks; Cache.mu held), or an error wrapping ErrInvalidRequest
// for bad extra keys. The nodes are in a scratch buffer: valid until the
// next match. With Config.PartialReuse, a dense req's match also leaves
// in c.scratch.partial the cached block its first unmatched block agrees
// with best.
func (c *Cache) match(req *Request) (radix.Keys, []*radix.Node[int32], error) {
	keys := radix.Keys{Namespace: req.Namespace, LoRA: req.LoRA}
	var nodes []*radix.Node[int32]
	var err error
	c.scratch.partial = radix.Partial[int32]{}
	if c.partialReuse && !req.Sparse {
		nodes, c.scratch.partial, err = c.tree.MatchPartial(c.scratch.nodes[:0], keys, req.Tokens, req.Extra)
	} else {
		nodes, err = c.tree.Match(c.scratch.nodes[:0], keys, req.Tokens, req.Extra)
	}
	c.scratch.nodes = nodes[:0]
	if err != nil {
		return keys, nil, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	return keys, nodes, nil
}

// leaveLast drops from nodes, the cached prefix of req's prompt, the block
// that holds the prompt's last token when req.ComputeLast asks for that
// token to be computed (dense requests only).
func (c *Cache) leaveLast(req *Request, nodes []*radix.Node[int32]) []*radix.Node[int32] {
	if !req.ComputeLast || req.Sparse || len(req.Tokens) == 0 {
		return nodes
	}
	return nodes[:min(len(nodes), (len(req.Tokens)-1)/c.geom.blockTokens)]
}

// hasBytes reports whether unit u holds bytes: it is on a tier and, on
// the GPU, not unwritten (see unitUnwritten).
func (c *Cache) hasBytes(u UnitID) bool { return c.units.of(u).hasBytes() }

// lacksBytes reports whether a unit of block b in a pool of pools (all
// pools when pools is nil) has no bytes.
func (c *Cache) lacksBytes(b int32, pools []bool) bool {
	if pools == nil {
		return !c.whole(b)
	}
	for p, want := range pools {
		if !want {
			continue
		}
		for _, sl := range c.geom.pools[p].slices {
			if !c.hasBytes(c.units.id(b, sl)) {
				return true
			}
		}
	}
	return false
}

// recomputeCopy returns a private block, allocated for the running
// transaction, that a sequence recomputes in place of the cached block
// twin, one of whose units it needs has no bytes: the server writes the
// copy, and committing it restores twin's dropped units from it
// (mergeBlock). The sequence keeps the reference it holds on twin meanwhile
// (the caller took it), which protects the chain of cached blocks after it;
// it is released with the copy (discardPrivate) or becomes the sequence's
// reference to twin when the copy merges.
func (c *Cache) recomputeCopy(twin int32, sparse bool) int32 {
	t := c.units.blk(twin)
	index, chunks, prio, dur, hash := int(t.index), int(t.chunks), int(t.prio), t.prioDur, t.node.Hash()
	b := c.newBlock(index, chunks, prio, dur, t.node.Keys().Namespace)
	r := c.units.blk(b)
	r.twin = twin
	r.hash = hash
	c.ref(b, sparse)
	return b
}

// unref removes one reference to block b from a sequence (sparse or not)
// and collects the block when it was the last and the block is private or
// holds nothing.
func (c *Cache) unref(b int32, sparse bool) {
	r := c.units.blk(b)
	r.refs--
	if sparse {
		r.sparseRefs--
	}
	if r.refs > 0 {
		return
	}
	if r.node == nil {
		c.discardPrivate(b, sparse)
		return
	}
	if r.held == 0 {
		c.collect(b)
	}
}

// addRefNow adds a reference to block b outside a transaction: the commit
// that adopts a cached block, which stays whatever follows.
func (c *Cache) addRefNow(b int32, sparse bool) {
	r := c.units.blk(b)
	if r.refs == 0 {
		c.meta.unmarkHollow(&c.units, b)
	}
	r.refs++
	if sparse {
		r.sparseRefs++
	}
}
