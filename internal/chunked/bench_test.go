package chunked

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkAt measures what an access costs an Array against a plain
// slice of the same elements: each op follows one link of a random cycle
// through n elements (element i holds the index of the next), so every
// access depends on the one before, as a policy's list walk does. At 4k
// elements both fit in the L1/L2 caches; at 1M (16 MB of 16-byte elements)
// most accesses miss, and the Array's extra loads (top level, directory
// block, both mostly cached) add little to the miss itself.
func BenchmarkAt(b *testing.B) {
	type elem struct {
		next uint64
		_    uint64 // 16-byte elements, the size of an LRU node
	}
	for _, n := range []int{4 << 10, 64 << 10, 1 << 20} {
		perm := rand.New(rand.NewPCG(1, uint64(n))).Perm(n)
		s := make([]elem, n)
		var a Array[elem]
		for range n {
			a.Push(elem{})
		}
		for i := range n {
			next := uint64(perm[(i+1)%n])
			s[perm[i]].next = next
			a.At(perm[i]).next = next
		}
		b.Run(fmt.Sprintf("n=%dk/slice", n>>10), func(b *testing.B) {
			b.ReportAllocs()
			i := uint64(0)
			for range b.N {
				i = s[i].next
			}
			sink = i
		})
		b.Run(fmt.Sprintf("n=%dk/chunked", n>>10), func(b *testing.B) {
			b.ReportAllocs()
			i := uint64(0)
			for range b.N {
				i = a.At(int(i)).next
			}
			sink = i
		})
	}
}

// sink keeps the benchmarks' loops from being optimized away.
var sink uint64
