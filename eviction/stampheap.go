package eviction

// stampItem is one slab node in a stampHeap, ordered by at and then seq.
type stampItem struct {
	at   int64
	seq  uint64
	node int32
}

func (a stampItem) before(b stampItem) bool {
	return a.at < b.at || (a.at == b.at && a.seq < b.seq)
}

// stampHeap is a binary min-heap of slab nodes keyed by (at, seq), that can
// also remove any node it holds in O(log n). FIFO keys it by insertion order
// only (at 0); PrioritizedLRU keys it by expiry time. pos maps a node index
// to its place in items plus one (0: not in the heap) and grows with the
// slab, so after warm-up the heap allocates nothing.
type stampHeap struct {
	items []stampItem
	pos   []int32
	// tx journals pushes and removals while a transaction runs.
	tx heapJournal
}

func (h *stampHeap) len() int { return len(h.items) }

// has reports whether node is in the heap.
func (h *stampHeap) has(node int32) bool {
	return int(node) < len(h.pos) && h.pos[node] != 0
}

// min returns the least item; the heap must not be empty.
func (h *stampHeap) min() stampItem { return h.items[0] }

// push adds node, which must not be in the heap.
func (h *stampHeap) push(node int32, at int64, seq uint64) {
	if h.tx.on {
		h.tx.ops = append(h.tx.ops, heapOp{pushed: true, item: stampItem{at: at, seq: seq, node: node}})
	}
	for int(node) >= len(h.pos) {
		h.pos = append(h.pos, 0)
	}
	h.items = append(h.items, stampItem{at: at, seq: seq, node: node})
	i := len(h.items) - 1
	h.pos[node] = int32(i + 1)
	h.up(i)
}

// remove takes node out of the heap if it is there.
func (h *stampHeap) remove(node int32) {
	if !h.has(node) {
		return
	}
	i := int(h.pos[node] - 1)
	if h.tx.on {
		h.tx.ops = append(h.tx.ops, heapOp{item: h.items[i]})
	}
	h.pos[node] = 0
	last := len(h.items) - 1
	if i != last {
		h.items[i] = h.items[last]
		h.pos[h.items[i].node] = int32(i + 1)
	}
	h.items = h.items[:last]
	if i != last {
		h.down(i)
		h.up(i)
	}
}

func (h *stampHeap) swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.pos[h.items[i].node] = int32(i + 1)
	h.pos[h.items[j].node] = int32(j + 1)
}

func (h *stampHeap) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !h.items[i].before(h.items[parent]) {
			return
		}
		h.swap(i, parent)
		i = parent
	}
}

func (h *stampHeap) down(i int) {
	n := len(h.items)
	for {
		least := i
		if l := 2*i + 1; l < n && h.items[l].before(h.items[least]) {
			least = l
		}
		if r := 2*i + 2; r < n && h.items[r].before(h.items[least]) {
			least = r
		}
		if least == i {
			return
		}
		h.swap(i, least)
		i = least
	}
}
