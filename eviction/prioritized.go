package eviction

import (
	"math"
	"math/bits"
	"time"
)

// PrioritizedLRU evicts by priority first and recency second, with the
// semantics of TensorRT-LLM's KV-cache eviction policy (LRUEvictionPolicy,
// driven by KvCacheRetentionConfig and its TokenRangeRetentionConfig
// entries):
//
//   - Every key has a priority in [MinPriority, MaxPriority], from
//     [Entry.Priority]. All evictable keys of the lowest non-empty priority
//     are evicted before any key of a higher one.
//   - Within a priority, the least recently used key goes first. Insert,
//     Access of an evictable key and Unpin make a key the most recently used
//     of its priority.
//   - [Entry.PriorityDuration], when positive, limits how long the priority
//     holds: the timer starts when the key becomes evictable (Insert,
//     Unpin), stops while it is pinned, and starts again from zero at each
//     Unpin. A key whose timer reaches the duration while it is evictable
//     falls back to [DefaultPriority] for good, joining that level as its
//     most recently used key at the instant of expiry. A key is expired at
//     time t when its expiry time is at or before t. Expiries at the same
//     instant take effect in the order their timers started, and before any
//     operation at that instant. A key inserted at DefaultPriority has
//     nothing to fall back from and ignores its duration. Access does not
//     restart the timer.
//
// Pinning, as in TensorRT-LLM where a reused block is claimed and later
// released at the back of its queue: a pinned key leaves its level's list
// but keeps its priority and duration (its history), and Unpin
// appends it to the back of its level, as its most recent use.
//
// Algorithm: one slab-backed doubly linked list per priority level (101
// lists, int32 indices, free list), a 128-bit bitmap of non-empty levels,
// and an index from key to node (a Go map, or the [Index] given to
// [NewPrioritizedLRUWithIndex]; both make the same choices). Evict finds
// the lowest non-empty level with one trailing-zeros count on the bitmap
// and takes that list's front, so choosing a victim is O(1) whatever the
// number of keys or levels. Expiries
// are kept exact but lazy: evictable keys with a running timer sit in a
// min-heap keyed by expiry time, and every operation that adds a key to a
// list or chooses one first moves the keys whose expiry has passed to the
// back of the default level, in expiry order. That is the same order as if
// each had moved at its exact expiry instant, because no operation happened
// between an expiry and the drain that handles it. The clock is read only
// when the heap is not empty or the key being inserted or unpinned carries
// a duration.
//
// Costs: Insert, Access, Pin, Unpin, Remove and Evict are O(1) for keys
// without a duration; keys with a running timer add O(log h) heap work (h
// timed evictable keys), paid once per timer. Once the number of tracked
// keys stops growing nothing allocates.
//
// The zero PrioritizedLRU is not usable; create one with
// [NewPrioritizedLRU] or [NewPrioritizedLRUWithIndex]. A PrioritizedLRU is
// not safe for concurrent use.
type PrioritizedLRU[K comparable] struct {
	clock Clock
	// slab holds one list per level; the list of level l has sentinel l.
	slab linkedSlab[K, prioritizedMeta]
	keys keyIndex[K]
	// nonEmpty has bit l set when level l's list holds a key.
	nonEmpty [2]uint64
	// expiring holds the evictable keys whose priority will expire, keyed by
	// expiry time and then by when their timer started.
	expiring stampHeap
	timers   uint64
	// durations holds each node's priority duration: how long its
	// priority holds once it is evictable, 0 once it has expired or when it
	// never does. It is kept apart from the nodes so that the list walks of
	// Access and Evict touch 24-byte nodes, and it only grows as far as the
	// highest node that ever had a duration (not at all when none does).
	durations sparse[time.Duration]

	// tx holds what Begin saved; txDurations journals durations.
	tx          prioritizedScalars
	txDurations sparseJournal[time.Duration]
}

// prioritizedScalars are the fields of a PrioritizedLRU that Begin saves.
type prioritizedScalars struct {
	nonEmpty [2]uint64
	timers   uint64
}

// prioritizedMeta is PrioritizedLRU's per-key data kept in the node.
type prioritizedMeta struct {
	level  uint8
	pinned bool
}

var (
	_ Policy[int]         = (*PrioritizedLRU[int])(nil)
	_ PinnedAccessIgnorer = (*PrioritizedLRU[int])(nil)
	_ PinnedInserter[int] = (*PrioritizedLRU[int])(nil)
)

// priorityLevels is the number of priority levels, one list each.
const priorityLevels = MaxPriority - MinPriority + 1

// NewPrioritizedLRU returns an empty prioritized LRU that reads priority
// expiries from clock. A nil clock means a [SystemClock] created now, so
// durations always run out; pass a [ManualClock] for simulations and tests.
// Keys are indexed with a Go map.
func NewPrioritizedLRU[K comparable](clock Clock) *PrioritizedLRU[K] {
	return newPrioritizedLRU(clock, keyIndex[K]{m: make(map[K]int32)})
}

// NewPrioritizedLRUWithIndex is [NewPrioritizedLRU] with the keys indexed
// by idx, or by a Go map when idx is nil. It returns an error wrapping
// [ErrInvalidConfig] when idx is a nil *DenseIndex or already belongs to a
// policy.
func NewPrioritizedLRUWithIndex[K comparable](clock Clock, idx Index[K]) (*PrioritizedLRU[K], error) {
	keys, err := newKeyIndex(idx)
	if err != nil {
		return nil, err
	}
	return newPrioritizedLRU(clock, keys), nil
}

func newPrioritizedLRU[K comparable](clock Clock, keys keyIndex[K]) *PrioritizedLRU[K] {
	if clock == nil {
		clock = NewSystemClock()
	}
	p := &PrioritizedLRU[K]{clock: clock, keys: keys}
	p.slab.init(priorityLevels)
	return p
}

// Insert starts tracking k as the most recently used evictable key of
// priority e.Priority, for e.PriorityDuration when positive. It returns an
// error wrapping [ErrInvalidEntry] for an invalid e, one wrapping
// [ErrKeyExists] when k is already tracked, one wrapping
// [ErrKeyOutOfRange] when the index cannot hold k and one wrapping
// [ErrTooManyKeys] when the slab is full; the policy is then unchanged.
func (p *PrioritizedLRU[K]) Insert(k K, e Entry) error {
	if err := e.Validate(); err != nil {
		return err
	}
	if _, ok := p.keys.lookup(k); ok {
		return trackedKeyError(k)
	}
	i, err := p.slab.alloc(k, prioritizedMeta{level: uint8(e.Priority - MinPriority)})
	if err != nil {
		return err
	}
	if err := p.keys.store(k, i); err != nil {
		p.slab.release(i)
		return err
	}
	if e.Priority != DefaultPriority {
		p.setDuration(i, e.PriorityDuration)
	}
	p.expire()
	p.release(i)
	return nil
}

// Access makes an evictable k the most recently used key of its priority.
// It does nothing for a pinned or unknown k, and does not restart k's
// priority timer.
func (p *PrioritizedLRU[K]) Access(k K) {
	i, ok := p.keys.lookup(k)
	if !ok || p.slab.nodes.at(i).meta.pinned {
		return
	}
	p.expire()
	p.slab.moveToBack(int32(p.slab.nodes.at(i).meta.level), i)
}

// Pin makes k ineligible for eviction until Unpin and stops its priority
// timer. It does nothing for an unknown or already pinned k.
func (p *PrioritizedLRU[K]) Pin(k K) {
	i, ok := p.keys.lookup(k)
	if !ok || p.slab.nodes.at(i).meta.pinned {
		return
	}
	// A priority that ran out before the pin has fallen back for good.
	p.expire()
	p.detach(i)
	p.slab.meta(i).pinned = true
}

// Unpin makes a pinned k evictable again as the most recently used key of
// its priority, and restarts its priority timer if its priority has not
// expired. It does nothing for an unknown or evictable k.
func (p *PrioritizedLRU[K]) Unpin(k K) {
	i, ok := p.keys.lookup(k)
	if !ok || !p.slab.nodes.at(i).meta.pinned {
		return
	}
	p.slab.meta(i).pinned = false
	p.expire()
	p.release(i)
}

// Remove stops tracking k, pinned or not. It does nothing for an unknown k.
func (p *PrioritizedLRU[K]) Remove(k K) {
	i, ok := p.keys.lookup(k)
	if !ok {
		return
	}
	p.forget(i)
}

// Evict removes and returns the least recently used evictable key of the
// lowest priority that has one, priorities read at the clock's current
// time. It returns false when every tracked key is pinned or none is
// tracked.
func (p *PrioritizedLRU[K]) Evict() (K, bool) {
	p.expire()
	var level int
	switch {
	case p.nonEmpty[0] != 0:
		level = bits.TrailingZeros64(p.nonEmpty[0])
	case p.nonEmpty[1] != 0:
		level = 64 + bits.TrailingZeros64(p.nonEmpty[1])
	default:
		var zero K
		return zero, false
	}
	i := p.slab.front(int32(level))
	k := p.slab.nodes.at(i).key
	p.forget(i)
	return k, true
}

// Len returns the number of tracked keys, pinned or not.
func (p *PrioritizedLRU[K]) Len() int {
	return p.keys.len()
}

// release appends detached node i to the back of its level and starts its
// priority timer.
func (p *PrioritizedLRU[K]) release(i int32) {
	level := p.slab.nodes.at(i).meta.level
	p.slab.pushBack(int32(level), i)
	p.nonEmpty[level>>6] |= 1 << (level & 63)
	if d := p.duration(i); d > 0 {
		p.expiring.push(i, expiryTime(p.clock.Now(), d), p.timers)
		p.timers++
	}
}

// detach takes evictable node i off its level's list and stops its timer.
func (p *PrioritizedLRU[K]) detach(i int32) {
	level := p.slab.nodes.at(i).meta.level
	p.slab.unlink(i)
	if p.slab.front(int32(level)) == int32(level) {
		p.nonEmpty[level>>6] &^= 1 << (level & 63)
	}
	p.expiring.remove(i)
}

// forget stops tracking node i.
func (p *PrioritizedLRU[K]) forget(i int32) {
	if !p.slab.nodes.at(i).meta.pinned {
		p.detach(i)
	}
	p.setDuration(i, 0) // the node will be reused
	p.keys.delete(p.slab.nodes.at(i).key, i)
	p.slab.release(i)
}

// duration returns node i's priority duration.
func (p *PrioritizedLRU[K]) duration(i int32) time.Duration { return p.durations.get(uint64(i)) }

// setDuration sets node i's priority duration, allocating a chunk of
// durations only when d is not zero.
func (p *PrioritizedLRU[K]) setDuration(i int32, d time.Duration) {
	old := p.durations.get(uint64(i))
	if old == d {
		return
	}
	p.txDurations.save(uint64(i), old)
	*p.durations.ref(uint64(i)) = d
}

// expire moves every evictable key whose priority has run out by now to the
// back of the default level, earliest expiry first.
func (p *PrioritizedLRU[K]) expire() {
	if p.expiring.len() == 0 {
		return
	}
	now := int64(p.clock.Now())
	for p.expiring.len() > 0 && p.expiring.min().at <= now {
		i := p.expiring.min().node
		p.detach(i) // also pops it from the heap
		p.slab.meta(i).level = DefaultPriority - MinPriority
		p.setDuration(i, 0)
		p.release(i)
	}
}

// expiryTime returns now+d, saturated so that a huge duration means never
// rather than an overflow into the past.
func expiryTime(now, d time.Duration) int64 {
	if d > math.MaxInt64-now {
		return math.MaxInt64
	}
	return int64(now + d)
}

// IgnoresPinnedAccess returns true: its Access of a pinned key does nothing: the Unpin that follows makes the key the most recent of its level. See [PinnedAccessIgnorer].
func (p *PrioritizedLRU[K]) IgnoresPinnedAccess() bool { return true }

// InsertPinned is Insert followed by Pin (see [PinnedInserter]).
func (p *PrioritizedLRU[K]) InsertPinned(k K, e Entry) error {
	if err := p.Insert(k, e); err != nil {
		return err
	}
	p.Pin(k)
	return nil
}
