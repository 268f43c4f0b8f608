package eviction

// LRU evicts the evictable key that was used least recently.
//
// Algorithm: one doubly linked list of the evictable keys, least recently
// used at the front, plus an index from key to list node (a Go map, or the
// [Index] given to [NewLRUWithIndex]; both make the same choices). Insert
// appends at the back, Access moves an evictable key to the back, Evict
// takes the front. Nodes live in a slab addressed by int32 indices with a
// free list, so once the number of tracked keys stops growing no operation
// allocates. Every operation is O(1) (one or two index operations and a
// few link updates).
//
// Pinning: a pinned key leaves the list but stays in the index, and Unpin
// puts it back at the most recently used end. A pin marks the key as in use, so
// the moment it is released is its most recent use; this is what vLLM does
// when it appends freed blocks to the tail of its free-block queue. For the
// same reason Access of a pinned key changes nothing: its release will be
// later than the access anyway.
//
// The zero LRU is not usable; create one with [NewLRU] or
// [NewLRUWithIndex]. An LRU is not safe for concurrent use.
type LRU[K comparable] struct {
	slab linkedSlab[K, struct{}]
	keys keyIndex[K]
}

var (
	_ Policy[int]         = (*LRU[int])(nil)
	_ PinnedAccessIgnorer = (*LRU[int])(nil)
	_ PinnedInserter[int] = (*LRU[int])(nil)
)

// lruHead is the sentinel of the LRU's only list.
const lruHead int32 = 0

// NewLRU returns an empty LRU policy that indexes its keys with a Go map.
func NewLRU[K comparable]() *LRU[K] {
	p := &LRU[K]{keys: keyIndex[K]{m: make(map[K]int32)}}
	p.slab.init(1)
	return p
}

// NewLRUWithIndex returns an empty LRU policy that indexes its keys with
// idx, or with a Go map when idx is nil (as [NewLRU]). It returns an error
// wrapping [ErrInvalidConfig] when idx is a nil *DenseIndex or already
// belongs to a policy.
func NewLRUWithIndex[K comparable](idx Index[K]) (*LRU[K], error) {
	keys, err := newKeyIndex(idx)
	if err != nil {
		return nil, err
	}
	p := &LRU[K]{keys: keys}
	p.slab.init(1)
	return p, nil
}

// Insert starts tracking k as the most recently used evictable key. It
// returns an error wrapping [ErrInvalidEntry] for an invalid e and one
// wrapping [ErrKeyExists] when k is already tracked, one wrapping
// [ErrKeyOutOfRange] when the index cannot hold k and one wrapping
// [ErrTooManyKeys] when the slab is full; the policy is then unchanged. LRU
// ignores every field of e beyond validating it.
func (p *LRU[K]) Insert(k K, e Entry) error {
	i, err := p.track(k, e)
	if err != nil {
		return err
	}
	p.slab.pushBack(lruHead, i)
	return nil
}

// track starts tracking k, on no list yet, and returns its node.
func (p *LRU[K]) track(k K, e Entry) (int32, error) {
	if err := e.Validate(); err != nil {
		return 0, err
	}
	if _, ok := p.keys.lookup(k); ok {
		return 0, trackedKeyError(k)
	}
	i, err := p.slab.alloc(k, struct{}{})
	if err != nil {
		return 0, err
	}
	if err := p.keys.store(k, i); err != nil {
		p.slab.release(i)
		return 0, err
	}
	return i, nil
}

// InsertPinned is Insert followed by Pin (see [PinnedInserter]): k is
// tracked but on no list until Unpin.
func (p *LRU[K]) InsertPinned(k K, e Entry) error {
	_, err := p.track(k, e)
	return err
}

// Access makes an evictable k the most recently used key. It does nothing
// for a pinned or unknown k.
func (p *LRU[K]) Access(k K) {
	i, ok := p.keys.lookup(k)
	if !ok || !p.slab.linked(i) {
		return
	}
	p.slab.moveToBack(lruHead, i)
}

// Pin makes k ineligible for eviction until Unpin. It does nothing for an
// unknown or already pinned k.
func (p *LRU[K]) Pin(k K) {
	i, ok := p.keys.lookup(k)
	if !ok || !p.slab.linked(i) {
		return
	}
	p.slab.unlink(i)
}

// Unpin makes a pinned k evictable again as the most recently used key. It
// does nothing for an unknown or evictable k.
func (p *LRU[K]) Unpin(k K) {
	i, ok := p.keys.lookup(k)
	if !ok || p.slab.linked(i) {
		return
	}
	p.slab.pushBack(lruHead, i)
}

// Remove stops tracking k, pinned or not. It does nothing for an unknown k.
func (p *LRU[K]) Remove(k K) {
	i, ok := p.keys.lookup(k)
	if !ok {
		return
	}
	if p.slab.linked(i) {
		p.slab.unlink(i)
	}
	p.keys.delete(k, i)
	p.slab.release(i)
}

// Evict removes and returns the least recently used evictable key. It
// returns false when every tracked key is pinned or none is tracked.
func (p *LRU[K]) Evict() (K, bool) {
	i := p.slab.front(lruHead)
	if i == lruHead {
		var zero K
		return zero, false
	}
	k := p.slab.nodes.at(i).key
	p.slab.unlink(i)
	p.keys.delete(k, i)
	p.slab.release(i)
	return k, true
}

// Len returns the number of tracked keys, pinned or not.
func (p *LRU[K]) Len() int {
	return p.keys.len()
}

// IgnoresPinnedAccess returns true: its Access of a pinned key does nothing: the Unpin that follows makes the key most recent anyway. See [PinnedAccessIgnorer].
func (p *LRU[K]) IgnoresPinnedAccess() bool { return true }
