package eviction

import (
	"fmt"
	"math"
	"time"

	"github.com/kvtier/kvtier/costmodel"
)

// Retention is the cost-aware policy of Pensieve (Yu et al., "Stateful
// Large Language Model Serving with Pensieve", EuroSys 2025): it evicts the
// evictable key with the lowest retention value
//
//	cost / (now - lastUse)
//
// the seconds it would take to rebuild the key divided by the time it has
// not been used (see [costmodel.Retention]). A key is cheap to lose when it
// is cheap to recompute or long unused.
//
// # What is stored and when
//
// A key's cost is computed once, at Insert, from [Entry.Unit] with the
// policy's [costmodel.Recompute]. Its last use is the clock's reading at
// Insert, at Access (pinned or not) and at Unpin: a kvcache request releases
// its units when it is done with them, so becoming evictable is a use. Pin
// keeps the cost and the last use; a pinned key is never a victim.
//
// # The order, exactly
//
// Evict returns the evictable key first in this total order at the
// clock's current reading now:
//
//  1. Keys of cost 0 come first, whatever their inactivity. Their value is
//     0 at every inactivity above 0, and the policy takes the same 0 at
//     inactivity 0, where [costmodel.Retention] would say 0/0 = +Inf: a key
//     that costs nothing to rebuild is the first to go even if it was used
//     this instant.
//  2. Otherwise the lower value cost/(now-lastUse). The values are compared
//     exactly, by cross-multiplying cost1*(now-lastUse2) against
//     cost2*(now-lastUse1) in 128-bit integer arithmetic (the cost as the
//     exact m*2^e of its float64, the inactivity as integer nanoseconds), so
//     no rounding ever decides the order. A key used at the instant now has
//     value +Inf and loses to every key with a finite value.
//  3. On equal values, the older last use.
//  4. On equal last uses, the key whose last use was recorded first (in
//     call order). So among keys of one cost the order is plain LRU.
//
// An exhaustive scan over the evictable keys with this comparison picks the
// same victim at every Evict; the package tests check exactly that over
// random operation sequences.
//
// # The algorithm
//
// Keys are grouped by cost (the exact float64 value). Within a group the
// order above is the order of last use, because the group's keys share the
// numerator, so each group is an LRU list and only its head (least recently
// used key) can be the victim. The heads compete in a kinetic tournament
// (Basch, Guibas and Hershberger, "Data structures for mobile data",
// J. Algorithms 31(1), 1999): a binary tree over the groups whose every
// internal node holds the winner of its two children and the time at which
// that comparison next flips (its certificate), plus the earliest such time
// in its subtree. As a function of now, the comparison of two heads is the
// sign of cost1*(now-t2) - cost2*(now-t1), linear in now, so it flips at
// most once and the flip time can be computed: a floating-point estimate
// whose error is bounded, and when the bound cannot settle the integer
// nanosecond, the exact comparison evaluated around the estimate. Time
// only moves forward, so before the winner is read the nodes whose
// certificates have expired are recomputed, children first. A changed
// leaf's path to the root is recomputed lazily, when the next leaf changes
// or the winner is read, so an Evict and the Insert that follows it into
// the freed leaf cost one path.
//
// In the dual view, minimising cost/(now-t) is maximising
// now*(1/cost) - t/cost: a query of the upper envelope of lines at a
// non-decreasing abscissa, with lines inserted and deleted as heads change.
// The kinetic tournament maintains that envelope lazily.
//
// # Complexity
//
// With n tracked keys and g distinct costs among them:
//
//   - Access of a key that is not the least recently used of its cost, and
//     Insert into a cost group that already has evictable keys: O(1) (one
//     or two hash-map operations and list links).
//   - Evict, Remove, Pin, Unpin, and Access or Insert that change a group's
//     head: O(log g) to recompute the path from the group's leaf to the
//     root, plus the expired certificates.
//   - Expired certificates: a node's winner over time traces the lower
//     envelope of its subtree's heads, each alive between two head changes,
//     and any two heads cross at most once; such an envelope of s pieces has
//     O(s α(s)) breakpoints (Davenport-Schinzel sequences of order 3). Each
//     head change touches log g nodes, so m operations cause O(m log g α(m))
//     certificate failures, each repaired with O(log g) work: amortized
//     O(log² g α) per operation. A failure time costs O(1) when the
//     floating-point bound settles it and O(log T) exact comparisons (T the
//     time range in nanoseconds) when it does not, which takes a near tie.
//
// In a kvcache tier the costs come from a small set of (layer, chunk,
// context) combinations, so g is in the thousands however many keys there
// are. With arbitrary costs g can reach n; the bounds above still hold.
// Memory is about 40 bytes per key plus its map entry, and per distinct
// cost about 24 bytes, a map entry and two tournament nodes of 40 bytes
// (32 for the node, 8 for its certificate; up to four nodes, the tree's
// width being a power of two).
//
// # Contract
//
// Retention implements [Policy]. It is not safe for concurrent use. Its
// zero value is not usable: create it with [NewRetention]. The clock is read
// once per call; a clock that goes backwards is treated as standing still.
type Retention[K comparable] struct {
	clock Clock
	cost  costmodel.Recompute
	epoch time.Duration // the clock's reading at construction
	now   int64         // latest time seen, nanoseconds since epoch
	seq   uint64        // last stamp handed out

	index map[K]int32
	keys  []retentionKey[K]
	free  int32 // first free slot of keys, chained through next

	groups     []costGroup
	freeGroups []int32
	byCost     map[uint64]int32 // cost bits -> group
	zeroGroup  int32            // the group of cost 0, or -1
	tree       tournament       // over the groups of positive cost

	// tx journals a transaction (see Transactional): the writes to keys
	// and groups, the free group stack, the two maps and the scalars.
	tx retentionJournal[K]
}

var (
	_ Policy[int]         = (*Retention[int])(nil)
	_ PinnedAccessIgnorer = (*Retention[int])(nil)
	_ PinnedInserter[int] = (*Retention[int])(nil)
)

// retentionKey is one tracked key.
type retentionKey[K comparable] struct {
	key        K
	t          int64  // last use
	seq        uint64 // stamp of the last use
	prev, next int32  // links in the group's list; -1 at the ends
	group      int32
	pinned     bool
}

// costGroup is the set of tracked keys with one cost. Its evictable keys
// form a list from least to most recently used.
type costGroup struct {
	cost       float64
	head, tail int32 // -1 when no key of the group is evictable
	tracked    int32 // keys of this cost, pinned or not
}

// NewRetention returns an empty retention policy that reads time from clock
// and prices keys with cost. A nil clock means a [SystemClock] created
// now, as for the other policies. It returns an error wrapping
// [ErrInvalidConfig] (and the costmodel error) when cost fails
// [costmodel.Recompute.Validate]: a negative or non-finite coefficient, or a
// weight function that returns a bad weight (or panics) at one of the points
// Validate probes. A weight function that is bad only elsewhere makes the
// Insert of a key priced there fail with [ErrInvalidEntry].
func NewRetention[K comparable](clock Clock, cost costmodel.Recompute) (*Retention[K], error) {
	if err := cost.Validate(); err != nil {
		return nil, fmt.Errorf("%w: recompute cost model: %w", ErrInvalidConfig, err)
	}
	if clock == nil {
		clock = NewSystemClock()
	}
	return &Retention[K]{
		clock:     clock,
		cost:      cost,
		epoch:     clock.Now(),
		index:     make(map[K]int32),
		free:      -1,
		byCost:    make(map[uint64]int32),
		zeroGroup: -1,
		tree:      newTournament(),
	}, nil
}

// tick reads the clock and returns the policy's current time: nanoseconds
// since the epoch, never below an earlier reading, at most maxTime.
func (r *Retention[K]) tick() int64 {
	c, e := int64(r.clock.Now()), int64(r.epoch)
	var d int64
	switch {
	case e > 0 && c < math.MinInt64+e:
		d = 0 // far before the epoch: standing still
	case e < 0 && c > math.MaxInt64+e:
		d = maxTime
	default:
		d = min(c-e, maxTime)
	}
	if d > r.now {
		r.now = d
	}
	return r.now
}

// Len returns the number of tracked keys, pinned or not.
func (r *Retention[K]) Len() int { return len(r.index) }

// Insert starts tracking k as evictable, last used now, with the recompute
// cost of e.Unit. It returns an error wrapping [ErrInvalidEntry] when e is
// malformed or the cost model cannot price its unit (a weight function
// returned a negative or non-finite weight), one wrapping [ErrKeyExists]
// when k is already tracked, and one wrapping [ErrTooManyKeys] when 2^31-1
// keys are tracked already; the policy is then unchanged.
func (r *Retention[K]) Insert(k K, e Entry) error {
	if err := e.Validate(); err != nil {
		return err
	}
	if _, ok := r.index[k]; ok {
		return fmt.Errorf("%w: %v", ErrKeyExists, k)
	}
	c, err := r.cost.Cost(e.Unit)
	if err != nil {
		return fmt.Errorf("%w: recompute cost: %w", ErrInvalidEntry, err)
	}
	if len(r.keys) >= math.MaxInt32 && r.free < 0 {
		return fmt.Errorf("%w: %d keys", ErrTooManyKeys, len(r.keys))
	}
	now := r.tick()
	g := r.groupFor(c, now)
	i := r.allocKey(k, g)
	r.setIndex(k, i)
	r.saveGroup(g)
	r.groups[g].tracked++
	r.stamp(i, now)
	r.pushBack(g, i, now)
	return nil
}

// Access records a use of k now. Unknown keys are ignored.
func (r *Retention[K]) Access(k K) {
	i, ok := r.index[k]
	if !ok {
		return
	}
	now := r.tick()
	n := &r.keys[i]
	if n.pinned {
		r.stamp(i, now)
		return
	}
	g := &r.groups[n.group]
	wasHead := g.head == i
	if g.tail != i {
		r.unlink(i)
		r.link(i)
	}
	r.stamp(i, now)
	if wasHead {
		r.headChanged(n.group, now)
	}
}

// Pin makes k ineligible as a victim; its cost and last use are kept.
// Pinning a pinned or unknown key does nothing.
func (r *Retention[K]) Pin(k K) {
	i, ok := r.index[k]
	if !ok || r.keys[i].pinned {
		return
	}
	now := r.tick()
	r.detach(i, now)
	r.saveKey(i)
	r.keys[i].pinned = true
}

// Unpin makes a pinned k evictable again and counts as a use of it now.
// Unpinning an evictable or unknown key does nothing.
func (r *Retention[K]) Unpin(k K) {
	i, ok := r.index[k]
	if !ok || !r.keys[i].pinned {
		return
	}
	now := r.tick()
	r.saveKey(i)
	r.keys[i].pinned = false
	r.stamp(i, now)
	r.pushBack(r.keys[i].group, i, now)
}

// Remove stops tracking k, pinned or not. Unknown keys are ignored.
func (r *Retention[K]) Remove(k K) {
	i, ok := r.index[k]
	if !ok {
		return
	}
	now := r.tick()
	if !r.keys[i].pinned {
		r.detach(i, now)
	}
	r.delIndex(k, i)
	r.dropKey(i)
}

// Evict removes and returns the evictable key with the lowest retention
// value now (see the type's documentation for the exact order and ties). It
// returns false when no tracked key is evictable.
func (r *Retention[K]) Evict() (K, bool) {
	now := r.tick()
	g := r.zeroGroup
	if g < 0 || r.groups[g].head < 0 {
		if g = r.tree.best(now); g < 0 {
			var zero K
			return zero, false
		}
	}
	i := r.groups[g].head
	k := r.keys[i].key
	r.detach(i, now)
	r.delIndex(k, i)
	r.dropKey(i)
	return k, true
}

// stamp records a use of key i at time now.
func (r *Retention[K]) stamp(i int32, now int64) {
	r.seq++
	r.saveKey(i)
	r.keys[i].t, r.keys[i].seq = now, r.seq
}

// pushBack appends the evictable key i to its group's list.
func (r *Retention[K]) pushBack(g int32, i int32, now int64) {
	r.link(i)
	if r.groups[g].head == i {
		r.headChanged(g, now)
	}
}

// detach takes the evictable key i off its group's list.
func (r *Retention[K]) detach(i int32, now int64) {
	g := r.keys[i].group
	wasHead := r.groups[g].head == i
	r.unlink(i)
	if wasHead {
		r.headChanged(g, now)
	}
}

// link appends key i at the tail of its group's list.
func (r *Retention[K]) link(i int32) {
	r.saveKey(i)
	r.saveGroup(r.keys[i].group)
	if t := r.groups[r.keys[i].group].tail; t >= 0 {
		r.saveKey(t)
	}
	n := &r.keys[i]
	g := &r.groups[n.group]
	n.prev, n.next = g.tail, -1
	if g.tail >= 0 {
		r.keys[g.tail].next = i
	} else {
		g.head = i
	}
	g.tail = i
}

// unlink takes key i off its group's list.
func (r *Retention[K]) unlink(i int32) {
	if r.tx.on {
		r.saveKey(i)
		r.saveGroup(r.keys[i].group)
		if p := r.keys[i].prev; p >= 0 {
			r.saveKey(p)
		}
		if nx := r.keys[i].next; nx >= 0 {
			r.saveKey(nx)
		}
	}
	n := &r.keys[i]
	g := &r.groups[n.group]
	if n.prev >= 0 {
		r.keys[n.prev].next = n.next
	} else {
		g.head = n.next
	}
	if n.next >= 0 {
		r.keys[n.next].prev = n.prev
	} else {
		g.tail = n.prev
	}
	n.prev, n.next = -1, -1
}

// headChanged tells the tournament that group g has a new least recently
// used key (or none).
func (r *Retention[K]) headChanged(g int32, now int64) {
	if g == r.zeroGroup {
		return // cost 0 always comes first; it needs no tournament
	}
	grp := &r.groups[g]
	if grp.head < 0 {
		r.tree.clear(g, now)
		return
	}
	h := &r.keys[grp.head]
	r.tree.set(g, candidate{cost: grp.cost, t: h.t, seq: h.seq}, now)
}

// groupFor returns the group of cost c, creating it if needed.
func (r *Retention[K]) groupFor(c float64, now int64) int32 {
	if c == 0 {
		c = 0 // fold -0 into +0
	}
	bits := math.Float64bits(c)
	if g, ok := r.byCost[bits]; ok {
		return g
	}
	var g int32
	if n := len(r.freeGroups); n > 0 {
		g = r.freeGroups[n-1]
		r.popFreeGroup()
	} else {
		g = int32(len(r.groups))
		r.groups = append(r.groups, costGroup{})
		r.tree.grow(len(r.groups), now)
	}
	r.saveGroup(g)
	r.groups[g] = costGroup{cost: c, head: -1, tail: -1}
	r.setCost(bits, g)
	if c == 0 {
		r.zeroGroup = g
	}
	return g
}

// allocKey returns a detached slot holding k in group g.
func (r *Retention[K]) allocKey(k K, g int32) int32 {
	n := retentionKey[K]{key: k, prev: -1, next: -1, group: g}
	if i := r.free; i >= 0 {
		r.free = r.keys[i].next
		r.saveKey(i)
		r.keys[i] = n
		return i
	}
	r.keys = append(r.keys, n)
	return int32(len(r.keys) - 1)
}

// dropKey frees the detached slot i and, when it was the last key of its
// cost, the cost's group.
func (r *Retention[K]) dropKey(i int32) {
	g := r.keys[i].group
	r.saveKey(i)
	r.keys[i] = retentionKey[K]{prev: -1, next: r.free, group: -1}
	r.free = i
	r.saveGroup(g)
	grp := &r.groups[g]
	if grp.tracked--; grp.tracked > 0 {
		return
	}
	// The list is empty (every key is gone), so the tournament leaf is
	// already clear.
	r.delCost(math.Float64bits(grp.cost), g)
	if g == r.zeroGroup {
		r.zeroGroup = -1
	}
	r.pushFreeGroup(g)
}

// IgnoresPinnedAccess returns true: the use an Access records on a pinned key is overwritten by the Unpin that makes the key evictable again. See [PinnedAccessIgnorer].
func (p *Retention[K]) IgnoresPinnedAccess() bool { return true }

// InsertPinned is Insert followed by Pin (see [PinnedInserter]).
func (r *Retention[K]) InsertPinned(k K, e Entry) error {
	if err := r.Insert(k, e); err != nil {
		return err
	}
	r.Pin(k)
	return nil
}
