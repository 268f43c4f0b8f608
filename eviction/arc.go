package eviction

import "fmt"

// ARCConfig sizes an [ARC] policy.
type ARCConfig struct {
	// Capacity is the size of the cache the policy orders, c in the paper,
	// in the unit of Entry.Size (bytes, or objects when every size is 1).
	// It bounds the target size p of the recency list and, with the ghost
	// lists, the history kept (about 2c). It must be at least 1.
	Capacity int64
}

// Where a node of an ARC is. Each is also the sentinel of its list in the
// slab: T1 and T2 hold tracked keys, B1 and B2 the ghosts of keys evicted
// from them.
const (
	arcT1    uint8 = iota // seen once since it entered (recency)
	arcT2                 // seen at least twice (frequency)
	arcB1                 // ghost of a key evicted from T1
	arcB2                 // ghost of a key evicted from T2
	arcLists = 4
)

// arcMeta is what ARC keeps per node besides the key and links.
type arcMeta struct {
	size   int64
	list   uint8 // arcT1, arcT2, arcB1 or arcB2
	pinned bool  // tracked but out of its list
}

// ARC is the Adaptive Replacement Cache (Megiddo and Modha, "ARC: A
// Self-Tuning, Low Overhead Replacement Cache", FAST 2003) with the
// semantics of libCacheSim's libCacheSim/cache/eviction/ARC.c, sizes
// included, so that a replay gives libCacheSim's miss counts (see package
// replay). Use it where a workload mixes keys used once (a scan, a prompt
// never seen again) with keys used again and again, in proportions that
// change: ARC learns the split between the two from its ghost hits, with
// no parameter to tune.
//
// Four LRU lists, sized in the unit of Entry.Size:
//
//   - T1: keys hit once since they entered, where a new key goes;
//   - T2: keys hit at least twice, where a hit in T1 or T2 moves a key;
//   - B1 and B2: ghosts of keys evicted from T1 and T2, with their sizes
//     but no data.
//
// A target p for T1's size moves between 0 and Capacity: a returning key
// found in B1 raises it by max(|B2|/|B1|, 1), one found in B2 lowers it by
// max(|B1|/|B2|, 1) (sizes in bytes, p a float64, as libCacheSim has it),
// and the key goes into T2. Evict (the paper's REPLACE) takes T1's least
// recently used key into B1 if T1 is larger than p (or equal to it when the
// key being brought in was found in B2), else T2's into B2. Before that, a
// miss that found no ghost trims the history (the paper's case IV): when
// T1, B1 and the incoming key would exceed Capacity, B1's oldest ghost is
// dropped (or, B1 being empty, T1's least recently used key is evicted
// without a ghost, and that is the victim); else, when the four lists hold
// 2×Capacity, B2's oldest ghost is dropped.
//
// The key being brought in is what [ARC.Admit] was last told, as
// libCacheSim's cache is by the request it serves: a classic cache calls
// Admit for each miss before making room, as package replay does. An owner
// that never calls Admit (a kvcache tier) gets, for each Evict, the case of
// a new key of size 1, and an Insert of a key remembered in B1 or B2 moves
// p and enters T2 in one call.
//
// Beyond libCacheSim (which simulates a cache and owns its capacity), the
// policy keeps the [Policy] contract:
//
//   - A pinned key leaves its list, as with [S3FIFO]: Evict never meets it,
//     and its size counts in no list while it is pinned. Access of a pinned
//     key still counts (a key in T1 moves to T2); Unpin puts it back as its
//     list's most recently used key.
//   - When the list REPLACE picks holds no evictable key, Evict takes the
//     other one's, so Evict fails only when every tracked key is pinned.
//   - Remove drops a key without a ghost, as libCacheSim's remove does.
//
// Cost: every call does one index operation and O(1) list work; Evict also
// deletes at most two ghosts from the index. Nodes (tracked and ghost) live
// in a slab indexed by int32 with a free list, so once the working set stops
// growing nothing allocates. Per key: one index entry (a Go map's, or 4
// bytes per possible key with a [DenseIndex]) plus a 32-byte node for
// uint64 keys; ghost keys cost the same. The ghosts take about as much as
// the Capacity, and up to twice it when most keys are pinned (pinned keys
// count in no list).
//
// The zero ARC is not usable; create one with [NewARC] or
// [NewARCWithIndex]. An ARC is not safe for concurrent use.
type ARC[K comparable] struct {
	slab linkedSlab[K, arcMeta]
	keys keyIndex[K] // tracked and ghost keys

	bytes   [arcLists]int64 // sum of sizes linked on each list
	count   [arcLists]int   // nodes linked on each list
	tracked int             // Len: T1 + T2 + pinned

	capacity int64
	// p is the target size of T1.
	p float64

	// The request being served, as libCacheSim keeps it. ghostHit says
	// that Admit found its key in B1 or B2 (libCacheSim's
	// vtime_last_req_in_ghost == n_req): Evict runs REPLACE alone and
	// Insert of claim puts it in T2. inB1 and inB2 are libCacheSim's
	// curr_obj_in_L1_ghost and curr_obj_in_L2_ghost: set by a ghost hit,
	// cleared by the next key found tracked or by the ghost hit's Insert;
	// REPLACE reads inB2 even for a later miss when they are stale. incoming
	// is the size of the key Admit was told of (1 before any).
	ghostHit, inB1, inB2 bool
	claim                K
	incoming             int64

	// tx holds what Begin saved.
	tx arcScalars[K]
}

// arcScalars are the fields of an ARC that Begin saves.
type arcScalars[K comparable] struct {
	bytes                [arcLists]int64
	count                [arcLists]int
	tracked              int
	p                    float64
	ghostHit, inB1, inB2 bool
	claim                K
	incoming             int64
}

var (
	_ Policy[int]         = (*ARC[int])(nil)
	_ Forgetter[int]      = (*ARC[int])(nil)
	_ PinnedInserter[int] = (*ARC[int])(nil)
)

// NewARC returns an empty ARC policy for a cache of cfg.Capacity, its keys
// indexed with a Go map. It returns an error wrapping [ErrInvalidConfig]
// when the capacity is below 1.
func NewARC[K comparable](cfg ARCConfig) (*ARC[K], error) {
	return NewARCWithIndex[K](cfg, nil)
}

// NewARCWithIndex is [NewARC] with the keys indexed by idx, or by a Go map
// when idx is nil. The index holds the ghost keys too. It returns an error
// wrapping [ErrInvalidConfig] for a bad cfg, a nil *DenseIndex or an index
// that already belongs to a policy.
func NewARCWithIndex[K comparable](cfg ARCConfig, idx Index[K]) (*ARC[K], error) {
	if cfg.Capacity < 1 {
		return nil, fmt.Errorf("%w: ARC Capacity %d must be at least 1", ErrInvalidConfig, cfg.Capacity)
	}
	keys, err := newKeyIndex(idx)
	if err != nil {
		return nil, err
	}
	p := &ARC[K]{keys: keys, capacity: cfg.Capacity, incoming: 1}
	p.slab.init(arcLists)
	return p, nil
}

// Insert starts tracking k as evictable: in T2 if k is the ghost that the
// last Admit found, or a ghost still remembered (p then moves as for a
// ghost hit), else in T1. It returns an error wrapping [ErrInvalidEntry]
// for an invalid e, one wrapping [ErrKeyExists] when k is already tracked,
// one wrapping [ErrKeyOutOfRange] when the index cannot hold k and one
// wrapping [ErrTooManyKeys] when the slab is full; the policy is then
// unchanged. Only e.Size is used.
func (p *ARC[K]) Insert(k K, e Entry) error {
	if err := e.Validate(); err != nil {
		return err
	}
	i, ok := p.keys.lookup(k)
	if ok {
		m := p.slab.nodes.at(i).meta
		if m.list <= arcT2 {
			return trackedKeyError(k)
		}
		// A ghost no Admit announced (an owner that does not call it):
		// the ghost hit and the insertion at once.
		p.adapt(m.list, m.size)
		p.detach(i)
		p.ghostHit = false
		p.inB1, p.inB2 = false, false
		*p.slab.meta(i) = arcMeta{size: e.Size, list: arcT2}
		p.attach(i)
		p.tracked++
		return nil
	}
	list := arcT1
	if p.ghostHit && p.claim == k {
		list = arcT2
	}
	i, err := p.slab.alloc(k, arcMeta{size: e.Size, list: list})
	if err != nil {
		return err
	}
	if err := p.keys.store(k, i); err != nil {
		p.slab.release(i)
		return err
	}
	if list == arcT2 {
		p.inB1, p.inB2 = false, false
	}
	p.ghostHit = false
	var zero K
	p.claim = zero // may hold a pointer
	p.attach(i)
	p.tracked++
	return nil
}

// Access records a hit on k, pinned or not: a key in T1 moves to T2, a key
// in T2 becomes its most recently used. It does nothing for a key that is
// not tracked (including a ghost key).
func (p *ARC[K]) Access(k K) {
	i, ok := p.keys.lookup(k)
	if !ok {
		return
	}
	m := &p.slab.nodes.at(i).meta
	if m.list > arcT2 {
		return
	}
	p.inB1, p.inB2 = false, false
	switch {
	case m.pinned:
		if m.list == arcT1 {
			p.slab.meta(i).list = arcT2
		}
	case m.list == arcT1:
		p.detach(i)
		p.slab.meta(i).list = arcT2
		p.attach(i)
	default:
		p.slab.moveToBack(int32(arcT2), i)
	}
}

// Pin takes an evictable k out of its list until Unpin. It does nothing for
// an unknown or pinned k.
func (p *ARC[K]) Pin(k K) {
	i, ok := p.keys.lookup(k)
	if !ok {
		return
	}
	if m := &p.slab.nodes.at(i).meta; m.list > arcT2 || m.pinned {
		return
	}
	p.detach(i)
	p.slab.meta(i).pinned = true
}

// Unpin puts a pinned k back as the most recently used key of its list. It
// does nothing for an unknown or evictable k.
func (p *ARC[K]) Unpin(k K) {
	i, ok := p.keys.lookup(k)
	if !ok {
		return
	}
	if m := &p.slab.nodes.at(i).meta; m.list > arcT2 || !m.pinned {
		return
	}
	p.slab.meta(i).pinned = false
	p.attach(i)
}

// Remove stops tracking k, pinned or not, without a ghost. It does nothing
// for a key that is not tracked.
func (p *ARC[K]) Remove(k K) {
	i, ok := p.keys.lookup(k)
	if !ok {
		return
	}
	m := &p.slab.nodes.at(i).meta
	if m.list > arcT2 {
		return
	}
	if !m.pinned {
		p.detach(i)
	}
	p.forget(i)
	p.tracked--
}

// Forget drops k's ghost, if it has one: k will never be inserted again,
// and its ghost would only take the room of other keys' (see
// [Forgetter]). It does nothing for a tracked or unknown key.
func (p *ARC[K]) Forget(k K) {
	i, ok := p.keys.lookup(k)
	if !ok || p.slab.nodes.at(i).meta.list <= arcT2 {
		return
	}
	p.detach(i)
	p.forget(i)
}

// Admit is for a classic cache, which calls it once for each key that
// missed, with its size, before making room for it: it is the lookup of
// libCacheSim's ARC. A key remembered in B1 or B2 is a ghost hit: p moves,
// the ghost is consumed, and the Evicts that follow run REPLACE alone, and
// the Insert of k puts it in T2. For any other key, the Evicts that follow
// trim the history for a key of this size first (see the type's
// documentation). Both answers are size >= 1 && size <= Capacity (for a
// key already tracked, both are false): ARC refuses nothing that fits.
func (p *ARC[K]) Admit(k K, size int64) (makeRoom, insert bool) {
	p.ghostHit = false
	p.incoming = max(size, 1)
	i, ok := p.keys.lookup(k)
	if ok {
		m := p.slab.nodes.at(i).meta
		if m.list <= arcT2 {
			return false, false
		}
		p.adapt(m.list, m.size)
		p.detach(i)
		p.forget(i)
		p.ghostHit, p.claim = true, k
	}
	fits := size >= 1 && size <= p.capacity
	return fits, fits
}

// adapt moves p for a hit on a ghost of list (arcB1 or arcB2) of the given
// size, still linked, and notes which list it was found in.
func (p *ARC[K]) adapt(list uint8, size int64) {
	b1, b2 := float64(p.bytes[arcB1]), float64(p.bytes[arcB2])
	p.inB1, p.inB2 = list == arcB1, list == arcB2
	if list == arcB1 {
		p.p = min(p.p+max(b2/b1, 1), float64(p.capacity))
	} else {
		p.p = max(p.p-max(b1/b2, 1), 0)
	}
}

// Evict chooses a victim as described in the type's documentation, stops
// tracking it and returns it; a victim of REPLACE is remembered in B1 or
// B2. It returns false when every tracked key is pinned (or none is
// tracked), changing nothing.
func (p *ARC[K]) Evict() (K, bool) {
	if p.count[arcT1] == 0 && p.count[arcT2] == 0 {
		var zero K
		return zero, false
	}
	if !p.ghostHit {
		// In uint64: the sums reach twice the capacity, which may pass
		// math.MaxInt64.
		c := uint64(p.capacity)
		if uint64(p.bytes[arcT1])+uint64(p.bytes[arcB1])+uint64(p.incoming) > c {
			if p.count[arcB1] == 0 && p.count[arcT1] > 0 {
				// T1 alone fills the cache: its oldest key leaves
				// without a ghost.
				i := p.slab.front(int32(arcT1))
				k := p.slab.nodes.at(i).key
				p.detach(i)
				p.forget(i)
				p.tracked--
				return k, true
			}
			p.dropOldest(arcB1)
		} else if uint64(p.bytes[arcT1])+uint64(p.bytes[arcB1])+uint64(p.bytes[arcT2])+uint64(p.bytes[arcB2]) >= 2*c {
			p.dropOldest(arcB2)
		}
	}
	return p.replace(), true
}

// replace is the paper's REPLACE: it evicts the least recently used key of
// T1 or T2 into its ghost list. One of them holds an evictable key.
func (p *ARC[K]) replace() K {
	t1 := p.bytes[arcT1]
	from := arcT2
	if (t1 > 0 && (float64(t1) > p.p || (float64(t1) == p.p && p.inB2))) || p.bytes[arcT2] == 0 {
		from = arcT1
	}
	if p.count[from] == 0 {
		// Every key of that list is pinned.
		from = arcT1 + arcT2 - from
	}
	i := p.slab.front(int32(from))
	k := p.slab.nodes.at(i).key
	p.detach(i)
	p.tracked--
	p.slab.meta(i).list = from + arcB1
	p.attach(i)
	return k
}

// dropOldest forgets the least recently evicted ghost of list (arcB1 or
// arcB2), if any.
func (p *ARC[K]) dropOldest(list uint8) {
	if p.count[list] == 0 {
		return
	}
	i := p.slab.front(int32(list))
	p.detach(i)
	p.forget(i)
}

// Len returns the number of tracked keys, pinned or not. Ghost keys are
// not tracked.
func (p *ARC[K]) Len() int {
	return p.tracked
}

// InsertPinned is Insert followed by Pin (see [PinnedInserter]).
func (p *ARC[K]) InsertPinned(k K, e Entry) error {
	if err := p.Insert(k, e); err != nil {
		return err
	}
	p.Pin(k)
	return nil
}

// attach appends detached node i to its list, as the most recently used,
// and counts its size there.
func (p *ARC[K]) attach(i int32) {
	m := &p.slab.nodes.at(i).meta
	p.slab.pushBack(int32(m.list), i)
	p.bytes[m.list] += m.size
	p.count[m.list]++
}

// detach unlinks node i from its list and uncounts its size.
func (p *ARC[K]) detach(i int32) {
	m := &p.slab.nodes.at(i).meta
	p.slab.unlink(i)
	p.bytes[m.list] -= m.size
	p.count[m.list]--
}

// forget deletes detached node i from the index and frees it.
func (p *ARC[K]) forget(i int32) {
	p.keys.delete(p.slab.nodes.at(i).key, i)
	p.slab.release(i)
}
