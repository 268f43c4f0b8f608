package eviction

import (
	"fmt"
	"math"
	"reflect"
)

// WTinyLFUConfig sizes a [WTinyLFU] policy.
type WTinyLFUConfig struct {
	// Capacity is the size of the cache the policy orders, in the unit of
	// Entry.Size (bytes, or objects when every size is 1). It must be at
	// least 1.
	Capacity int64
	// Keys is about how many keys the cache holds when full; it sizes the
	// frequency sketch (8 bytes and 8 doorkeeper bits per key, rounded up
	// to a power of two, at least 16) and its sample (the first aging
	// after 10 × Keys sightings, the next ones every 5 × Keys). Zero
	// means Capacity, at most 2^20 (a sketch of 9 MiB), which is right
	// when every size is 1; with sizes in bytes, give the capacity over
	// the typical size. It must be in [0, 2^30].
	Keys int
	// WindowRatio is the share of Capacity given to the window, the LRU
	// that every new key enters. Zero means 0.01 (Caffeine's initial
	// share); otherwise it must be in (0, 1).
	WindowRatio float64
	// ProtectedRatio is the share of the main space (Capacity less the
	// window) given to its protected segment. Zero means 0.80 (Caffeine's);
	// otherwise it must be in (0, 1).
	ProtectedRatio float64
}

// Default W-TinyLFU parameters, as in Caffeine.
const (
	DefaultWTinyLFUWindowRatio    = 0.01
	DefaultWTinyLFUProtectedRatio = 0.80
)

// maxSketchKeys bounds WTinyLFUConfig.Keys: a sketch of 2^30 keys takes
// 9 GiB. defaultSketchKeys bounds the Keys that Capacity gives: a
// capacity in bytes would otherwise ask for gigabytes.
const (
	maxSketchKeys     = 1 << 30
	defaultSketchKeys = 1 << 20
)

func (c WTinyLFUConfig) withDefaults() (WTinyLFUConfig, error) {
	if c.WindowRatio == 0 {
		c.WindowRatio = DefaultWTinyLFUWindowRatio
	}
	if c.ProtectedRatio == 0 {
		c.ProtectedRatio = DefaultWTinyLFUProtectedRatio
	}
	switch {
	case c.Capacity < 1:
		return c, fmt.Errorf("%w: W-TinyLFU Capacity %d must be at least 1", ErrInvalidConfig, c.Capacity)
	case c.Keys < 0 || c.Keys > maxSketchKeys:
		return c, fmt.Errorf("%w: W-TinyLFU Keys %d is outside [0, 2^30]", ErrInvalidConfig, c.Keys)
	case !(c.WindowRatio > 0 && c.WindowRatio < 1):
		return c, fmt.Errorf("%w: W-TinyLFU WindowRatio %v is outside (0, 1)", ErrInvalidConfig, c.WindowRatio)
	case !(c.ProtectedRatio > 0 && c.ProtectedRatio < 1):
		return c, fmt.Errorf("%w: W-TinyLFU ProtectedRatio %v is outside (0, 1)", ErrInvalidConfig, c.ProtectedRatio)
	}
	if c.Keys == 0 {
		c.Keys = int(min(c.Capacity, defaultSketchKeys))
	}
	return c, nil
}

// Where a node of a WTinyLFU is; each is also the sentinel of its list.
const (
	wtlWindow    uint8 = iota // the window LRU
	wtlProbation              // main: admitted, not hit since
	wtlProtected              // main: hit while in main
	wtlLists     = 3
)

// wtlMeta is what WTinyLFU keeps per node besides the key and links.
type wtlMeta struct {
	size   int64
	hash   uint64
	list   uint8
	pinned bool // tracked but out of its list
}

// WTinyLFU is the W-TinyLFU eviction policy (Einziger, Friedman and Manes,
// "TinyLFU: A Highly Efficient Cache Admission Policy", ACM ToS 2017), the
// one Caffeine and otter use: a small window LRU in front of a segmented
// LRU, and between them an admission filter that lets a key into the main
// space only if it was seen more often, recently, than the key it would
// push out. Use it where popularity is skewed and stable (Zipf-like
// requests, shared system prompts): the frequency sketch remembers keys
// long after they left, so a popular key that was evicted once gets back
// in, and a burst of keys seen once passes through the window without
// touching the main space.
//
// Three lists, sized in the unit of Entry.Size:
//
//   - the window (WindowRatio of Capacity, 1%): every new key enters here;
//   - probation (the rest of the main space): keys admitted from the
//     window and keys demoted from protected;
//   - protected (ProtectedRatio of the main space, 80%): keys hit while
//     in probation; when it outgrows its share, its least recently used
//     keys are demoted to probation.
//
// Evict, as Caffeine's maintenance: the window's keys beyond its share
// move to probation, the first of them being the candidate (with none, the
// window's least recently used key is). The candidate and the victim
// (probation's least recently used key) compare their estimated
// frequencies, and the lower leaves: the candidate stays only if it was
// seen more often than the victim. With no candidate or no victim, the
// other leaves (protected's least recently used key when both lists are
// empty). The window's share is fixed (Caffeine adapts it by hill
// climbing; on the streams BENCHMARKS.md measures, a window of 0.1% to 5%
// moves the miss ratio by under 0.7 points).
//
// The frequencies come from a count-min sketch of 4-bit counters with a
// doorkeeper, aged by halving every counter after 10 × Keys sightings
// that changed it (a sighting of a key whose counters are all at 15 is
// not counted), then every 5 × Keys (the count halves with the counters),
// as in Caffeine; Insert and Access each count a sighting.
// Caffeine also admits, at random, a candidate that loses with a frequency
// above 5 (a defense against hash flooding); this policy admits only by
// frequency, so that it stays deterministic. Keys must be integers or
// strings (of any type name), which the sketch hashes the same way in every
// process.
//
// Beyond the algorithm, the policy keeps the [Policy] contract:
//
//   - A pinned key leaves its list, as with [S3FIFO]: Evict never meets it,
//     and its size counts in no list while it is pinned. Access of a pinned
//     key still counts (a key in probation moves to protected); Unpin puts
//     it back as its list's most recently used key.
//   - Remove drops a key; the sketch keeps what it counted of it.
//
// Cost: every call does one index operation and O(1) list work; Insert and
// Access also update the sketch (four counters and three doorkeeper bits),
// Evict reads two keys' estimates. Evict is O(1) amortized: a key moves
// from the window to probation once per insertion. The sketch is
// allocated at [NewWTinyLFU]; the first aging inside a transaction
// ([Transactional]; a kvcache tier with a Mover runs one per operation)
// copies it to undo it, a copy kept for the next ones, so the sketch's
// memory then doubles. Nodes live in a slab with a free list, so once the
// working set stops growing nothing allocates.
//
// The zero WTinyLFU is not usable; create one with [NewWTinyLFU] or
// [NewWTinyLFUWithIndex]. A WTinyLFU is not safe for concurrent use.
type WTinyLFU[K comparable] struct {
	slab linkedSlab[K, wtlMeta]
	keys keyIndex[K]
	hash func(K) uint64
	freq sketch

	bytes   [wtlLists]int64 // sum of sizes linked on each list
	count   [wtlLists]int   // nodes linked on each list
	tracked int

	windowCap, mainCap, protectedCap int64

	// tx holds what Begin saved.
	tx wtlScalars
}

// wtlScalars are the fields of a WTinyLFU that Begin saves.
type wtlScalars struct {
	bytes   [wtlLists]int64
	count   [wtlLists]int
	tracked int
}

var (
	_ Policy[int]         = (*WTinyLFU[int])(nil)
	_ PinnedInserter[int] = (*WTinyLFU[int])(nil)
)

// NewWTinyLFU returns an empty W-TinyLFU policy for a cache of
// cfg.Capacity, its keys indexed with a Go map. The window's size is
// max(1, floor(Capacity × WindowRatio)), the main space the rest,
// protected floor(main × ProtectedRatio). It returns an error wrapping
// [ErrInvalidConfig] when a field is out of range or K is neither an
// integer nor a string type.
func NewWTinyLFU[K comparable](cfg WTinyLFUConfig) (*WTinyLFU[K], error) {
	return NewWTinyLFUWithIndex[K](cfg, nil)
}

// NewWTinyLFUWithIndex is [NewWTinyLFU] with the keys indexed by idx, or by
// a Go map when idx is nil. It returns an error wrapping
// [ErrInvalidConfig] for a bad cfg or K, a nil *DenseIndex or an index
// that already belongs to a policy.
func NewWTinyLFUWithIndex[K comparable](cfg WTinyLFUConfig, idx Index[K]) (*WTinyLFU[K], error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	hash := keyHasher[K]()
	if hash == nil {
		return nil, fmt.Errorf("%w: W-TinyLFU keys must be integers or strings, not %v", ErrInvalidConfig, reflect.TypeFor[K]())
	}
	keys, err := newKeyIndex(idx)
	if err != nil {
		return nil, err
	}
	window := max(1, int64(float64(cfg.Capacity)*cfg.WindowRatio))
	main := max(0, cfg.Capacity-window)
	p := &WTinyLFU[K]{
		keys:         keys,
		hash:         hash,
		freq:         newSketch(cfg.Keys),
		windowCap:    window,
		mainCap:      main,
		protectedCap: int64(math.Floor(float64(main) * cfg.ProtectedRatio)),
	}
	p.slab.init(wtlLists)
	return p, nil
}

// Insert counts a sighting of k and starts tracking it, evictable, as the
// window's most recently used key. It returns an error wrapping
// [ErrInvalidEntry] for an invalid e, one wrapping [ErrKeyExists] when k
// is already tracked, one wrapping [ErrKeyOutOfRange] when the index
// cannot hold k and one wrapping [ErrTooManyKeys] when the slab is full;
// the policy is then unchanged. Only e.Size is used.
func (p *WTinyLFU[K]) Insert(k K, e Entry) error {
	if err := e.Validate(); err != nil {
		return err
	}
	if _, ok := p.keys.lookup(k); ok {
		return trackedKeyError(k)
	}
	h := p.hash(k)
	i, err := p.slab.alloc(k, wtlMeta{size: e.Size, hash: h, list: wtlWindow})
	if err != nil {
		return err
	}
	if err := p.keys.store(k, i); err != nil {
		p.slab.release(i)
		return err
	}
	p.freq.increment(h)
	p.attach(i)
	p.tracked++
	return nil
}

// Access counts a sighting of k, pinned or not, and makes it the most
// recently used key of its list; a key in probation moves to protected. It
// does nothing for a key that is not tracked.
func (p *WTinyLFU[K]) Access(k K) {
	i, ok := p.keys.lookup(k)
	if !ok {
		return
	}
	m := &p.slab.nodes.at(i).meta
	p.freq.increment(m.hash)
	switch {
	case m.pinned:
		if m.list == wtlProbation {
			p.slab.meta(i).list = wtlProtected
		}
	case m.list == wtlProbation:
		p.detach(i)
		p.slab.meta(i).list = wtlProtected
		p.attach(i)
		p.demote()
	default:
		p.slab.moveToBack(int32(m.list), i)
	}
}

// demote moves protected's least recently used keys to probation while
// protected holds more than its share.
func (p *WTinyLFU[K]) demote() {
	for p.bytes[wtlProtected] > p.protectedCap && p.count[wtlProtected] > 0 {
		j := p.slab.front(int32(wtlProtected))
		p.detach(j)
		p.slab.meta(j).list = wtlProbation
		p.attach(j)
	}
}

// Pin takes an evictable k out of its list until Unpin. It does nothing for
// an unknown or pinned k.
func (p *WTinyLFU[K]) Pin(k K) {
	i, ok := p.keys.lookup(k)
	if !ok || p.slab.nodes.at(i).meta.pinned {
		return
	}
	p.detach(i)
	p.slab.meta(i).pinned = true
}

// Unpin puts a pinned k back as the most recently used key of its list. It
// does nothing for an unknown or evictable k.
func (p *WTinyLFU[K]) Unpin(k K) {
	i, ok := p.keys.lookup(k)
	if !ok || !p.slab.nodes.at(i).meta.pinned {
		return
	}
	p.slab.meta(i).pinned = false
	p.attach(i)
	if p.slab.nodes.at(i).meta.list == wtlProtected {
		p.demote()
	}
}

// Remove stops tracking k, pinned or not; the sketch keeps its counts. It
// does nothing for a key that is not tracked.
func (p *WTinyLFU[K]) Remove(k K) {
	i, ok := p.keys.lookup(k)
	if !ok {
		return
	}
	if !p.slab.nodes.at(i).meta.pinned {
		p.detach(i)
	}
	p.forget(i)
	p.tracked--
}

// Evict chooses a victim as described in the type's documentation, stops
// tracking it and returns it. It returns false when every tracked key is
// pinned (or none is tracked), changing nothing.
func (p *WTinyLFU[K]) Evict() (K, bool) {
	if p.count[wtlWindow]+p.count[wtlProbation]+p.count[wtlProtected] == 0 {
		var zero K
		return zero, false
	}
	// The window's overflow moves to probation; the first key moved is
	// the candidate, or, with no overflow, the window's oldest key.
	cand := int32(noLink)
	for p.bytes[wtlWindow] > p.windowCap && p.count[wtlWindow] > 0 {
		c := p.slab.front(int32(wtlWindow))
		p.detach(c)
		p.slab.meta(c).list = wtlProbation
		p.attach(c)
		if cand == noLink {
			cand = c
		}
	}
	if cand == noLink && p.count[wtlWindow] > 0 {
		cand = p.slab.front(int32(wtlWindow))
	}
	victim := int32(noLink)
	if p.count[wtlProbation] > 0 {
		victim = p.slab.front(int32(wtlProbation))
	}
	switch {
	case cand == noLink && victim == noLink:
		return p.evict(p.slab.front(int32(wtlProtected))), true
	case cand == noLink:
		return p.evict(victim), true
	case victim == noLink, cand == victim, p.slab.nodes.at(cand).meta.size > p.windowCap+p.mainCap:
		return p.evict(cand), true
	case p.freq.estimate(p.slab.nodes.at(cand).meta.hash) > p.freq.estimate(p.slab.nodes.at(victim).meta.hash):
		return p.evict(victim), true
	default:
		return p.evict(cand), true
	}
}

// evict stops tracking linked node i and returns its key.
func (p *WTinyLFU[K]) evict(i int32) K {
	k := p.slab.nodes.at(i).key
	p.detach(i)
	p.forget(i)
	p.tracked--
	return k
}

// Len returns the number of tracked keys, pinned or not.
func (p *WTinyLFU[K]) Len() int {
	return p.tracked
}

// InsertPinned is Insert followed by Pin (see [PinnedInserter]).
func (p *WTinyLFU[K]) InsertPinned(k K, e Entry) error {
	if err := p.Insert(k, e); err != nil {
		return err
	}
	p.Pin(k)
	return nil
}

// attach appends detached node i to its list, as the most recently used,
// and counts its size there.
func (p *WTinyLFU[K]) attach(i int32) {
	m := &p.slab.nodes.at(i).meta
	p.slab.pushBack(int32(m.list), i)
	p.bytes[m.list] += m.size
	p.count[m.list]++
}

// detach unlinks node i from its list and uncounts its size.
func (p *WTinyLFU[K]) detach(i int32) {
	m := &p.slab.nodes.at(i).meta
	p.slab.unlink(i)
	p.bytes[m.list] -= m.size
	p.count[m.list]--
}

// forget deletes detached node i from the index and frees it.
func (p *WTinyLFU[K]) forget(i int32) {
	p.keys.delete(p.slab.nodes.at(i).key, i)
	p.slab.release(i)
}
