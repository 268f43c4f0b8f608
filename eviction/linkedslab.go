package eviction

import (
	"errors"
	"fmt"
)

// ErrTooManyKeys reports an Insert into a slab-backed policy (LRU, FIFO,
// PrioritizedLRU, S3FIFO, ARC, WTinyLFU) that already holds the most keys
// its int32 node indices can address (about two billion).
var ErrTooManyKeys = errors.New("eviction: too many tracked keys")

// noLink marks a node that is on no list: its prev is noLink.
const noLink int32 = -1

// linkedNode is one slot of a linkedSlab: a key, the policy's per-key data
// and the links of the list the key is on. meta comes first so that a
// zero-size meta adds no padding.
type linkedNode[K comparable, M any] struct {
	meta       M
	key        K
	prev, next int32
}

// linkedSlab stores the nodes of one or more circular doubly linked lists in
// a single slice, addressed by int32 indices instead of pointers. The first
// heads nodes are sentinels, one per list, so insertion and removal never
// branch on an empty list. Freed nodes are chained through next into a free
// list and reused, so a policy whose number of tracked keys has stopped
// growing allocates nothing. Using int32 halves the link size against
// pointers and keeps the slice free of pointers the garbage collector would
// have to scan (when K and M hold none).
type linkedSlab[K comparable, M any] struct {
	nodes chunks[linkedNode[K, M]]
	free  int32 // first free node, chained through next; noLink when none
	heads int32
	// tx journals the changes made while a transaction runs (see
	// Transactional), as the operations that undo them.
	tx slabJournal[K, M]
}

// init creates heads empty lists.
func (s *linkedSlab[K, M]) init(heads int) {
	s.heads = int32(heads)
	s.nodes = chunks[linkedNode[K, M]]{}
	for i := range int32(heads) {
		s.nodes.push(linkedNode[K, M]{prev: i, next: i})
	}
	s.free = noLink
}

// alloc returns a detached node holding k and m, reusing a freed node when
// there is one. It fails only when the int32 index space is exhausted.
func (s *linkedSlab[K, M]) alloc(k K, m M) (int32, error) {
	if s.free != noLink {
		i := s.free
		n := s.nodes.at(i)
		s.free = n.next
		n.key, n.meta, n.prev, n.next = k, m, noLink, noLink
		s.record(i, undoAlloc)
		return i, nil
	}
	if s.nodes.full() {
		return 0, fmt.Errorf("%w: %d", ErrTooManyKeys, s.nodes.len())
	}
	i := s.nodes.push(linkedNode[K, M]{meta: m, key: k, prev: noLink, next: noLink})
	s.record(i, undoAppend)
	return i, nil
}

// release returns a detached node (prev and next noLink) to the free list.
// The key and meta are cleared so that a K or M holding pointers does not
// keep garbage alive.
func (s *linkedSlab[K, M]) release(i int32) {
	var zk K
	var zm M
	n := s.nodes.at(i)
	if s.tx.on {
		s.recordRelease(i)
	}
	n.key, n.meta, n.prev, n.next = zk, zm, noLink, s.free
	s.free = i
}

// linked reports whether node i is on a list.
func (s *linkedSlab[K, M]) linked(i int32) bool {
	return s.nodes.at(i).prev != noLink
}

// pushBack appends detached node i to the list of sentinel head.
func (s *linkedSlab[K, M]) pushBack(head, i int32) {
	h, n := s.nodes.at(head), s.nodes.at(i)
	last := h.prev
	n.prev, n.next = last, head
	s.nodes.at(last).next = i
	h.prev = i
	s.record(i, undoPushBack)
}

// unlink detaches node i from its list.
func (s *linkedSlab[K, M]) unlink(i int32) {
	n := s.nodes.at(i)
	// The undo of an unlink puts i back after its old prev.
	s.record(i, n.prev)
	s.nodes.at(n.prev).next = n.next
	s.nodes.at(n.next).prev = n.prev
	n.prev, n.next = noLink, noLink
}

// moveToBack moves linked node i to the end of the list of sentinel head.
// It is unlink then pushBack, with each node looked up once.
func (s *linkedSlab[K, M]) moveToBack(head, i int32) {
	h := s.nodes.at(head)
	if h.prev == i {
		return
	}
	n := s.nodes.at(i)
	s.record(i, n.prev)
	s.nodes.at(n.prev).next = n.next
	s.nodes.at(n.next).prev = n.prev
	last := h.prev
	n.prev, n.next = last, head
	s.nodes.at(last).next = i
	h.prev = i
	s.record(i, undoPushBack)
}

// front returns the first node of the list of sentinel head, or head itself
// when the list is empty.
func (s *linkedSlab[K, M]) front(head int32) int32 {
	return s.nodes.at(head).next
}

// trackedKeyError is the error of an Insert of a key that is already
// tracked; it names the key so the caller can find the duplicate.
func trackedKeyError[K comparable](k K) error {
	return fmt.Errorf("%w: %v", ErrKeyExists, k)
}
