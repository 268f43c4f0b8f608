package eviction

// Transactional is implemented by a Policy that can take back a group of
// calls exactly. An owner that runs an operation as a transaction over its
// own state and its policies (as a kvcache tier does: pins, inserts and
// evictions, then copies that may fail) calls Begin before the operation's
// first call, and Commit after its last one, or Rollback when the operation
// fails. Without it the owner can only compensate with more calls (insert
// its victims again, Unpin what it pinned), which a recency policy takes as
// uses: an LRU victim would come back most recently used, an expired
// priority with a fresh timer.
//
// Every policy of this package implements it. Recording costs one
// predictable branch per change while no transaction runs, and allocates
// nothing in steady state while one does (the journal keeps its capacity).
type Transactional interface {
	// Begin starts recording the calls that follow. Calling Begin while
	// recording starts over: the calls recorded so far are kept, as by
	// Commit.
	Begin()
	// Commit stops recording and keeps every recorded call's effect. It
	// does nothing when not recording.
	Commit()
	// Rollback undoes every call made since Begin, newest first, and stops
	// recording. The policy is then exactly as it was at Begin: the same
	// tracked keys, the same pinned set, and the same order and history
	// (recency, insertion order, priorities and their timers, hit counts,
	// ghost entries, last uses), so that any sequence of later calls
	// chooses the same victims as it would have without the rolled-back
	// calls. A clock the policy reads keeps running: later calls read it
	// at their own time. Rollback does nothing when not recording.
	Rollback()
}

var (
	_ Transactional = (*LRU[int])(nil)
	_ Transactional = (*FIFO[int])(nil)
	_ Transactional = (*PrioritizedLRU[int])(nil)
	_ Transactional = (*S3FIFO[int])(nil)
	_ Transactional = (*Retention[int])(nil)
)

// The journals below record, while a transaction runs, how to put back each
// piece of a policy's state: the old value of every slab node or array
// element written (restored newest first, so each ends at its value at
// Begin), the old binding of every index key written, and the inverse of
// every heap push or removal. Lengths and scalar fields are saved at Begin.

// slabJournal records a linkedSlab's changes (see linkedSlab.save).
type slabJournal[K comparable, M any] struct {
	on    bool
	saved []savedNode[K, M]
	n     int   // len(nodes) at Begin
	free  int32 // free at Begin
}

type savedNode[K comparable, M any] struct {
	i    int32
	node linkedNode[K, M]
}

// save records node i before a write, while a transaction runs.
func (s *linkedSlab[K, M]) save(i int32) {
	if s.tx.on {
		s.tx.saved = append(s.tx.saved, savedNode[K, M]{i: i, node: s.nodes[i]})
	}
}

// meta returns node i's meta for writing, having saved the node.
func (s *linkedSlab[K, M]) meta(i int32) *M {
	s.save(i)
	return &s.nodes[i].meta
}

func (s *linkedSlab[K, M]) begin() {
	s.tx.on = true
	s.tx.n, s.tx.free = len(s.nodes), s.free
}

func (s *linkedSlab[K, M]) commit() {
	s.tx.on = false
	clear(s.tx.saved) // keys may hold pointers
	s.tx.saved = s.tx.saved[:0]
}

func (s *linkedSlab[K, M]) rollback() {
	for j := len(s.tx.saved) - 1; j >= 0; j-- {
		if sv := s.tx.saved[j]; int(sv.i) < s.tx.n {
			s.nodes[sv.i] = sv.node
		}
	}
	clear(s.nodes[s.tx.n:])
	s.nodes = s.nodes[:s.tx.n]
	s.free = s.tx.free
	s.commit()
}

// keyJournal records a keyIndex's changes.
type keyJournal[K comparable] struct {
	on    bool
	saved []savedKey[K]
}

type savedKey[K comparable] struct {
	k   K
	i   int32
	had bool
}

// saveKey records k's binding before a write, while a transaction runs.
func (x *keyIndex[K]) saveKey(k K) {
	if x.tx.on {
		i, had := x.lookup(k)
		x.tx.saved = append(x.tx.saved, savedKey[K]{k: k, i: i, had: had})
	}
}

func (x *keyIndex[K]) begin() { x.tx.on = true }

func (x *keyIndex[K]) commit() {
	x.tx.on = false
	clear(x.tx.saved)
	x.tx.saved = x.tx.saved[:0]
}

func (x *keyIndex[K]) rollback() {
	x.tx.on = false
	for j := len(x.tx.saved) - 1; j >= 0; j-- {
		sv := x.tx.saved[j]
		x.delete(sv.k)
		if sv.had {
			_ = x.store(sv.k, sv.i) // it held the binding before: it can again
		}
	}
	x.commit()
}

// heapJournal records a stampHeap's pushes and removals. A heap's pop order
// depends only on the items it holds (their (at, seq) keys are unique), not
// on their layout, so undoing each operation by its inverse restores it
// exactly as far as any later call can tell.
type heapJournal struct {
	on  bool
	ops []heapOp
}

type heapOp struct {
	pushed bool
	item   stampItem
}

func (h *stampHeap) begin() { h.tx.on = true }

func (h *stampHeap) commit() {
	h.tx.on = false
	h.tx.ops = h.tx.ops[:0]
}

func (h *stampHeap) rollback() {
	h.tx.on = false
	for j := len(h.tx.ops) - 1; j >= 0; j-- {
		op := h.tx.ops[j]
		if op.pushed {
			h.remove(op.item.node)
		} else {
			h.push(op.item.node, op.item.at, op.item.seq)
		}
	}
	h.commit()
}

// sliceJournal records the writes to a slice's elements and its length at
// Begin, for the arrays a policy keeps beside its slab.
type sliceJournal[T any] struct {
	on    bool
	n     int
	saved []savedElem[T]
}

type savedElem[T any] struct {
	i int
	v T
}

func (j *sliceJournal[T]) begin(s []T) { j.on, j.n = true, len(s) }

// save records s[i] before a write, while a transaction runs.
func (j *sliceJournal[T]) save(s []T, i int) {
	if j.on && i < j.n {
		j.saved = append(j.saved, savedElem[T]{i: i, v: s[i]})
	}
}

func (j *sliceJournal[T]) commit() {
	j.on = false
	clear(j.saved)
	j.saved = j.saved[:0]
}

// rollback restores s and returns it at its length at Begin.
func (j *sliceJournal[T]) rollback(s []T) []T {
	for k := len(j.saved) - 1; k >= 0; k-- {
		s[j.saved[k].i] = j.saved[k].v
	}
	clear(s[j.n:])
	s = s[:j.n]
	j.commit()
	return s
}

// Begin starts recording (see [Transactional]).
func (p *LRU[K]) Begin() {
	p.Commit()
	p.slab.begin()
	p.keys.begin()
}

// Commit stops recording, keeping every change (see [Transactional]).
func (p *LRU[K]) Commit() {
	p.slab.commit()
	p.keys.commit()
}

// Rollback undoes every call since Begin (see [Transactional]).
func (p *LRU[K]) Rollback() {
	if !p.slab.tx.on {
		return
	}
	p.slab.rollback()
	p.keys.rollback()
}

// Begin starts recording (see [Transactional]).
func (p *FIFO[K]) Begin() {
	p.Commit()
	p.slab.begin()
	p.keys.begin()
	p.reclaimed.begin()
	p.txSeq = p.nextSeq
}

// Commit stops recording, keeping every change (see [Transactional]).
func (p *FIFO[K]) Commit() {
	p.slab.commit()
	p.keys.commit()
	p.reclaimed.commit()
}

// Rollback undoes every call since Begin (see [Transactional]).
func (p *FIFO[K]) Rollback() {
	if !p.slab.tx.on {
		return
	}
	p.slab.rollback()
	p.keys.rollback()
	p.reclaimed.rollback()
	p.nextSeq = p.txSeq
}

// Begin starts recording (see [Transactional]).
func (p *PrioritizedLRU[K]) Begin() {
	p.Commit()
	p.slab.begin()
	p.keys.begin()
	p.expiring.begin()
	p.txDurations.begin(p.durations)
	p.tx = prioritizedScalars{nonEmpty: p.nonEmpty, timers: p.timers}
}

// Commit stops recording, keeping every change (see [Transactional]).
func (p *PrioritizedLRU[K]) Commit() {
	p.slab.commit()
	p.keys.commit()
	p.expiring.commit()
	p.txDurations.commit()
}

// Rollback undoes every call since Begin (see [Transactional]). A priority
// that expired during the rolled-back calls is back on its timer, which
// runs from where it was: the next call expires it again, at the same
// instant as it would have.
func (p *PrioritizedLRU[K]) Rollback() {
	if !p.slab.tx.on {
		return
	}
	p.slab.rollback()
	p.keys.rollback()
	p.expiring.rollback()
	p.durations = p.txDurations.rollback(p.durations)
	p.nonEmpty, p.timers = p.tx.nonEmpty, p.tx.timers
}

// Begin starts recording (see [Transactional]).
func (p *S3FIFO[K]) Begin() {
	p.Commit()
	p.slab.begin()
	p.keys.begin()
	p.tx = s3Scalars[K]{bytes: p.bytes, count: p.count, tracked: p.tracked, hasEvicted: p.hasEvicted,
		claimed: p.claimed, absent: p.absent, absentValid: p.absentValid}
}

// Commit stops recording, keeping every change (see [Transactional]).
func (p *S3FIFO[K]) Commit() {
	p.slab.commit()
	p.keys.commit()
}

// Rollback undoes every call since Begin (see [Transactional]), the moves
// an Evict made between the small and main queues, its frequency decrements
// and its ghost entries included.
func (p *S3FIFO[K]) Rollback() {
	if !p.slab.tx.on {
		return
	}
	p.slab.rollback()
	p.keys.rollback()
	t := &p.tx
	p.bytes, p.count, p.tracked, p.hasEvicted = t.bytes, t.count, t.tracked, t.hasEvicted
	p.claimed, p.absent, p.absentValid = t.claimed, t.absent, t.absentValid
}

// retentionJournal records a Retention's changes while a transaction runs.
type retentionJournal[K comparable] struct {
	on     bool
	keys   sliceJournal[retentionKey[K]]
	groups sliceJournal[costGroup]
	// freeOps is the free group stack's pushes (g >= 0) and pops (^g).
	freeOps []int32
	index   []savedKey[K]
	byCost  []savedCost
	// The scalars at Begin.
	now       int64
	seq       uint64
	free      int32
	zeroGroup int32
}

type savedCost struct {
	bits uint64
	g    int32
	had  bool
}

func (r *Retention[K]) saveKey(i int32) { r.tx.keys.save(r.keys, int(i)) }

func (r *Retention[K]) saveGroup(g int32) { r.tx.groups.save(r.groups, int(g)) }

func (r *Retention[K]) setIndex(k K, i int32) {
	if r.tx.on {
		old, had := r.index[k]
		r.tx.index = append(r.tx.index, savedKey[K]{k: k, i: old, had: had})
	}
	r.index[k] = i
}

func (r *Retention[K]) delIndex(k K) {
	if r.tx.on {
		old, had := r.index[k]
		r.tx.index = append(r.tx.index, savedKey[K]{k: k, i: old, had: had})
	}
	delete(r.index, k)
}

func (r *Retention[K]) setCost(bits uint64, g int32) {
	if r.tx.on {
		old, had := r.byCost[bits]
		r.tx.byCost = append(r.tx.byCost, savedCost{bits: bits, g: old, had: had})
	}
	r.byCost[bits] = g
}

func (r *Retention[K]) delCost(bits uint64) {
	if r.tx.on {
		old, had := r.byCost[bits]
		r.tx.byCost = append(r.tx.byCost, savedCost{bits: bits, g: old, had: had})
	}
	delete(r.byCost, bits)
}

func (r *Retention[K]) pushFreeGroup(g int32) {
	if r.tx.on {
		r.tx.freeOps = append(r.tx.freeOps, g)
	}
	r.freeGroups = append(r.freeGroups, g)
}

func (r *Retention[K]) popFreeGroup() {
	n := len(r.freeGroups)
	if r.tx.on {
		r.tx.freeOps = append(r.tx.freeOps, ^r.freeGroups[n-1])
	}
	r.freeGroups = r.freeGroups[:n-1]
}

// Begin starts recording (see [Transactional]).
func (r *Retention[K]) Begin() {
	r.Commit()
	t := &r.tx
	t.on = true
	t.keys.begin(r.keys)
	t.groups.begin(r.groups)
	t.now, t.seq, t.free, t.zeroGroup = r.now, r.seq, r.free, r.zeroGroup
}

// Commit stops recording, keeping every change (see [Transactional]).
func (r *Retention[K]) Commit() {
	t := &r.tx
	t.on = false
	t.keys.commit()
	t.groups.commit()
	t.freeOps = t.freeOps[:0]
	clear(t.index)
	t.index = t.index[:0]
	t.byCost = t.byCost[:0]
}

// Rollback undoes every call since Begin (see [Transactional]): keys come
// back with their costs, last uses and stamps, so a victim is not "used
// now" and the order of ties is as before. The tournament, which only
// caches the winner among the groups' heads, is rebuilt from them.
func (r *Retention[K]) Rollback() {
	t := &r.tx
	if !t.on {
		return
	}
	t.on = false
	r.keys = t.keys.rollback(r.keys)
	r.groups = t.groups.rollback(r.groups)
	for j := len(t.freeOps) - 1; j >= 0; j-- {
		if g := t.freeOps[j]; g >= 0 {
			r.freeGroups = r.freeGroups[:len(r.freeGroups)-1]
		} else {
			r.freeGroups = append(r.freeGroups, ^g)
		}
	}
	for j := len(t.index) - 1; j >= 0; j-- {
		if sv := t.index[j]; sv.had {
			r.index[sv.k] = sv.i
		} else {
			delete(r.index, sv.k)
		}
	}
	for j := len(t.byCost) - 1; j >= 0; j-- {
		if sv := t.byCost[j]; sv.had {
			r.byCost[sv.bits] = sv.g
		} else {
			delete(r.byCost, sv.bits)
		}
	}
	r.now, r.seq, r.free, r.zeroGroup = t.now, t.seq, t.free, t.zeroGroup
	r.tree.rebuild(len(r.groups), func(g int) (candidate, bool) {
		grp := &r.groups[g]
		if int32(g) == r.zeroGroup || grp.head < 0 {
			return candidate{}, false
		}
		h := &r.keys[grp.head]
		return candidate{cost: grp.cost, t: h.t, seq: h.seq}, true
	}, r.now)
	r.Commit()
}
