package eviction

// FIFO evicts the evictable key that was inserted first. Access does not
// reorder keys, and neither does pinning: a key keeps its place in the
// insertion order while pinned, so once unpinned it is as old as it was and
// leaves before every key inserted after it. This is the "history" a FIFO
// has; giving a released key a new place at the back would turn FIFO into
// an LRU over releases for an owner, like a kvcache tier, that pins every
// key it uses.
//
// Algorithm: a queue (slab-backed doubly linked list, int32 indices, free
// list) holds the keys in insertion order, pinned ones included. Evict
// takes the front; a pinned key found at the front is set aside ("parked")
// instead. Every parked key is older than every key still queued, because
// keys only join the queue at the back. An unpinned parked key therefore
// goes into a min-heap keyed by insertion number, and Evict takes from that
// heap first: its minimum is the oldest evictable key of all.
//
// Costs: Insert, Access and Remove of a queued key are O(1); Pin and Unpin
// of a queued key are O(1); Evict is O(1) amortized (each pinned key is
// parked at most once per Pin). Only keys that were pinned when they reached
// the front pay O(log h) on Unpin, Pin and Evict, h being the number of
// such keys unpinned and waiting. With no pins, as in trace replay, FIFO is
// a plain queue. Once the number of tracked keys stops growing nothing
// allocates.
//
// Keys are indexed with a Go map, or with the [Index] given to
// [NewFIFOWithIndex]; both make the same choices.
//
// The zero FIFO is not usable; create one with [NewFIFO] or
// [NewFIFOWithIndex]. A FIFO is not safe for concurrent use.
type FIFO[K comparable] struct {
	slab linkedSlab[K, fifoMeta]
	keys keyIndex[K]
	// reclaimed holds the parked keys that were unpinned since, keyed by
	// insertion number.
	reclaimed stampHeap
	nextSeq   uint64 // below 2^63 for 292 years of one insert per ns
	txSeq     uint64 // nextSeq at Begin
}

// fifoMeta is FIFO's per-key data: the insertion number (the queue's
// order) in the low 63 bits and the pinned flag in the top bit, packed so a
// node takes 24 bytes instead of 32 for 8-byte keys. A key is queued when
// its node is linked, reclaimed when it is in the heap, and parked
// otherwise (then it is pinned).
type fifoMeta uint64

// fifoPinned is the pinned flag of a fifoMeta.
const fifoPinned fifoMeta = 1 << 63

func (m fifoMeta) seq() uint64  { return uint64(m &^ fifoPinned) }
func (m fifoMeta) pinned() bool { return m&fifoPinned != 0 }

var (
	_ Policy[int]         = (*FIFO[int])(nil)
	_ PinnedAccessIgnorer = (*FIFO[int])(nil)
	_ PinnedInserter[int] = (*FIFO[int])(nil)
)

// fifoHead is the sentinel of the FIFO's queue.
const fifoHead int32 = 0

// NewFIFO returns an empty FIFO policy that indexes its keys with a Go
// map.
func NewFIFO[K comparable]() *FIFO[K] {
	p := &FIFO[K]{keys: keyIndex[K]{m: make(map[K]int32)}}
	p.slab.init(1)
	return p
}

// NewFIFOWithIndex returns an empty FIFO policy that indexes its keys with
// idx, or with a Go map when idx is nil (as [NewFIFO]). It returns an error
// wrapping [ErrInvalidConfig] when idx is a nil *DenseIndex or already
// belongs to a policy.
func NewFIFOWithIndex[K comparable](idx Index[K]) (*FIFO[K], error) {
	keys, err := newKeyIndex(idx)
	if err != nil {
		return nil, err
	}
	p := &FIFO[K]{keys: keys}
	p.slab.init(1)
	return p, nil
}

// Insert starts tracking k as the newest evictable key. It returns an error
// wrapping [ErrInvalidEntry] for an invalid e, one wrapping
// [ErrKeyExists] when k is already tracked, one wrapping
// [ErrKeyOutOfRange] when the index cannot hold k and one wrapping
// [ErrTooManyKeys] when the slab is full; the policy is then unchanged.
// FIFO ignores every field of e beyond validating it.
func (p *FIFO[K]) Insert(k K, e Entry) error {
	if err := e.Validate(); err != nil {
		return err
	}
	if _, ok := p.keys.lookup(k); ok {
		return trackedKeyError(k)
	}
	i, err := p.slab.alloc(k, fifoMeta(p.nextSeq))
	if err != nil {
		return err
	}
	if err := p.keys.store(k, i); err != nil {
		p.slab.release(i)
		return err
	}
	p.nextSeq++
	p.slab.pushBack(fifoHead, i)
	return nil
}

// InsertPinned is Insert followed by Pin (see [PinnedInserter]): k takes
// its place in the insertion order, pinned.
func (p *FIFO[K]) InsertPinned(k K, e Entry) error {
	if err := p.Insert(k, e); err != nil {
		return err
	}
	i, _ := p.keys.lookup(k)
	*p.slab.meta(i) |= fifoPinned
	return nil
}

// Access does nothing: a FIFO orders keys by insertion only.
func (p *FIFO[K]) Access(k K) {}

// Pin makes k ineligible for eviction until Unpin, keeping its place in the
// insertion order. It does nothing for an unknown or already pinned k.
func (p *FIFO[K]) Pin(k K) {
	i, ok := p.keys.lookup(k)
	if !ok || p.slab.nodes.at(i).meta.pinned() {
		return
	}
	*p.slab.meta(i) |= fifoPinned
	// A reclaimed key goes back to being parked; a queued one stays put.
	p.reclaimed.remove(i)
}

// Unpin makes a pinned k evictable again, as old as it was inserted. It
// does nothing for an unknown or evictable k.
func (p *FIFO[K]) Unpin(k K) {
	i, ok := p.keys.lookup(k)
	if !ok || !p.slab.nodes.at(i).meta.pinned() {
		return
	}
	m := p.slab.meta(i)
	*m &^= fifoPinned
	if !p.slab.linked(i) {
		p.reclaimed.push(i, 0, m.seq())
	}
}

// Remove stops tracking k, pinned or not. It does nothing for an unknown k.
func (p *FIFO[K]) Remove(k K) {
	i, ok := p.keys.lookup(k)
	if !ok {
		return
	}
	p.forget(i)
}

// forget drops node i from whichever structure holds it and frees it.
func (p *FIFO[K]) forget(i int32) {
	if p.slab.linked(i) {
		p.slab.unlink(i)
	} else {
		p.reclaimed.remove(i)
	}
	p.keys.delete(p.slab.nodes.at(i).key, i)
	p.slab.release(i)
}

// Evict removes and returns the evictable key inserted first. It returns
// false when every tracked key is pinned or none is tracked.
func (p *FIFO[K]) Evict() (K, bool) {
	if p.reclaimed.len() > 0 {
		i := p.reclaimed.min().node
		k := p.slab.nodes.at(i).key
		p.forget(i)
		return k, true
	}
	for {
		i := p.slab.front(fifoHead)
		if i == fifoHead {
			var zero K
			return zero, false
		}
		if p.slab.nodes.at(i).meta.pinned() {
			p.slab.unlink(i) // park it: older than everything queued
			continue
		}
		k := p.slab.nodes.at(i).key
		p.forget(i)
		return k, true
	}
}

// Len returns the number of tracked keys, pinned or not.
func (p *FIFO[K]) Len() int {
	return p.keys.len()
}

// IgnoresPinnedAccess returns true: its Access never reorders keys. See [PinnedAccessIgnorer].
func (p *FIFO[K]) IgnoresPinnedAccess() bool { return true }
