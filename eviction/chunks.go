package eviction

import (
	"math"

	"github.com/kvtier/kvtier/internal/chunked"
)

// A policy's state grows with the keys it tracks, and an owner that calls
// it under a lock (a kvcache tier does) must not pay, in one call, for
// what the policy already holds: an append-doubled slice copies every
// element when it outgrows its capacity (at a million keys, tens of MB).
// The node slabs, the key indexes and the per-node arrays of the policies
// are therefore chunked (package chunked): growing allocates one small
// chunk and never moves an element. The price is two dependent loads per
// node access (BENCHMARKS.md measures it).

// chunks is a chunked.Array indexed by the int32 node indices of the
// policies.
type chunks[T any] struct{ a chunked.Array[T] }

// at returns element i, which must be below len.
func (c *chunks[T]) at(i int32) *T { return c.a.At(int(i)) }

// len returns the number of elements.
func (c *chunks[T]) len() int32 { return int32(c.a.Len()) }

// full reports whether the array holds as many elements as an int32 index
// can name, so that another push would overflow.
func (c *chunks[T]) full() bool { return c.a.Len() >= math.MaxInt32 }

// push appends v and returns its index.
func (c *chunks[T]) push(v T) int32 { return int32(c.a.Push(v)) }

// truncate drops the elements from n on.
func (c *chunks[T]) truncate(n int32) { c.a.Truncate(int(n)) }

// each calls f for every element, in index order.
func (c *chunks[T]) each(f func(i int32, v *T)) {
	c.a.All(func(i int, v *T) bool { f(int32(i), v); return true })
}

// sparse is a chunked.Sparse: an array indexed by uint64 whose chunks are
// allocated when first written.
type sparse[T any] struct{ s chunked.Sparse[T] }

// get returns element i, or the zero T when never written.
func (a *sparse[T]) get(i uint64) T { return a.s.Get(i) }

// ref returns element i for writing.
func (a *sparse[T]) ref(i uint64) *T { return a.s.Ref(i) }
