// Package chunked provides growable arrays whose elements never move:
// growing one allocates a small chunk (Len elements) and never copies
// what it holds, so that no call on a structure the size of a cache's
// resident set pays for that size. kvcache's unit table and the policies
// of package eviction keep their per-unit and per-key state in them.
//
// An append-doubled slice copies all its elements when it outgrows its
// capacity: at a million units, tens of MB under the cache's lock, and on
// a machine where touching fresh memory costs about a microsecond per
// KiB, tens of milliseconds. An Array instead allocates one chunk of Len
// elements at a time, and a directory block of DirLen chunk pointers every
// DirLen chunks; its top level, one pointer per DirLen·Len elements, is
// the only slice that grows by doubling (a few hundred bytes for a billion
// elements). The price is two more dependent loads per access than a
// slice (both usually in the L1 cache).
//
// The package is internal: its API serves kvcache and eviction.
package chunked

// Shift is log2 of Len.
const Shift = 8

// Len is the elements of a chunk: 256 (4 KiB of 16-byte elements).
const Len = 1 << Shift

// dirShift is log2 of DirLen.
const dirShift = 10

// DirLen is the chunks of a directory block: 1024 (8 KiB of pointers,
// 262,144 elements).
const DirLen = 1 << dirShift

// chunk is Len elements; block is DirLen chunks.
type (
	chunk[T any] [Len]T
	block[T any] [DirLen]*chunk[T]
)

// Array is a growable array of T indexed from 0 whose elements never
// move. The zero value is empty. It is not safe for concurrent use.
type Array[T any] struct {
	top []*block[T]
	n   int
}

// At returns element i, which must be below Len(); the pointer stays
// valid for the Array's lifetime.
func (a *Array[T]) At(i int) *T {
	return &a.top[i>>(Shift+dirShift)][i>>Shift&(DirLen-1)][i&(Len-1)]
}

// Span returns elements [i, i+n) as a slice of their chunk, which must
// be below Len(), when they lie in one chunk (i%Len + n <= Len), and nil
// otherwise. The slice aliases the Array: writes through it are writes
// to the elements.
func (a *Array[T]) Span(i, n int) []T {
	o := i & (Len - 1)
	if o+n > Len {
		return nil
	}
	return a.top[i>>(Shift+dirShift)][i>>Shift&(DirLen-1)][o : o+n : o+n]
}

// Len returns the number of elements.
func (a *Array[T]) Len() int { return a.n }

// Push appends v and returns its index.
func (a *Array[T]) Push(v T) int {
	i := a.n
	if i&(Len-1) == 0 {
		a.addChunk(i)
	}
	a.top[i>>(Shift+dirShift)][i>>Shift&(DirLen-1)][i&(Len-1)] = v
	a.n++
	return i
}

// addChunk allocates the chunk that starts at element i, if it is not
// there (a truncated Array keeps its chunks).
func (a *Array[T]) addChunk(i int) {
	t := i >> (Shift + dirShift)
	if t == len(a.top) {
		a.top = append(a.top, new(block[T]))
	}
	if b := a.top[t]; b[i>>Shift&(DirLen-1)] == nil {
		b[i>>Shift&(DirLen-1)] = new(chunk[T])
	}
}

// Truncate drops the elements from n on, setting them to the zero T (they
// may hold pointers). The chunks stay allocated.
func (a *Array[T]) Truncate(n int) {
	var zero T
	for a.n > n {
		a.n--
		*a.At(a.n) = zero
	}
}

// All calls f with the index and a pointer to every element, in order,
// until f returns false.
func (a *Array[T]) All(f func(i int, v *T) bool) {
	for i := range a.n {
		if !f(i, a.At(i)) {
			return
		}
	}
}

// Sparse is an array of T indexed by any uint64 whose chunks are allocated
// when an element in them is first written: an element never written
// reads as the zero T, and memory follows the indices written, not the
// largest one. The zero value is empty. It is not safe for concurrent use.
type Sparse[T any] struct {
	top []*block[T]
}

// Get returns element i (the zero T when its chunk was never written).
func (s *Sparse[T]) Get(i uint64) T {
	if t := i >> (Shift + dirShift); t < uint64(len(s.top)) {
		if b := s.top[t]; b != nil {
			if c := b[i>>Shift&(DirLen-1)]; c != nil {
				return c[i&(Len-1)]
			}
		}
	}
	var zero T
	return zero
}

// Ref returns element i for writing, allocating its chunk (and directory
// block) when needed; the pointer stays valid for the Sparse's lifetime.
func (s *Sparse[T]) Ref(i uint64) *T {
	t := i >> (Shift + dirShift)
	if t >= uint64(len(s.top)) {
		s.top = append(s.top, make([]*block[T], t+1-uint64(len(s.top)))...)
	}
	b := s.top[t]
	if b == nil {
		b = new(block[T])
		s.top[t] = b
	}
	c := b[i>>Shift&(DirLen-1)]
	if c == nil {
		c = new(chunk[T])
		b[i>>Shift&(DirLen-1)] = c
	}
	return &c[i&(Len-1)]
}

// All calls f with the index and value of every element of the chunks
// written so far (elements never written included, as zeros), in order,
// until f returns false.
func (s *Sparse[T]) All(f func(i uint64, v T) bool) {
	for t, b := range s.top {
		if b == nil {
			continue
		}
		for k, c := range b {
			if c == nil {
				continue
			}
			for j, v := range c {
				if !f(uint64(t)<<(Shift+dirShift)|uint64(k)<<Shift|uint64(j), v) {
					return
				}
			}
		}
	}
}
