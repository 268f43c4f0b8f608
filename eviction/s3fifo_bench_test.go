package eviction_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kvtier/kvtier/eviction"
)

// BenchmarkS3FIFO times S3-FIFO's operations at N resident keys (capacity N
// objects, so the ghost remembers 0.9N more), each on its own:
//
//	Access  a hit on a resident key, drawn from a Zipf(1.05) stream as in
//	        the cross-policy BenchmarkPolicy (hot keys are cache-warm)
//	Insert  a key never seen before (into small)
//	Evict   one victim (small and main reinsertion work included)
//
// Insert and Evict run in batches of 1024: after each timed batch an
// untimed batch of the other operation restores N resident keys. Before
// timing, 2N never-seen keys pass through the cache so that the ghost is
// full and the index map has reached its working size.
//
//	go test -run '^$' -bench '^BenchmarkS3FIFO$' -benchtime 1000000x ./eviction/
func BenchmarkS3FIFO(b *testing.B) {
	for _, n := range []int{1 << 10, 1 << 20} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			p, hot, next := warmS3FIFO(b, n)
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
				done := 0
				for done < b.N {
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
				done := 0
				for done < b.N {
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

// warmS3FIFO returns an S3-FIFO at n resident keys after a Zipf request
// stream has run through it, followed by 2n never-seen keys (filling the
// ghost); a power-of-two ring of resident keys in Zipf order for Access; and
// the next never-seen key.
func warmS3FIFO(b *testing.B, n int) (*eviction.S3FIFO[uint64], []uint64, uint64) {
	b.Helper()
	p, err := eviction.NewS3FIFO[uint64](eviction.S3FIFOConfig{Capacity: int64(n)})
	if err != nil {
		b.Fatal(err)
	}
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
	hot := make([]uint64, 0, 1<<16)
	for len(hot) < cap(hot) {
		if k := zipf.Uint64(); resident[k] {
			hot = append(hot, k)
		}
	}
	return p, hot, next
}
