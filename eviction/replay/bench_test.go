package replay_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/eviction/replay"
	"github.com/kvtier/kvtier/eviction/trace"
)

// benchTrace is cloudPhysicsIO decoded in memory, or, when the shared
// folder is absent, a generated trace of the same length with Zipf keys and
// block-I/O-like sizes.
func benchTrace(b *testing.B) (name string, reqs []trace.Request) {
	b.Helper()
	if _, err := os.Stat(cloudPhysicsPath); err == nil {
		return "cloudPhysicsIO", loadCloudPhysics(b)
	}
	return "generated", generatedTrace(113872, 50000, 1)
}

// generatedTrace returns n requests over a universe of objects with Zipf
// popularity and sizes of 512 B to 64 KiB fixed per object.
func generatedTrace(n, universe int, seed uint64) []trace.Request {
	rng := rand.New(rand.NewPCG(seed, 99))
	zipf := rand.NewZipf(rng, 1.0001, 8, uint64(universe-1))
	sizes := make([]int64, universe)
	for i := range sizes {
		sizes[i] = 512 << rng.IntN(8)
	}
	reqs := make([]trace.Request, n)
	for i := range reqs {
		id := zipf.Uint64()
		reqs[i] = trace.Request{Time: int64(i / 16), ID: id + 1000, Size: sizes[id], NextAccess: -1}
	}
	return reqs
}

// BenchmarkReplay measures the replay loop on a trace decoded in memory,
// so reading is not measured: one iteration replays the whole trace into a
// fresh policy. req/s is requests replayed per second of the loop. The
// runners: Requests is RunRequests (trace ids, map indexes), Prepared is
// Prepared.Run with the policy's map index, PreparedDense the same with the
// policy's keys in Prepared.NewIndex's dense index.
//
//	go test -run '^$' -bench '^BenchmarkReplay$' -benchtime 20x ./eviction/replay/
func BenchmarkReplay(b *testing.B) {
	name, reqs := benchTrace(b)
	policies := []struct {
		name string
		new  func(capacity int64, idx eviction.Index[uint64]) (eviction.Policy[uint64], error)
	}{
		{"LRU", func(_ int64, idx eviction.Index[uint64]) (eviction.Policy[uint64], error) {
			return eviction.NewLRUWithIndex(idx)
		}},
		{"FIFO", func(_ int64, idx eviction.Index[uint64]) (eviction.Policy[uint64], error) {
			return eviction.NewFIFOWithIndex(idx)
		}},
		{"S3FIFO", func(c int64, idx eviction.Index[uint64]) (eviction.Policy[uint64], error) {
			return eviction.NewS3FIFOWithIndex(eviction.S3FIFOConfig{Capacity: c}, idx)
		}},
	}
	prepared := replay.Prepare(reqs)
	runners := []struct {
		name  string
		run   func(eviction.Policy[uint64], replay.Config) (replay.Result, error)
		index func() eviction.Index[uint64] // the policy's index; nil: the map
	}{
		{"Requests", func(p eviction.Policy[uint64], cfg replay.Config) (replay.Result, error) {
			return replay.RunRequests(p, reqs, cfg)
		}, nil},
		{"Prepared", prepared.Run, nil},
		{"PreparedDense", prepared.Run, prepared.NewIndex},
	}
	for _, r := range runners {
		for _, p := range policies {
			for _, capacity := range []int64{128 * mib, 1024 * mib} {
				b.Run(fmt.Sprintf("%s/%s/%s/%dMiB", r.name, name, p.name, capacity/mib), func(b *testing.B) {
					b.ReportAllocs()
					var loop time.Duration
					var missRatio float64
					for b.Loop() {
						var idx eviction.Index[uint64]
						if r.index != nil {
							idx = r.index()
						}
						policy, err := p.new(capacity, idx)
						if err != nil {
							b.Fatal(err)
						}
						res, err := r.run(policy, replay.Config{Capacity: capacity})
						if err != nil {
							b.Fatal(err)
						}
						loop += res.Elapsed
						missRatio = res.MissRatio()
					}
					b.ReportMetric(float64(len(reqs))*float64(b.N)/loop.Seconds(), "req/s")
					b.ReportMetric(missRatio, "miss-ratio")
				})
			}
		}
	}
}

// BenchmarkReplayBaseline is the baseline for BenchmarkReplay's LRU: the
// cache simulation one would write by hand around hashicorp/golang-lru's
// simplelru, whose single map serves both the hit test and the eviction
// order (the replay keeps its own index beside the policy's, and goes
// through the Policy interface). It gives the same miss counts.
//
//	go test -run '^$' -bench '^BenchmarkReplayBaseline$' -benchtime 20x ./eviction/replay/
func BenchmarkReplayBaseline(b *testing.B) {
	name, reqs := benchTrace(b)
	for _, capacity := range []int64{128 * mib, 1024 * mib} {
		want, err := replay.RunRequests(eviction.NewLRU[uint64](), reqs, replay.Config{Capacity: capacity})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("%s/golang-lru/%dMiB", name, capacity/mib), func(b *testing.B) {
			b.ReportAllocs()
			var loop time.Duration
			for b.Loop() {
				start := time.Now()
				lru, err := simplelru.NewLRU[uint64, int64](1<<30, nil)
				if err != nil {
					b.Fatal(err)
				}
				var occupied, misses int64
				for i := range reqs {
					q := &reqs[i]
					if _, ok := lru.Get(q.ID); ok {
						continue
					}
					misses++
					if q.Size > capacity {
						continue
					}
					for occupied+q.Size > capacity {
						_, size, _ := lru.RemoveOldest()
						occupied -= size
					}
					lru.Add(q.ID, q.Size)
					occupied += q.Size
				}
				loop += time.Since(start)
				if misses != want.Misses {
					b.Fatalf("baseline: %d misses, replay %d", misses, want.Misses)
				}
			}
			b.ReportMetric(float64(len(reqs))*float64(b.N)/loop.Seconds(), "req/s")
		})
	}
}
