package kvcache

import (
	"unsafe"

	"github.com/kvtier/kvtier/radix"
)

// Metadata has a budget. A node leaves the prefix tree on its own only as a
// leaf with no bytes and no references (collect), so a cached block keeps
// every dropped ancestor: without a bound, a workload whose prompts keep
// their tails cached (a high-priority last block, a cost-aware policy)
// grows the tree by its prompts' depth for every cached block. A hollow
// node, one that holds no bytes and that no sequence references, still has
// a use (a later request recomputes it and hits the blocks below it), but
// once the tree holds more than Config.MaxBlocks blocks, the least recently
// used hollow node is removed with its whole subtree: its descendants'
// units are dropped (UnitMoved events to Dropped) and every node leaves the tree
// (BlockRemoved events, children first). A hollow node's subtree holds no
// referenced node, since a sequence references every block of its prefix
// (a recomputed block through its copy's twin), so no live sequence loses
// anything. Recency is when the node last became hollow: a request that
// matches it references it, and releasing it makes it hollow again.
//
// The hollow nodes form a doubly linked list through their block records,
// least recently hollowed first (see metadata).

// noBlock marks the end of the hollow list.
const noBlock int32 = -1

// metadata is the budget of the prefix tree and the list of its hollow
// nodes, least recently hollowed first, linked through their block records.
type metadata struct {
	head, tail int32
	count      int
	// maxBlocks is the budget (Config.MaxBlocks, or its default).
	maxBlocks int
}

func newMetadata(maxBlocks int) metadata {
	return metadata{head: noBlock, tail: noBlock, maxBlocks: maxBlocks}
}

// defaultMaxBlocks is Config.MaxBlocks when it is 0: twice the token blocks
// the tiers hold (a block needs all its units, so a tier holds, in whole
// blocks, the least over pools of slots per unit per block), and at least
// minMaxBlocks.
func defaultMaxBlocks(pools []poolGeom, tiers [][]int) int {
	blocks := 0
	for _, slots := range tiers {
		least := -1
		for p, n := range slots {
			if b := n / pools[p].unitsPerBlock; least < 0 || b < least {
				least = b
			}
		}
		blocks += max(least, 0)
	}
	return max(2*blocks, minMaxBlocks)
}

// minMaxBlocks is the smallest default budget: a tiny cache still keeps a
// few prompts' worth of dropped prefixes.
const minMaxBlocks = 1024

// markHollow puts block b, a tree node with no bytes and no references, at
// the most recent end of the hollow list, unless it is there already.
func (m *metadata) markHollow(t *unitTable, b int32) {
	if t.blk(b).hollow {
		return
	}
	m.relinkHollow(t, b, m.tail)
}

// relinkHollow puts block b, which is not on the hollow list, after block
// prev (noBlock: at the head).
func (m *metadata) relinkHollow(t *unitTable, b, prev int32) {
	r := t.blk(b)
	next := m.head
	if prev != noBlock {
		next = t.blk(prev).hollowNext
		t.blk(prev).hollowNext = b
	} else {
		m.head = b
	}
	if next != noBlock {
		t.blk(next).hollowPrev = b
	} else {
		m.tail = b
	}
	r.hollow, r.hollowPrev, r.hollowNext = true, prev, next
	m.count++
}

// unmarkHollow takes block b off the hollow list, if it is on it.
func (m *metadata) unmarkHollow(t *unitTable, b int32) {
	r := t.blk(b)
	if !r.hollow {
		return
	}
	if r.hollowPrev == noBlock {
		m.head = r.hollowNext
	} else {
		t.blk(r.hollowPrev).hollowNext = r.hollowNext
	}
	if r.hollowNext == noBlock {
		m.tail = r.hollowPrev
	} else {
		t.blk(r.hollowNext).hollowPrev = r.hollowPrev
	}
	r.hollow, r.hollowPrev, r.hollowNext = false, noBlock, noBlock
	m.count--
}

// pruneMetadata removes the least recently hollowed nodes, with their
// subtrees, while the tree holds more than the budget (see the top of this
// file).
func (c *Cache) pruneMetadata() {
	for c.tree.Len() > c.meta.maxBlocks && c.meta.head != noBlock {
		b := c.meta.head
		n := c.units.blk(b).node
		if c.engine != nil && !c.subtreeSettled(n) {
			// A transfer holds a slot of a block below (or a unit waits
			// to be rewritten): the tree stays over budget until it is
			// done (unlock comes back).
			return
		}
		c.meta.unmarkHollow(&c.units, b)
		parent := n.Parent()
		removed, err := c.tree.RemoveSubtree(n, func(d *radix.Node[int32]) {
			x := d.Value
			for sl := range c.geom.slices {
				u := c.units.id(x, sl)
				if t := c.units.tierOf(u); t != Dropped {
					c.emitMove(u, t, Dropped)
					c.freeUnit(u)
				}
			}
			c.emitBlock(BlockRemoved, x, GPU)
			c.meta.unmarkHollow(&c.units, x)
			c.forgetRecord(x)
		})
		if err != nil {
			return // unreachable: b is a live node of the tree
		}
		c.st.removed += uint64(removed)
		c.st.pruned += uint64(removed)
		if parent != nil {
			// The parent may be a leaf with nothing left now.
			c.gcQueue = append(c.gcQueue, parent.Value)
			c.collectPending()
		}
	}
}

// subtreeSettled reports whether no block of n's subtree has a unit in
// flight or without bytes (blockRec.pending).
func (c *Cache) subtreeSettled(n *radix.Node[int32]) bool {
	stack := append(c.scratch.nodes[:0], n)
	defer func() { c.scratch.nodes = stack[:0] }()
	for len(stack) > 0 {
		d := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if c.units.blk(d.Value).pending > 0 {
			return false
		}
		for ch := range d.Children() {
			stack = append(stack, ch)
		}
	}
	return true
}

// metadataBytes estimates the memory of the cache's live metadata: the
// block records in use and their unit tables, the tree's nodes with their
// tokens, and one policy entry per resident unit (per resident block under
// block keys). It is an estimate for
// Stats, from the sizes of the structures, not a measurement.
func (c *Cache) metadataBytes() int64 {
	const (
		nodeBytes   = 112 // a radix node and its shared metadata, as allocated
		policyBytes = 48  // a policy's entry and index slot for one key
	)
	records := int64(c.units.live())
	unitTables := int64(1<<c.geom.sliceShift) * int64(unsafe.Sizeof(unitState{}))
	n := records * (int64(unsafe.Sizeof(blockRec{})) + unitTables)
	n += int64(c.tree.Len()) * (nodeBytes + int64(c.geom.blockTokens)*int64(unsafe.Sizeof(uint32(0))))
	c.tiers.each(func(a *arena) {
		if a.grouped() {
			// A key per block (its policy's Len), and the block counts.
			n += int64(a.keys)*policyBytes + int64(a.groups.Len())*int64(unsafe.Sizeof(groupCount{}))
			return
		}
		n += int64(a.tracked) * policyBytes
	})
	return n
}
