package eviction_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kvtier/kvtier/eviction"
)

// BenchmarkS3FIFO times S3-FIFO's operations at N resident keys (capacity N
// objects, so the ghost remembers 0.9N more), each on its own, with LRU in
// the same harness as the baseline:
//
//	Access  a hit on a resident key, drawn from a Zipf(1.05) stream as in
//	        the cross-policy BenchmarkPolicy (hot keys are cache-warm)
//	Insert  a key never seen before (into small)
//	Evict   one victim (small and main reinsertion work included)
//
// Insert and Evict run in batches of 1024: after each timed batch an
// untimed batch of the other operation restores N resident keys. Before
// timing, 2N never-seen keys pass through the cache, between two Zipf
// streams, so that the ghost is full and the index map has reached its
// working size.
//
//	go test -run '^$' -bench '^BenchmarkS3FIFO$' -benchtime 1000000x ./eviction/
func BenchmarkS3FIFO(b *testing.B) {
	policies := []struct {
		name string
		new  func(n int) eviction.Policy[uint64]
	}{
		{"S3FIFO", func(n int) eviction.Policy[uint64] {
			p, err := eviction.NewS3FIFO[uint64](eviction.S3FIFOConfig{Capacity: int64(n)})
			if err != nil {
				b.Fatal(err)
			}
			return p
		}},
		{"LRU", func(int) eviction.Policy[uint64] { return eviction.NewLRU[uint64]() }},
	}
	for _, n := range []int{1 << 10, 1 << 20} {
		for _, pol := range policies {
			b.Run(fmt.Sprintf("%d/%s", n, pol.name), func(b *testing.B) {
				p, hot, next := warmPolicy(b, pol.new(n), n)
				b.Run("Access", func(b *testing.B) {
					b.ReportAllocs()
					i := 0
					for b.Loop() {
						p.Access(hot[i&(len(hot)-1)])
						i++
					}
				})
				const batch = 1024
				b.Run("Insert", func(b *testing.B) {
					b.ReportAllocs()
					for done := 0; done < b.N; {
						m := min(batch, b.N-done)
						for range m {
							if err := p.Insert(next, eviction.NewEntry(1)); err != nil {
								b.Fatal(err)
							}
							next++
						}
						done += m
						b.StopTimer()
						for range m {
							p.Evict()
						}
						b.StartTimer()
					}
				})
				b.Run("Evict", func(b *testing.B) {
					b.ReportAllocs()
					for done := 0; done < b.N; {
						m := min(batch, b.N-done)
						for range m {
							if _, ok := p.Evict(); !ok {
								b.Fatal("nothing to evict")
							}
						}
						done += m
						b.StopTimer()
						for range m {
							_ = p.Insert(next, eviction.NewEntry(1))
							next++
						}
						b.StartTimer()
					}
				})
			})
		}
	}
}

// warmPolicy brings p to n resident keys: a Zipf request stream, 2n
// never-seen keys (filling S3-FIFO's ghost), and Zipf again. It returns p, a power-of-two
// ring of resident keys in Zipf order for Access, and the next never-seen
// key.
func warmPolicy(b *testing.B, p eviction.Policy[uint64], n int) (eviction.Policy[uint64], []uint64, uint64) {
	b.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	zipf := rand.NewZipf(rng, 1.05, 1, uint64(2*n))
	resident := make(map[uint64]bool, n)
	request := func(k uint64) {
		if resident[k] {
			p.Access(k)
			return
		}
		if len(resident) == n {
			v, _ := p.Evict()
			delete(resident, v)
		}
		if err := p.Insert(k, eviction.NewEntry(1)); err != nil {
			b.Fatal(err)
		}
		resident[k] = true
	}
	for range 4 * n {
		request(zipf.Uint64())
	}
	next := uint64(2*n) + 1
	for range 2 * n {
		request(next)
		next++
	}
	// Zipf again, so that the hot keys are back in an LRU the fresh keys
	// flushed.
	for range 2 * n {
		request(zipf.Uint64())
	}
	hot := make([]uint64, 0, 1<<16)
	for tries := 0; len(hot) < cap(hot); tries++ {
		if tries > 100*cap(hot) {
			b.Fatal("the Zipf stream finds too few resident keys")
		}
		if k := zipf.Uint64(); resident[k] {
			hot = append(hot, k)
		}
	}
	return p, hot, next
}
