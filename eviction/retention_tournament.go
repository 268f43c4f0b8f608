package eviction

import "math"

// Times inside the retention policy are nanoseconds since the policy's
// epoch, in [0, maxTime]. neverTime is later than any time the policy can
// reach, so a certificate that fails at neverTime never fails.
const (
	maxTime   int64 = math.MaxInt64 - 1
	neverTime int64 = math.MaxInt64
)

// candidate is one contender of the tournament: the least recently used
// evictable key of one cost class, reduced to what the order needs.
type candidate struct {
	cost float64 // the class's cost, finite and > 0
	t    int64   // the key's last use
	seq  uint64  // the key's stamp: breaks ties between equal uses
}

// precedes reports whether a is the better victim than b at time now (both
// last used at or before now): the lower retention value cost/(now-t),
// compared exactly; on equal values the older last use; on equal uses the
// earlier stamp. A key used this instant has value +Inf, which the
// cross-multiplication gets right as long as the costs are positive.
func precedes(a, b *candidate, now int64) bool {
	s := compareScaled(a.cost, now-b.t, b.cost, now-a.t)
	if s != 0 {
		return s < 0
	}
	if a.t != b.t {
		return a.t < b.t
	}
	return a.seq < b.seq
}

// failureTime returns the first time after now at which w, the better
// victim at now, stops preceding l, or neverTime.
//
// As a function of the time T, w precedes l while
// cw*(T-tl) - cl*(T-tw) is negative (or zero with w winning the tie-break).
// That is a linear function of T with slope cw-cl, so the order flips at
// most once: never when cw <= cl, once when cw > cl. A floating-point
// estimate of the crossing is then made exact with precedes, which is
// exact: the answer is the T with precedes(T-1) and !precedes(T), found by
// checking the estimate and, when rounding put it on the wrong side,
// galloping and bisecting from it.
func failureTime(w, l *candidate, now int64) int64 {
	if w.cost <= l.cost {
		return neverTime
	}
	dw, dl := float64(now-w.t), float64(now-l.t)
	inv := 1 / (w.cost - l.cost)
	x := (l.cost*dw - w.cost*dl) * inv
	if w.cost <= maxFastCost && l.cost >= minFastCost {
		// With costs of moderate magnitude nothing underflows, and the
		// rounding error of x is at most about 3u|x| + 3u(l.cost*dw +
		// w.cost*dl)/(w.cost-l.cost) (u = 2^-53; one rounding in each
		// conversion, product, difference, the reciprocal and the last
		// product). bound is more than twice that. When [x-bound, x+bound]
		// lies strictly between two integers k and k+1, so does the exact
		// crossing, which is then no tie: w precedes l at now+k and not at
		// now+k+1.
		bound := 0x1p-50 * (math.Abs(x) + (l.cost*dw+w.cost*dl)*inv)
		lo, hi := x-bound, x+bound
		if lo >= 0 && hi < float64(maxTime-now)/2 {
			if k := math.Floor(hi); k < lo {
				return now + int64(k) + 1
			}
		}
	}
	var guess int64
	switch {
	case !(x < float64(maxTime-now)): // also catches NaN and +Inf
		guess = maxTime
	case x < 0:
		guess = now + 1
	default:
		// x < maxTime-now as floats still allows int64(x) == maxTime-now
		// after rounding, hence the min.
		guess = min(now+int64(x)+1, maxTime)
	}
	// Establish lo < hi with w preceding l at lo and not at hi.
	var lo, hi int64
	switch {
	case guess-1 > now && !precedes(w, l, guess-1):
		lo, hi = now, guess-1
	case !precedes(w, l, guess):
		return guess
	case guess == maxTime:
		return neverTime
	default:
		// The estimate was early: gallop forward.
		lo = guess
		for step := int64(1); ; step <<= 1 {
			hi = maxTime
			if step < maxTime-lo {
				hi = lo + step
			}
			if !precedes(w, l, hi) {
				break
			}
			if hi == maxTime {
				return neverTime
			}
			lo = hi
		}
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if precedes(w, l, mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// The fast path of failureTime needs costs whose products with durations
// (below 2^63) and whose differences stay normal floats.
const (
	minFastCost = 0x1p-900
	maxFastCost = 0x1p900
)

// tournamentNode is one node of the kinetic tournament: the winner of its
// subtree at the current time, and when the subtree must next be looked at.
// It is 32 bytes, so the two children of a node share one 64-byte cache
// line: a path through the tree costs one line per level.
type tournamentNode struct {
	// candidate is the subtree's winner; seq 0 (no stamp is 0) means the
	// subtree has none. The winning leaf is not stored: stamps are unique,
	// so it is found by following equal stamps down from the root.
	candidate
	// melt is the earliest time at which a certificate in this subtree
	// fails: the node's own (its winner stops beating the other child's) or
	// a descendant's. Until then the stored winner is right.
	melt int64
}

var emptyTournamentNode = tournamentNode{melt: neverTime}

// tournament is a kinetic tournament tree (Basch, Guibas and Hershberger,
// "Data structures for mobile data", J. Algorithms 31(1), 1999) over the
// leaves 0..size-1, laid out as an implicit binary heap: node 1 is the
// root, node i has children 2i and 2i+1, and leaf j is node size+j. Every
// internal node stores the winner of its two children at the time it was
// computed and the time that comparison next flips. Queries and updates
// come at non-decreasing times; a node whose melt time has been reached is
// recomputed, children first, before it is read.
//
// Leaf changes are applied lazily: the ancestors of the last changed leaf
// (dirty) are recomputed only when another leaf changes or the winner is
// asked for. An Evict followed by an Insert that reuses the freed leaf, the
// common case when every cost is distinct, so pays for one path, not two.
type tournament struct {
	nodes []tournamentNode
	// cert[i] is node i's own certificate: when the winner of its two
	// children, as they were when it was computed, stops winning. It lets
	// a node whose children kept their candidates skip the comparison.
	cert  []int64
	size  int
	dirty int // leaf whose ancestors are stale, or -1
}

func newTournament() tournament {
	return tournament{
		nodes: []tournamentNode{emptyTournamentNode, emptyTournamentNode},
		cert:  []int64{neverTime, neverTime},
		size:  1,
		dirty: -1,
	}
}

// advanceNode brings node i and its subtree up to date at time now and
// reports whether the node's candidate changed. The subtree must not
// contain the dirty leaf's stale ancestors.
func (tr *tournament) advanceNode(i int, now int64) bool {
	if tr.nodes[i].melt > now {
		return false
	}
	// Leaves never melt, so i is internal.
	changedA := tr.advanceNode(2*i, now)
	changedB := tr.advanceNode(2*i+1, now)
	if !changedA && !changedB && tr.cert[i] > now {
		// Same contenders, own certificate still good: only a descendant's
		// certificate had expired.
		tr.nodes[i].melt = min(tr.cert[i], tr.nodes[2*i].melt, tr.nodes[2*i+1].melt)
		return false
	}
	old := tr.nodes[i].seq
	tr.pull(i, now)
	return tr.nodes[i].seq != old
}

// pull recomputes node i from its children, which must be up to date.
func (tr *tournament) pull(i int, now int64) {
	a, b := &tr.nodes[2*i], &tr.nodes[2*i+1]
	switch {
	case a.seq == 0:
		tr.nodes[i] = *b
		tr.cert[i] = neverTime
	case b.seq == 0:
		tr.nodes[i] = *a
		tr.cert[i] = neverTime
	default:
		// precedes is a strict total order (stamps are unique), so b wins
		// exactly when it precedes a.
		w, l := a, b
		if precedes(&b.candidate, &a.candidate, now) {
			w, l = b, a
		}
		cert := failureTime(&w.candidate, &l.candidate, now)
		tr.cert[i] = cert
		tr.nodes[i] = tournamentNode{candidate: w.candidate, melt: min(cert, a.melt, b.melt)}
	}
}

// set makes c (whose seq must not be 0) the candidate of leaf j.
func (tr *tournament) set(j int32, c candidate, now int64) {
	tr.touch(int(j), now)
	tr.nodes[tr.size+int(j)] = tournamentNode{candidate: c, melt: neverTime}
}

// clear removes the candidate of leaf j.
func (tr *tournament) clear(j int32, now int64) {
	tr.touch(int(j), now)
	tr.nodes[tr.size+int(j)] = emptyTournamentNode
}

// touch makes j the dirty leaf, first repairing the previous one if it was
// another.
func (tr *tournament) touch(j int, now int64) {
	if tr.dirty != j {
		tr.flush(now)
		tr.dirty = j
	}
}

// flush brings the whole tree up to date at time now. Every node is either
// an ancestor of the dirty leaf or inside the subtree of a sibling of one,
// so recomputing the ancestors bottom-up, each after advancing its other
// child, covers the tree. The walk stops early at an ancestor that comes
// out unchanged: the nodes above it then hold what they held before the
// leaf changed, and the ordinary advance from the root finishes the job.
func (tr *tournament) flush(now int64) {
	if tr.dirty < 0 {
		if tr.nodes[1].melt <= now {
			tr.advanceNode(1, now)
		}
		return
	}
	i := tr.size + tr.dirty
	tr.dirty = -1
	for ; i > 1; i >>= 1 {
		tr.advanceNode(i^1, now)
		p := i >> 1
		old := tr.nodes[p]
		tr.pull(p, now)
		if tr.nodes[p] == old && old.melt > now {
			break
		}
	}
	if tr.nodes[1].melt <= now {
		tr.advanceNode(1, now)
	}
}

// best returns the winning leaf at time now, or -1 when no leaf has a
// candidate.
func (tr *tournament) best(now int64) int32 {
	tr.flush(now)
	seq := tr.nodes[1].seq
	if seq == 0 {
		return -1
	}
	i := 1
	for i < tr.size {
		i *= 2
		if tr.nodes[i].seq != seq {
			i++
		}
	}
	return int32(i - tr.size)
}

// grow makes room for at least n leaves, rebuilding the tree at time now.
func (tr *tournament) grow(n int, now int64) {
	if n <= tr.size {
		return
	}
	size := tr.size
	for size < n {
		size *= 2
	}
	nodes := make([]tournamentNode, 2*size)
	copy(nodes[size:], tr.nodes[tr.size:])
	for i := size + tr.size; i < 2*size; i++ {
		nodes[i] = emptyTournamentNode
	}
	nodes[0] = emptyTournamentNode
	tr.nodes, tr.cert, tr.size, tr.dirty = nodes, make([]int64, 2*size), size, -1
	// Children before parents: every internal node from its fresh children.
	for i := size - 1; i >= 1; i-- {
		tr.pull(i, now)
	}
}

// rebuild recomputes the whole tree at time now from the candidates of
// leaves 0..n-1 that leaf reports (false: none); leaves past n are cleared.
func (tr *tournament) rebuild(n int, leaf func(j int) (candidate, bool), now int64) {
	tr.grow(n, now)
	for j := range tr.size {
		node := emptyTournamentNode
		if j < n {
			if c, ok := leaf(j); ok {
				node = tournamentNode{candidate: c, melt: neverTime}
			}
		}
		tr.nodes[tr.size+j] = node
	}
	tr.dirty = -1
	for i := tr.size - 1; i >= 1; i-- {
		tr.pull(i, now)
	}
}
