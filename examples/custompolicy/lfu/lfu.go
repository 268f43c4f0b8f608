package lfu

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/kvtier/kvtier/eviction"
)

// MaxCount is the largest use count LFU tells apart. Counts stop there:
// 4095 uses of one key already say it is hot, and a fixed number of buckets
// is what makes Unpin and Evict O(1).
const MaxCount = 64*64 - 1

// none marks an absent node index: the end of a list, or a key on no list.
const none int32 = -1

// node is one tracked key. prev and next link it into the list of its
// count's bucket while it is evictable; a pinned key is on no list but keeps
// its count.
type node[K comparable] struct {
	key        K
	prev, next int32
	count      uint16
	pinned     bool
}

// LFU evicts the least frequently used evictable key, the least recently
// used one among equals (see the package documentation).
//
// Pinning keeps a key's count (its history): a pinned key leaves its
// bucket's list, Access still counts, and Unpin puts it back at the most
// recently used end of its count's bucket.
//
// Nodes live in a slice addressed by int32 with a free list, and buckets are
// fixed arrays, so once the number of tracked keys stops growing nothing
// allocates. The zero LFU is not usable; create one with New. An LFU is not
// safe for concurrent use.
type LFU[K comparable] struct {
	index map[K]int32
	nodes []node[K]
	free  int32 // first free node, chained through next

	// head and tail of each count's list of evictable keys, least recently
	// used at the head. Bucket 0 is never used.
	head, tail [MaxCount + 1]int32
	// words has bit c%64 of word c/64 set when bucket c is not empty;
	// summary has bit w set when words[w] is not zero.
	words   [64]uint64
	summary uint64
}

var _ eviction.Policy[int] = (*LFU[int])(nil)

// New returns an empty LFU policy.
func New[K comparable]() *LFU[K] {
	p := &LFU[K]{index: make(map[K]int32), free: none}
	for c := range p.head {
		p.head[c], p.tail[c] = none, none
	}
	return p
}

// Insert starts tracking k as an evictable key used once. It returns an
// error wrapping eviction.ErrInvalidEntry for an invalid e and one wrapping
// eviction.ErrKeyExists when k is already tracked; the policy is then
// unchanged. LFU ignores every field of e beyond validating it.
func (p *LFU[K]) Insert(k K, e eviction.Entry) error {
	if err := e.Validate(); err != nil {
		return fmt.Errorf("lfu: %w", err)
	}
	if _, ok := p.index[k]; ok {
		return fmt.Errorf("lfu: %w: %v", eviction.ErrKeyExists, k)
	}
	i := p.free
	if i != none {
		p.free = p.nodes[i].next
	} else {
		if len(p.nodes) == math.MaxInt32 {
			return fmt.Errorf("lfu: %w: %d keys", eviction.ErrTooManyKeys, len(p.nodes))
		}
		p.nodes = append(p.nodes, node[K]{})
		i = int32(len(p.nodes) - 1)
	}
	p.nodes[i] = node[K]{key: k, prev: none, next: none, count: 1}
	p.index[k] = i
	p.push(i)
	return nil
}

// Access counts one use of k, pinned or not; an evictable k becomes the
// most recently used key of its new count. It does nothing for an unknown k.
func (p *LFU[K]) Access(k K) {
	i, ok := p.index[k]
	if !ok {
		return
	}
	n := &p.nodes[i]
	if !n.pinned {
		p.unlink(i)
	}
	if n.count < MaxCount {
		n.count++
	}
	if !n.pinned {
		p.push(i)
	}
}

// Pin makes k ineligible for eviction until Unpin, keeping its count. It
// does nothing for an unknown or already pinned k.
func (p *LFU[K]) Pin(k K) {
	i, ok := p.index[k]
	if !ok || p.nodes[i].pinned {
		return
	}
	p.unlink(i)
	p.nodes[i].pinned = true
}

// Unpin makes a pinned k evictable again, as the most recently used key of
// its count. It does nothing for an unknown or evictable k.
func (p *LFU[K]) Unpin(k K) {
	i, ok := p.index[k]
	if !ok || !p.nodes[i].pinned {
		return
	}
	p.nodes[i].pinned = false
	p.push(i)
}

// Remove stops tracking k, pinned or not. It does nothing for an unknown k.
func (p *LFU[K]) Remove(k K) {
	i, ok := p.index[k]
	if !ok {
		return
	}
	if !p.nodes[i].pinned {
		p.unlink(i)
	}
	p.release(k, i)
}

// Evict removes and returns the least recently used evictable key of the
// lowest count. It returns false when every tracked key is pinned or none is
// tracked.
func (p *LFU[K]) Evict() (K, bool) {
	if p.summary == 0 {
		var zero K
		return zero, false
	}
	w := bits.TrailingZeros64(p.summary)
	c := w*64 + bits.TrailingZeros64(p.words[w])
	i := p.head[c]
	k := p.nodes[i].key
	p.unlink(i)
	p.release(k, i)
	return k, true
}

// Len returns the number of tracked keys, pinned or not.
func (p *LFU[K]) Len() int {
	return len(p.index)
}

// push appends node i at the most recently used end of its count's list.
func (p *LFU[K]) push(i int32) {
	n := &p.nodes[i]
	c := n.count
	n.prev, n.next = p.tail[c], none
	if p.tail[c] == none {
		p.head[c] = i
		p.words[c/64] |= 1 << (c % 64)
		p.summary |= 1 << (c / 64)
	} else {
		p.nodes[p.tail[c]].next = i
	}
	p.tail[c] = i
}

// unlink takes evictable node i off its count's list.
func (p *LFU[K]) unlink(i int32) {
	n := &p.nodes[i]
	c := n.count
	if n.prev == none {
		p.head[c] = n.next
	} else {
		p.nodes[n.prev].next = n.next
	}
	if n.next == none {
		p.tail[c] = n.prev
	} else {
		p.nodes[n.next].prev = n.prev
	}
	n.prev, n.next = none, none
	if p.head[c] == none {
		p.words[c/64] &^= 1 << (c % 64)
		if p.words[c/64] == 0 {
			p.summary &^= 1 << (c / 64)
		}
	}
}

// release forgets key k of node i and puts the node on the free list. The
// key is zeroed so that a pointer key does not outlive its tracking.
func (p *LFU[K]) release(k K, i int32) {
	delete(p.index, k)
	p.nodes[i] = node[K]{prev: none, next: p.free}
	p.free = i
}
