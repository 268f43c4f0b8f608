package lfu_test

import (
	"testing"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/examples/custompolicy/lfu"
)

// benchCycle runs, per iteration, one Access of a resident key, one Evict
// and one Insert of a new key, on a policy holding n keys: the steady state
// of a full cache on a miss-heavy trace.
func benchCycle(b *testing.B, p eviction.Policy[uint64], n int) {
	for k := range uint64(n) {
		if err := p.Insert(k, eviction.NewEntry(1)); err != nil {
			b.Fatal(err)
		}
	}
	next := uint64(n)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		p.Access(next - 1 - uint64(i%(n/2)))
		if _, ok := p.Evict(); !ok {
			b.Fatal("nothing to evict")
		}
		if err := p.Insert(next, eviction.NewEntry(1)); err != nil {
			b.Fatal(err)
		}
		next++
	}
}

func BenchmarkCycle1M(b *testing.B) {
	b.Run("LFU", func(b *testing.B) { benchCycle(b, lfu.New[uint64](), 1<<20) })
	b.Run("LRU", func(b *testing.B) { benchCycle(b, eviction.NewLRU[uint64](), 1<<20) })
}
