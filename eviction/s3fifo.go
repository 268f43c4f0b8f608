package eviction

import (
	"fmt"
	"math"
)

// S3FIFOConfig sizes an [S3FIFO] policy. Zero fields take the defaults of
// libCacheSim's S3FIFO ("small-size-ratio=0.10, ghost-size-ratio=0.90,
// move-to-main-threshold=2").
type S3FIFOConfig struct {
	// Capacity is the size of the cache the policy orders, in the unit of
	// Entry.Size (bytes, or objects when every size is 1). It must be at
	// least 1.
	Capacity int64
	// SmallRatio is the share of Capacity given to the small (probationary)
	// FIFO. Zero means 0.10; otherwise it must be in (0, 1).
	SmallRatio float64
	// GhostRatio sizes the ghost queue of recently evicted keys, as a
	// share of Capacity, counted in the same unit (the ghost remembers each
	// key's size). Zero means 0.90; otherwise it must be positive and
	// finite.
	GhostRatio float64
	// MoveToMainThreshold is how many hits a key must get while in the small
	// FIFO to be moved to the main FIFO instead of the ghost when it reaches
	// the small FIFO's head. Zero means 2 (libCacheSim's default); the
	// S3-FIFO paper and blog describe 1. It must be in [1, 255].
	MoveToMainThreshold int
	// Original selects the original S3-FIFO (libCacheSim's S3FIFOv0.c): a
	// new key always enters the small queue, also before the first Evict.
	// The default (false) is the December 2024 version, which sends new
	// keys to main while small is full and nothing was evicted yet.
	Original bool
}

// Default S3-FIFO parameters, as in libCacheSim.
const (
	DefaultS3FIFOSmallRatio          = 0.10
	DefaultS3FIFOGhostRatio          = 0.90
	DefaultS3FIFOMoveToMainThreshold = 2
)

func (c S3FIFOConfig) withDefaults() (S3FIFOConfig, error) {
	if c.SmallRatio == 0 {
		c.SmallRatio = DefaultS3FIFOSmallRatio
	}
	if c.GhostRatio == 0 {
		c.GhostRatio = DefaultS3FIFOGhostRatio
	}
	if c.MoveToMainThreshold == 0 {
		c.MoveToMainThreshold = DefaultS3FIFOMoveToMainThreshold
	}
	switch {
	case c.Capacity < 1:
		return c, fmt.Errorf("%w: S3-FIFO Capacity %d must be at least 1", ErrInvalidConfig, c.Capacity)
	case !(c.SmallRatio > 0 && c.SmallRatio < 1):
		return c, fmt.Errorf("%w: S3-FIFO SmallRatio %v is outside (0, 1)", ErrInvalidConfig, c.SmallRatio)
	case !(c.GhostRatio > 0) || math.IsInf(c.GhostRatio, 0):
		return c, fmt.Errorf("%w: S3-FIFO GhostRatio %v must be positive and finite", ErrInvalidConfig, c.GhostRatio)
	case c.MoveToMainThreshold < 1 || c.MoveToMainThreshold > math.MaxUint8:
		return c, fmt.Errorf("%w: S3-FIFO MoveToMainThreshold %d is outside [1, 255]", ErrInvalidConfig, c.MoveToMainThreshold)
	}
	return c, nil
}

// Where a node of an S3FIFO is. The first three are also the sentinels of
// the three lists in the slab.
const (
	s3Small   uint8 = iota // in the small FIFO (or pinned, out of it)
	s3Main                 // in the main FIFO (or pinned, out of it)
	s3Ghost                // in the ghost FIFO: not tracked, only remembered
	s3Claimed              // taken out of the ghost by Admit, awaiting Insert
	s3Lists   = 3
)

// s3Meta is what S3FIFO keeps per node besides the key and links.
type s3Meta struct {
	size   int64
	freq   uint8 // hits, saturating at S3FIFO.freqCap
	queue  uint8 // s3Small, s3Main, s3Ghost or s3Claimed
	pinned bool  // tracked but out of its list
}

// S3FIFO is the S3-FIFO eviction policy (Yang et al., "FIFO queues are all
// you need for cache eviction", SOSP 2023) with the semantics of
// libCacheSim's libCacheSim/cache/eviction/S3FIFO.c as of December 2024, so
// that a replay gives libCacheSim's miss counts (see package replay).
//
// Three FIFO queues, sized in the unit of Entry.Size:
//
//   - small, SmallRatio (10%) of Capacity: where a new key goes;
//   - main, the rest of Capacity: keys that proved themselves;
//   - ghost, GhostRatio (90%) of Capacity: keys recently evicted from
//     small, with their sizes but no data.
//
// Each tracked key has a hit counter. Insert puts a key that is in the ghost
// into main (the ghost entry is consumed); any other key goes into small,
// except that until the first Evict, a key arriving when small is full goes
// into main (the December 2024 change: the cache fills main during warm-up
// instead of evicting from a full small queue; S3FIFOConfig.Original turns
// it off, giving libCacheSim's S3FIFOv0). Access increments the
// counter. Evict takes from main if main holds more than its share or small
// is empty, else from small:
//
//   - from small, the head is moved to main's tail (counter reset to 0) if
//     it had at least MoveToMainThreshold hits (default 2), else evicted and
//     remembered in the ghost; this repeats until one key is evicted or
//     small is empty (then Evict goes to main);
//   - from main, the head is evicted if its counter is 0, else reinserted at
//     main's tail with counter min(counter, 3) - 1: a 2-bit CLOCK.
//
// The ghost is a FIFO bounded by the sum of its sizes: remembering a key
// drops the oldest ghost entries until it fits; a key larger than the ghost
// is not remembered.
//
// Beyond libCacheSim (which simulates a cache and owns its capacity), the
// policy keeps the [Policy] contract:
//
//   - A pinned key leaves its queue, so scans never meet it and Evict stays
//     O(1) amortized however many keys are pinned; its bytes then count in
//     neither queue's share. It keeps its counter, and Access still counts
//     while it is pinned. Unpin puts it back at the tail of the queue it
//     left: a pin means "in use", so its release is its most recent use.
//   - Insert always tracks the key. libCacheSim refuses (does not cache) a
//     key whose size is at least the small queue's size; here such a key
//     goes straight into main, where it waits its turn instead of flushing
//     the whole small queue. A classic cache that wants libCacheSim's
//     refusals asks [S3FIFO.Admit] first, as package replay does.
//   - Remove drops a key without remembering it in the ghost, as
//     libCacheSim's remove does.
//
// Cost: Access, Pin, Unpin, Remove and Admit do one index operation and
// O(1) list work; Insert a lookup and a store (only the store right after
// Admit found the key absent). Evict deletes its victim, or the ghost
// entries it displaces, from the index and is O(1) amortized: each key
// moves from small to main at most once per insertion, and each main
// reinsertion spends one of at most 3 counted hits. Nodes (tracked and
// ghost) live in a slab indexed by int32 with a free list, so once the
// working set stops growing nothing allocates. Per key: one index entry (a
// Go map's, or 4 bytes per possible key with a [DenseIndex]) plus a 32-byte
// node for uint64 keys; ghost keys cost the same. The index holds the
// tracked keys and the ghost keys.
//
// The zero S3FIFO is not usable; create one with [NewS3FIFO] or
// [NewS3FIFOWithIndex]. An S3FIFO is not safe for concurrent use.
type S3FIFO[K comparable] struct {
	slab linkedSlab[K, s3Meta]
	keys keyIndex[K] // tracked, ghost and claimed keys

	bytes   [s3Lists]int64 // sum of sizes linked on each list
	count   [s3Lists]int   // nodes linked on each list
	tracked int            // Len: small + main + pinned

	capacity, smallCap, mainCap, ghostCap int64
	threshold, freqCap                    uint8

	// hasEvicted is libCacheSim's has_evicted: false until the first
	// Evict, while a full small queue overflows into main. NewS3FIFO sets
	// it for the Original version, which never overflows.
	hasEvicted bool
	// claimed is the node Admit took out of the ghost, or noLink.
	claimed int32
	// absent is a key Admit found in no queue, while absentValid. Only
	// Insert and Admit add keys to the index, and both clear absentValid,
	// so until then the Insert that follows Admit can skip its lookup: one
	// hash probe less per miss in a replay.
	absent      K
	absentValid bool

	// tx holds what Begin saved.
	tx s3Scalars[K]
}

// s3Scalars are the fields of an S3FIFO that Begin saves.
type s3Scalars[K comparable] struct {
	bytes       [s3Lists]int64
	count       [s3Lists]int
	tracked     int
	hasEvicted  bool
	claimed     int32
	absent      K
	absentValid bool
}

var (
	_ Policy[int]    = (*S3FIFO[int])(nil)
	_ Forgetter[int] = (*S3FIFO[int])(nil)
)

// NewS3FIFO returns an empty S3-FIFO policy for a cache of cfg.Capacity. The
// queue sizes are computed as libCacheSim does: small =
// floor(Capacity*SmallRatio), main = Capacity - small, ghost =
// floor(Capacity*GhostRatio) (at most math.MaxInt64). It returns an error
// wrapping [ErrInvalidConfig] when a field is out of range. Keys are
// indexed with a Go map.
func NewS3FIFO[K comparable](cfg S3FIFOConfig) (*S3FIFO[K], error) {
	return NewS3FIFOWithIndex[K](cfg, nil)
}

// NewS3FIFOWithIndex is [NewS3FIFO] with the keys indexed by idx, or by a
// Go map when idx is nil. The index holds the ghost keys too. It returns an
// error wrapping [ErrInvalidConfig] for a bad cfg, a nil *DenseIndex or an
// index that already belongs to a policy.
func NewS3FIFOWithIndex[K comparable](cfg S3FIFOConfig, idx Index[K]) (*S3FIFO[K], error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	keys, err := newKeyIndex(idx)
	if err != nil {
		return nil, err
	}
	p := &S3FIFO[K]{
		keys:      keys,
		capacity:  cfg.Capacity,
		smallCap:  int64(float64(cfg.Capacity) * cfg.SmallRatio),
		ghostCap:  ghostCapacity(cfg),
		threshold: uint8(cfg.MoveToMainThreshold),
		freqCap:   max(3, uint8(cfg.MoveToMainThreshold)),
		claimed:   noLink,
		// The original version behaves as if eviction had started.
		hasEvicted: cfg.Original,
	}
	p.mainCap = p.capacity - p.smallCap
	p.slab.init(s3Lists)
	return p, nil
}

// ghostCapacity is floor(Capacity*GhostRatio), or math.MaxInt64 when that
// does not fit in an int64 (GhostRatio may exceed 1): converting such a
// float to int64 gives an unspecified, on amd64 negative, value.
func ghostCapacity(cfg S3FIFOConfig) int64 {
	g := float64(cfg.Capacity) * cfg.GhostRatio
	if g >= math.MaxInt64 { // the constant rounds to 2^63 as a float64
		return math.MaxInt64
	}
	return int64(g)
}

// Insert starts tracking k as evictable. A key remembered in the ghost (or
// claimed by [S3FIFO.Admit]) goes to the main FIFO, any other key to the
// small FIFO (see the type's documentation for the exceptions). It returns
// an error wrapping [ErrInvalidEntry] for an invalid e, one wrapping
// [ErrKeyExists] when k is already tracked, one wrapping
// [ErrKeyOutOfRange] when the index cannot hold k and one wrapping
// [ErrTooManyKeys] when the slab is full; the policy is then unchanged,
// but for a claim of [S3FIFO.Admit], which lapses at any Insert of another
// key. Only e.Size is used.
func (p *S3FIFO[K]) Insert(k K, e Entry) error {
	if err := e.Validate(); err != nil {
		return err
	}
	var i int32
	ok := false
	if !p.absentValid || p.absent != k {
		i, ok = p.keys.lookup(k)
	}
	p.forgetAbsent()
	if ok {
		switch p.slab.nodes.at(i).meta.queue {
		case s3Ghost:
			p.detach(i)
		case s3Claimed:
			p.claimed = noLink
		default:
			return trackedKeyError(k)
		}
		p.dropClaim()
		*p.slab.meta(i) = s3Meta{size: e.Size, queue: s3Main}
		p.attach(s3Main, i)
		p.tracked++
		return nil
	}
	p.dropClaim()
	i, err := p.slab.alloc(k, s3Meta{size: e.Size})
	if err != nil {
		return err
	}
	if err := p.keys.store(k, i); err != nil {
		p.slab.release(i)
		return err
	}
	q := s3Small
	if e.Size >= p.smallCap || (!p.hasEvicted && p.bytes[s3Small] >= p.smallCap) {
		q = s3Main
	}
	p.slab.meta(i).queue = q
	p.attach(q, i)
	p.tracked++
	return nil
}

// Access counts a hit on k, pinned or not. It does nothing for a key that
// is not tracked (including a ghost key).
func (p *S3FIFO[K]) Access(k K) {
	i, ok := p.keys.lookup(k)
	if !ok {
		return
	}
	if m := &p.slab.nodes.at(i).meta; m.queue <= s3Main && m.freq < p.freqCap {
		p.slab.meta(i).freq++
	}
}

// Pin takes an evictable k out of its queue until Unpin; its hit counter
// is kept. It does nothing for an unknown or pinned k.
func (p *S3FIFO[K]) Pin(k K) {
	i, ok := p.keys.lookup(k)
	if !ok {
		return
	}
	if m := &p.slab.nodes.at(i).meta; m.queue > s3Main || m.pinned {
		return
	}
	p.detach(i)
	p.slab.meta(i).pinned = true
}

// Unpin puts a pinned k back at the tail of the queue it left. It does
// nothing for an unknown or evictable k.
func (p *S3FIFO[K]) Unpin(k K) {
	i, ok := p.keys.lookup(k)
	if !ok {
		return
	}
	if m := &p.slab.nodes.at(i).meta; m.queue > s3Main || !m.pinned {
		return
	}
	m := p.slab.meta(i)
	m.pinned = false
	p.attach(m.queue, i)
}

// Remove stops tracking k, pinned or not, without remembering it in the
// ghost. It does nothing for a key that is not tracked.
func (p *S3FIFO[K]) Remove(k K) {
	i, ok := p.keys.lookup(k)
	if !ok {
		return
	}
	m := &p.slab.nodes.at(i).meta
	if m.queue > s3Main {
		return
	}
	if !m.pinned {
		p.detach(i)
	}
	p.forget(i)
	p.tracked--
}

// Forget drops k's ghost entry (or the claim Admit holds on it), if it has
// one: k will never be inserted again, and its entry would only take the
// room of other keys' (see [Forgetter]). It does nothing for a tracked or
// unknown key.
func (p *S3FIFO[K]) Forget(k K) {
	i, ok := p.keys.lookup(k)
	if !ok {
		return
	}
	switch p.slab.nodes.at(i).meta.queue {
	case s3Ghost:
		p.detach(i)
		p.forget(i)
	case s3Claimed:
		p.dropClaim()
	}
}

// Evict chooses a victim as described in the type's documentation, stops
// tracking it and returns it; a victim taken from the small FIFO is
// remembered in the ghost. It returns false when every tracked key is
// pinned (or none is tracked).
func (p *S3FIFO[K]) Evict() (K, bool) {
	p.hasEvicted = true
	for {
		if p.count[s3Small] == 0 && p.count[s3Main] == 0 {
			var zero K
			return zero, false
		}
		if p.bytes[s3Main] > p.mainCap || p.count[s3Small] == 0 {
			return p.evictMain(), true
		}
		if k, ok := p.evictSmall(); ok {
			return k, true
		}
		// Every key of small had enough hits and moved to main: go again,
		// now from main, as libCacheSim's next evict call would.
	}
}

// evictMain runs the 2-bit CLOCK over main until a key with no hits left
// reaches the head, and evicts it. Main is not empty.
func (p *S3FIFO[K]) evictMain() K {
	head := int32(s3Main)
	for {
		i := p.slab.front(head)
		m := &p.slab.nodes.at(i).meta
		if m.freq == 0 {
			k := p.slab.nodes.at(i).key
			p.detach(i)
			p.forget(i)
			p.tracked--
			return k
		}
		f := min(m.freq, 3) - 1
		p.slab.moveToBack(head, i)
		p.slab.meta(i).freq = f
	}
}

// evictSmall moves the heads of small that earned it to main and evicts
// the first that did not, remembering it in the ghost. It returns false if
// small ran empty first.
func (p *S3FIFO[K]) evictSmall() (K, bool) {
	for p.count[s3Small] > 0 {
		i := p.slab.front(int32(s3Small))
		p.detach(i)
		if p.slab.nodes.at(i).meta.freq >= p.threshold {
			m := p.slab.meta(i)
			m.freq = 0
			m.queue = s3Main
			p.attach(s3Main, i)
			continue
		}
		k := p.slab.nodes.at(i).key
		p.tracked--
		p.remember(i)
		return k, true
	}
	var zero K
	return zero, false
}

// remember turns detached node i, just evicted from small, into a ghost
// entry, making room in the ghost by dropping its oldest entries. A key
// larger than the ghost is forgotten.
func (p *S3FIFO[K]) remember(i int32) {
	size := p.slab.nodes.at(i).meta.size
	if size > p.ghostCap {
		p.forget(i)
		return
	}
	// ghostCap-bytes cannot overflow (bytes <= ghostCap), where bytes+size
	// can when ghostCap nears math.MaxInt64.
	for size > p.ghostCap-p.bytes[s3Ghost] {
		g := p.slab.front(int32(s3Ghost))
		p.detach(g)
		p.forget(g)
	}
	m := p.slab.meta(i)
	m.freq = 0
	m.queue = s3Ghost
	p.attach(s3Ghost, i)
}

// Admit is for a classic cache that, like libCacheSim, may refuse to cache
// a missed object. Call it once for a key that missed, before making room:
// if makeRoom, evict until the object fits; then, if insert, Insert k. The
// two answers are libCacheSim's can_insert and insert of S3FIFO:
//
//   - a key in the ghost: both true if 1 <= size <= the small queue's size
//     and size <= Capacity;
//   - any other key: makeRoom as above, but insert only if size is below
//     the small queue's size. An object exactly as large as the small queue
//     makes room and is then not cached, a quirk of libCacheSim kept so
//     that replays match it.
//
// Like libCacheSim's lookup, Admit consumes k's ghost entry whatever it
// answers, and an insert answer for a ghost key holds a claim that sends the
// next Insert of k to main even if k would have aged out of the ghost while
// room was made. The claim lapses at the next Admit or Insert of another
// key. For a key that is already tracked Admit returns false, false.
func (p *S3FIFO[K]) Admit(k K, size int64) (makeRoom, insert bool) {
	p.dropClaim()
	makeRoom = size >= 1 && size <= p.capacity && size <= p.smallCap
	i, ok := p.keys.lookup(k)
	if !ok {
		p.absent, p.absentValid = k, true
		return makeRoom, makeRoom && size < p.smallCap
	}
	p.forgetAbsent()
	if p.slab.nodes.at(i).meta.queue != s3Ghost {
		return false, false
	}
	p.detach(i)
	if !makeRoom {
		p.forget(i)
		return false, false
	}
	p.slab.meta(i).queue = s3Claimed
	p.claimed = i
	return true, true
}

// Len returns the number of tracked keys, pinned or not. Ghost keys are
// not tracked.
func (p *S3FIFO[K]) Len() int {
	return p.tracked
}

// attach appends detached node i to list q and counts its size there.
func (p *S3FIFO[K]) attach(q uint8, i int32) {
	p.slab.pushBack(int32(q), i)
	p.bytes[q] += p.slab.nodes.at(i).meta.size
	p.count[q]++
}

// detach unlinks node i from the list it is on and uncounts its size.
func (p *S3FIFO[K]) detach(i int32) {
	m := &p.slab.nodes.at(i).meta
	p.slab.unlink(i)
	p.bytes[m.queue] -= m.size
	p.count[m.queue]--
}

// forget deletes detached node i from the index and frees it.
func (p *S3FIFO[K]) forget(i int32) {
	p.keys.delete(p.slab.nodes.at(i).key, i)
	p.slab.release(i)
}

// forgetAbsent ends Admit's promise that a key is in no queue.
func (p *S3FIFO[K]) forgetAbsent() {
	var zero K
	p.absent, p.absentValid = zero, false
}

// dropClaim forgets a ghost entry Admit claimed and no Insert used.
func (p *S3FIFO[K]) dropClaim() {
	if p.claimed != noLink {
		p.forget(p.claimed)
		p.claimed = noLink
	}
}

// InsertPinned is Insert followed by Pin (see [PinnedInserter]).
func (p *S3FIFO[K]) InsertPinned(k K, e Entry) error {
	if err := p.Insert(k, e); err != nil {
		return err
	}
	p.Pin(k)
	return nil
}

var _ PinnedInserter[int] = (*S3FIFO[int])(nil)
