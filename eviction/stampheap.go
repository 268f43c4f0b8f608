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
// to its place in items plus one (0: not in the heap). Both are chunked
// (see chunks): after warm-up the heap allocates nothing, and growing never
// copies what it holds.
type stampHeap struct {
	items chunks[stampItem]
	pos   sparse[int32]
	// tx journals pushes and removals while a transaction runs.
	tx heapJournal
}

func (h *stampHeap) len() int { return int(h.items.len()) }

// has reports whether node is in the heap.
func (h *stampHeap) has(node int32) bool { return h.pos.get(uint64(node)) != 0 }

// min returns the least item; the heap must not be empty.
func (h *stampHeap) min() stampItem { return *h.items.at(0) }

// push adds node, which must not be in the heap.
func (h *stampHeap) push(node int32, at int64, seq uint64) {
	if h.tx.on {
		h.tx.ops = append(h.tx.ops, heapOp{pushed: true, item: stampItem{at: at, seq: seq, node: node}})
	}
	i := int(h.items.push(stampItem{at: at, seq: seq, node: node}))
	*h.pos.ref(uint64(node)) = int32(i + 1)
	h.up(i)
}

// remove takes node out of the heap if it is there.
func (h *stampHeap) remove(node int32) {
	if !h.has(node) {
		return
	}
	i := int(h.pos.get(uint64(node)) - 1)
	if h.tx.on {
		h.tx.ops = append(h.tx.ops, heapOp{item: *h.items.at(int32(i))})
	}
	*h.pos.ref(uint64(node)) = 0
	last := h.len() - 1
	if i != last {
		it := *h.items.at(int32(last))
		*h.items.at(int32(i)) = it
		*h.pos.ref(uint64(it.node)) = int32(i + 1)
	}
	h.items.truncate(int32(last))
	if i != last {
		h.down(i)
		h.up(i)
	}
}

func (h *stampHeap) swap(i, j int) {
	a, b := h.items.at(int32(i)), h.items.at(int32(j))
	*a, *b = *b, *a
	*h.pos.ref(uint64(a.node)) = int32(i + 1)
	*h.pos.ref(uint64(b.node)) = int32(j + 1)
}

// less reports whether item i orders before item j.
func (h *stampHeap) less(i, j int) bool { return h.items.at(int32(i)).before(*h.items.at(int32(j))) }

func (h *stampHeap) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !h.less(i, parent) {
			return
		}
		h.swap(i, parent)
		i = parent
	}
}

func (h *stampHeap) down(i int) {
	n := h.len()
	for {
		least := i
		if l := 2*i + 1; l < n && h.less(l, least) {
			least = l
		}
		if r := 2*i + 2; r < n && h.less(r, least) {
			least = r
		}
		if least == i {
			return
		}
		h.swap(i, least)
		i = least
	}
}
