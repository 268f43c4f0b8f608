package eviction

// Transactional is implemented by a Policy that can take back a group of
// calls exactly. An owner that runs an operation as a transaction over its
// own state and its policies (as a kvcache tier does: pins, inserts and
// evictions, then copies that may fail) calls Begin before the operation's
// first call to the policy, and Commit after its last one, or Rollback when
// the operation fails. Without it the owner can only compensate with more
// calls (insert its victims again, Unpin what it pinned), which the policy
// takes as new events: an LRU victim would come back most recently used,
// an expired priority with a fresh timer, a retention victim used now.
//
// Between Begin and Commit or Rollback the policy records every call that
// can change it: those of Policy and its own (such as S3FIFO.Admit),
// including calls that fail or change nothing. Calls outside a transaction
// are not recorded and cost one predictable branch per change. Recording
// allocates nothing once the journal has grown to the largest transaction
// seen: the journal keeps its capacity from one transaction to the next.
// The methods never panic, whatever order they are called in. They are not
// generic, so that an owner can find them on any Policy with a type
// assertion. Every policy of this package implements the interface.
type Transactional interface {
	// Begin starts recording the calls that follow. Transactions do not
	// nest: Begin while recording keeps the calls recorded so far, as
	// Commit does, and starts recording again.
	Begin()
	// Commit stops recording and keeps every call's effect: the policy is
	// as if the calls had been made without Begin and Commit. Commit does
	// nothing when not recording.
	Commit()
	// Rollback undoes every call made since Begin, newest first, and stops
	// recording. The policy is then exactly as it was at Begin: it tracks
	// the same keys, pins the same ones, and has the same order and history
	// (recency, insertion order, priorities and the deadlines of their
	// timers, hit counts, queues and ghost entries, costs and last uses),
	// so that any sequence of later calls makes it choose the same victims
	// as a policy that never received the rolled-back calls. Time is not
	// rolled back: the policy gets back the times it had recorded (last
	// uses, deadlines, its latest reading of the clock), and later calls
	// read the clock at their own time. A priority that expired during the
	// rolled-back calls is restored unexpired with its old deadline, so the
	// next call expires it, as it would have without them. Rollback does
	// nothing when not recording.
	Rollback()
}

var (
	_ Transactional = (*LRU[int])(nil)
	_ Transactional = (*FIFO[int])(nil)
	_ Transactional = (*PrioritizedLRU[int])(nil)
	_ Transactional = (*S3FIFO[int])(nil)
	_ Transactional = (*ARC[int])(nil)
	_ Transactional = (*WTinyLFU[int])(nil)
	_ Transactional = (*Retention[int])(nil)
)

// The journals below record, while a transaction runs, how to take back
// each change to a policy's state, to be applied newest first: each undo
// then meets the state right after the change it takes back, so it can be
// simple. A linkedSlab records the inverse of each list operation (an
// unlink is undone by linking the node after its old prev again, whose
// next is then its old next) and the old value of each key and meta it
// overwrites; a keyIndex records the binding each key had before a write,
// known to the caller, so recording costs no lookup; a stampHeap records
// the inverse of each push and removal; other arrays record the old value
// of each element written. Lengths and scalar fields are saved at Begin.

// slabJournal records a linkedSlab's changes.
type slabJournal[K comparable, M any] struct {
	on  bool
	ops []slabUndo
	// keys and metas hold what undoRelease and undoMeta put back, in the
	// order of their ops.
	keys  []K
	metas []M
}

// slabUndo undoes one change to node i: what is an undo* constant, or, for
// an unlink, the node i followed (a node index, so at least 0).
type slabUndo struct {
	i, what int32
}

// The kinds of slabUndo, all below noLink so that they are no node index.
const (
	undoPushBack int32 = -2 - iota // unlink i again
	undoAlloc                      // put i back on the free list
	undoAppend                     // drop i, the last node
	undoRelease                    // take i off the free list, with its key and meta
	undoMeta                       // put i's meta back
)

// record journals one change to node i, while a transaction runs.
func (s *linkedSlab[K, M]) record(i, what int32) {
	if s.tx.on {
		s.tx.ops = append(s.tx.ops, slabUndo{i: i, what: what})
	}
}

// recordRelease journals the release of node i, while a transaction runs.
func (s *linkedSlab[K, M]) recordRelease(i int32) {
	s.tx.ops = append(s.tx.ops, slabUndo{i: i, what: undoRelease})
	s.tx.keys = append(s.tx.keys, s.nodes.at(i).key)
	s.tx.metas = append(s.tx.metas, s.nodes.at(i).meta)
}

// meta returns node i's meta for writing, having journaled its value.
func (s *linkedSlab[K, M]) meta(i int32) *M {
	if s.tx.on {
		s.tx.ops = append(s.tx.ops, slabUndo{i: i, what: undoMeta})
		s.tx.metas = append(s.tx.metas, s.nodes.at(i).meta)
	}
	return &s.nodes.at(i).meta
}

func (s *linkedSlab[K, M]) begin() { s.tx.on = true }

func (s *linkedSlab[K, M]) commit() {
	s.tx.on = false
	s.tx.ops = s.tx.ops[:0]
	clear(s.tx.keys) // keys and metas may hold pointers
	s.tx.keys = s.tx.keys[:0]
	clear(s.tx.metas)
	s.tx.metas = s.tx.metas[:0]
}

func (s *linkedSlab[K, M]) rollback() {
	s.tx.on = false
	var zk K
	var zm M
	keys, metas := len(s.tx.keys), len(s.tx.metas)
	for j := len(s.tx.ops) - 1; j >= 0; j-- {
		u := s.tx.ops[j]
		n := s.nodes.at(u.i)
		switch u.what {
		case undoPushBack:
			s.nodes.at(n.prev).next = n.next
			s.nodes.at(n.next).prev = n.prev
			n.prev, n.next = noLink, noLink
		case undoAlloc:
			n.key, n.meta, n.prev, n.next = zk, zm, noLink, s.free
			s.free = u.i
		case undoAppend:
			s.nodes.truncate(u.i)
		case undoRelease:
			keys--
			metas--
			s.free = n.next
			n.key, n.meta, n.prev, n.next = s.tx.keys[keys], s.tx.metas[metas], noLink, noLink
		case undoMeta:
			metas--
			n.meta = s.tx.metas[metas]
		default:
			prev := u.what
			next := s.nodes.at(prev).next
			n.prev, n.next = prev, next
			s.nodes.at(prev).next = u.i
			s.nodes.at(next).prev = u.i
		}
	}
	s.commit()
}

// keyJournal records a keyIndex's changes: each key written, with the
// node it had before (noLink: none).
type keyJournal[K comparable] struct {
	on    bool
	saved []savedKey[K]
}

type savedKey[K comparable] struct {
	k K
	i int32
}

// record journals that k had node i (noLink: none) before a write, while
// a transaction runs.
func (x *keyIndex[K]) record(k K, i int32) {
	if x.tx.on {
		x.tx.saved = append(x.tx.saved, savedKey[K]{k: k, i: i})
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
		if sv.i == noLink {
			x.delete(sv.k, noLink) // a store: k had no node
		} else {
			_ = x.store(sv.k, sv.i) // a delete: k held the node before, so it can again
		}
	}
	x.commit()
}

// heapJournal records a stampHeap's pushes and removals, undone by their
// inverses. That may leave the items in another layout than at Begin, but
// the heap's order, and so which item min returns after any later calls,
// depends only on the items it holds, because no two items of a heap are
// equal: FIFO's seq is the key's insertion number, PrioritizedLRU's a
// counter that every push increments (both restored at Rollback).
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

// sparseJournal records the writes to a sparse array's elements: each
// index written with its value before, restored newest first. (Chunks a
// rolled-back write allocated stay, holding zeros, as if never written.)
type sparseJournal[T any] struct {
	on    bool
	saved []savedSparse[T]
}

type savedSparse[T any] struct {
	i uint64
	v T
}

func (j *sparseJournal[T]) begin() { j.on = true }

// save records that element i held v before a write, while a transaction
// runs.
func (j *sparseJournal[T]) save(i uint64, v T) {
	if j.on {
		j.saved = append(j.saved, savedSparse[T]{i: i, v: v})
	}
}

func (j *sparseJournal[T]) commit() {
	j.on = false
	clear(j.saved)
	j.saved = j.saved[:0]
}

// rollback restores a's elements as they were at Begin.
func (j *sparseJournal[T]) rollback(a *sparse[T]) {
	for k := len(j.saved) - 1; k >= 0; k-- {
		*a.ref(j.saved[k].i) = j.saved[k].v
	}
	j.commit()
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
	p.txDurations.begin()
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
// that expired during the rolled-back calls is back in the heap of running
// timers with its old deadline, so the next call that drains the heap
// expires it, in the same order among the others, as it would have without
// the rolled-back calls.
func (p *PrioritizedLRU[K]) Rollback() {
	if !p.slab.tx.on {
		return
	}
	p.slab.rollback()
	p.keys.rollback()
	p.expiring.rollback()
	p.txDurations.rollback(&p.durations)
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

// Begin starts recording (see [Transactional]).
func (p *ARC[K]) Begin() {
	p.Commit()
	p.slab.begin()
	p.keys.begin()
	p.tx = arcScalars[K]{bytes: p.bytes, count: p.count, tracked: p.tracked, p: p.p,
		ghostHit: p.ghostHit, inB1: p.inB1, inB2: p.inB2, claim: p.claim, incoming: p.incoming}
}

// Commit stops recording, keeping every change (see [Transactional]).
func (p *ARC[K]) Commit() {
	p.slab.commit()
	p.keys.commit()
	var zero K
	p.tx.claim = zero // may hold a pointer
}

// Rollback undoes every call since Begin (see [Transactional]): the
// target p, the moves between lists and the ghosts an Evict or Admit
// made or dropped included.
func (p *ARC[K]) Rollback() {
	if !p.slab.tx.on {
		return
	}
	p.slab.rollback()
	p.keys.rollback()
	t := &p.tx
	p.bytes, p.count, p.tracked, p.p = t.bytes, t.count, t.tracked, t.p
	p.ghostHit, p.inB1, p.inB2, p.claim, p.incoming = t.ghostHit, t.inB1, t.inB2, t.claim, t.incoming
	var zero K
	t.claim = zero // may hold a pointer
}

// Begin starts recording (see [Transactional]).
func (p *WTinyLFU[K]) Begin() {
	p.Commit()
	p.slab.begin()
	p.keys.begin()
	p.freq.begin()
	p.tx = wtlScalars{bytes: p.bytes, count: p.count, tracked: p.tracked}
}

// Commit stops recording, keeping every change (see [Transactional]).
func (p *WTinyLFU[K]) Commit() {
	p.slab.commit()
	p.keys.commit()
	p.freq.commit()
}

// Rollback undoes every call since Begin (see [Transactional]): the moves
// between lists and the frequency sketch's counts and agings included.
func (p *WTinyLFU[K]) Rollback() {
	if !p.slab.tx.on {
		return
	}
	p.slab.rollback()
	p.keys.rollback()
	p.freq.rollback()
	p.bytes, p.count, p.tracked = p.tx.bytes, p.tx.count, p.tx.tracked
}

// retentionJournal records a Retention's changes while a transaction runs.
type retentionJournal[K comparable] struct {
	on     bool
	keys   sliceJournal[retentionKey[K]]
	groups sliceJournal[costGroup]
	// freeOps is the free group stack's pushes (g >= 0) and pops (^g).
	freeOps []int32
	// index and byCost hold each binding written and the value it had
	// before (-1: none).
	index  []savedKey[K]
	byCost []savedCost
	// The scalars at Begin.
	now       int64
	seq       uint64
	free      int32
	zeroGroup int32
}

type savedCost struct {
	bits uint64
	g    int32
}

func (r *Retention[K]) saveKey(i int32) { r.tx.keys.save(r.keys, int(i)) }

func (r *Retention[K]) saveGroup(g int32) { r.tx.groups.save(r.groups, int(g)) }

// setIndex binds k, which has no slot, to slot i.
func (r *Retention[K]) setIndex(k K, i int32) {
	if r.tx.on {
		r.tx.index = append(r.tx.index, savedKey[K]{k: k, i: -1})
	}
	r.index[k] = i
}

// delIndex forgets k, whose slot is i.
func (r *Retention[K]) delIndex(k K, i int32) {
	if r.tx.on {
		r.tx.index = append(r.tx.index, savedKey[K]{k: k, i: i})
	}
	delete(r.index, k)
}

// setCost binds cost bits, which have no group, to group g.
func (r *Retention[K]) setCost(bits uint64, g int32) {
	if r.tx.on {
		r.tx.byCost = append(r.tx.byCost, savedCost{bits: bits, g: -1})
	}
	r.byCost[bits] = g
}

// delCost forgets cost bits, whose group is g.
func (r *Retention[K]) delCost(bits uint64, g int32) {
	if r.tx.on {
		r.tx.byCost = append(r.tx.byCost, savedCost{bits: bits, g: g})
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
// now" and the order of ties is as before. The tournament only caches the
// winner among the groups' heads, a function of the heads and the time, so
// it is rebuilt from the restored heads rather than journaled: Rollback
// costs O(g) for g distinct costs, while recording every tournament node a
// call recomputes would cost every transaction, committed or not.
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
		if sv := t.index[j]; sv.i >= 0 {
			r.index[sv.k] = sv.i
		} else {
			delete(r.index, sv.k)
		}
	}
	for j := len(t.byCost) - 1; j >= 0; j-- {
		if sv := t.byCost[j]; sv.g >= 0 {
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
