package eviction_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/kvtier/kvtier/costmodel"
	"github.com/kvtier/kvtier/eviction"
)

// The cross-policy benchmark: every policy, and hashicorp/golang-lru's
// simplelru as the baseline, on the same Zipf key stream at N resident keys,
// timing each operation on its own:
//
//	BenchmarkPolicy/<policy>/<N>/Access   Access of a resident key (a hit)
//	BenchmarkPolicy/<policy>/<N>/Evict    Evict of one victim
//	BenchmarkPolicy/<policy>/<N>/Insert   Insert of a key that is not resident
//	BenchmarkPolicy/<policy>/<N>/Request  one request of a cache: Access on a
//	                                      hit, else Evict then Insert
//	BenchmarkPolicy/<policy>/<N>/PinUnpin Pin then Unpin of a resident key
//	                                      (not for the baseline, which has no pins)
//
// Evict and Insert run in batches: a timed batch of evictions is followed
// by an untimed batch of inserts that restores N resident keys, and the
// other way round, so the policy stays at its working size. Every call goes
// through the eviction.Policy interface, the baseline's included, so that
// dispatch costs the same for all.
//
// Run with:
//
//	go test -run '^$' -bench '^BenchmarkPolicy$' -benchtime 200000x ./eviction/

// benchPolicy is one contender of the benchmark.
type benchPolicy struct {
	name string
	// build returns a policy for n resident keys reading clock, or an error.
	build func(clock eviction.Clock, n int) (eviction.Policy[int], error)
	// pins reports whether the policy supports Pin and Unpin.
	pins bool
}

// The policies with a key index come twice: with their default Go map
// ("LRU") and with a DenseIndex over the stream's universe of 2N keys
// ("LRU-dense"). "LRU-map-via-Index" is the LRU with a Go map behind the
// Index interface, called as the dense index is: it measures what the
// interface call costs, which the default map path does not pay.
func benchPolicies() []benchPolicy {
	dense := func(n int) eviction.Index[int] {
		idx, err := eviction.NewDenseIndex(2*n - 1)
		if err != nil {
			panic(err) // n is one of the benchmark's sizes
		}
		return idx
	}
	return []benchPolicy{
		{"LRU", func(eviction.Clock, int) (eviction.Policy[int], error) { return eviction.NewLRU[int](), nil }, true},
		{"LRU-dense", func(_ eviction.Clock, n int) (eviction.Policy[int], error) {
			return eviction.NewLRUWithIndex(dense(n))
		}, true},
		{"LRU-map-via-Index", func(eviction.Clock, int) (eviction.Policy[int], error) {
			return eviction.NewLRUWithIndex(eviction.NewInterfaceMapIndex[int]())
		}, true},
		{"FIFO", func(eviction.Clock, int) (eviction.Policy[int], error) { return eviction.NewFIFO[int](), nil }, true},
		{"FIFO-dense", func(_ eviction.Clock, n int) (eviction.Policy[int], error) {
			return eviction.NewFIFOWithIndex(dense(n))
		}, true},
		{"PrioritizedLRU", func(c eviction.Clock, _ int) (eviction.Policy[int], error) {
			return eviction.NewPrioritizedLRU[int](c), nil
		}, true},
		{"PrioritizedLRU-dense", func(c eviction.Clock, n int) (eviction.Policy[int], error) {
			return eviction.NewPrioritizedLRUWithIndex(c, dense(n))
		}, true},
		{"S3FIFO", func(_ eviction.Clock, n int) (eviction.Policy[int], error) {
			return eviction.NewS3FIFO[int](eviction.S3FIFOConfig{Capacity: int64(n)})
		}, true},
		{"S3FIFO-dense", func(_ eviction.Clock, n int) (eviction.Policy[int], error) {
			return eviction.NewS3FIFOWithIndex(eviction.S3FIFOConfig{Capacity: int64(n)}, dense(n))
		}, true},
		{"ARC", func(_ eviction.Clock, n int) (eviction.Policy[int], error) {
			return eviction.NewARC[int](eviction.ARCConfig{Capacity: int64(n)})
		}, true},
		{"ARC-dense", func(_ eviction.Clock, n int) (eviction.Policy[int], error) {
			return eviction.NewARCWithIndex(eviction.ARCConfig{Capacity: int64(n)}, dense(n))
		}, true},
		{"WTinyLFU", func(_ eviction.Clock, n int) (eviction.Policy[int], error) {
			return eviction.NewWTinyLFU[int](eviction.WTinyLFUConfig{Capacity: int64(n)})
		}, true},
		{"WTinyLFU-dense", func(_ eviction.Clock, n int) (eviction.Policy[int], error) {
			return eviction.NewWTinyLFUWithIndex(eviction.WTinyLFUConfig{Capacity: int64(n)}, dense(n))
		}, true},
		{"Retention", func(c eviction.Clock, _ int) (eviction.Policy[int], error) {
			return eviction.NewRetention[int](c, costmodel.Recompute{Alpha: 2e-7, Beta: 3e-4, NonAttention: 1e-3})
		}, true},
		{"golang-lru", func(_ eviction.Clock, n int) (eviction.Policy[int], error) { return newSimpleLRU(n) }, false},
		{"map-floor", func(_ eviction.Clock, n int) (eviction.Policy[int], error) { return newMapFloor(n), nil }, false},
	}
}

// mapFloor is not a policy but the least a policy with a key index can do:
// a Go map of the resident keys plus a ring of them in insertion order, so
// Insert is one map assignment, Access one lookup and Evict one deletion.
// It shows how much of a policy's cost at 1M keys is the map's cache
// misses. It has no pins and its Remove leaves stale ring slots that Evict
// skips.
type mapFloor struct {
	m          map[int]struct{}
	ring       []int
	head, tail int // ring positions; tail-head keys are queued
}

func newMapFloor(n int) *mapFloor {
	size := 1
	for size < 2*n {
		size *= 2
	}
	return &mapFloor{m: make(map[int]struct{}), ring: make([]int, size)}
}

func (f *mapFloor) Insert(k int, _ eviction.Entry) error {
	if f.tail-f.head == len(f.ring) {
		return fmt.Errorf("map-floor: ring of %d full", len(f.ring))
	}
	f.m[k] = struct{}{}
	f.ring[f.tail&(len(f.ring)-1)] = k
	f.tail++
	return nil
}

func (f *mapFloor) Access(k int) { _ = f.m[k] }
func (f *mapFloor) Pin(int)      {}
func (f *mapFloor) Unpin(int)    {}
func (f *mapFloor) Remove(k int) { delete(f.m, k) }
func (f *mapFloor) Len() int     { return len(f.m) }
func (f *mapFloor) Evict() (int, bool) {
	for f.head < f.tail {
		k := f.ring[f.head&(len(f.ring)-1)]
		f.head++
		if _, ok := f.m[k]; ok {
			delete(f.m, k)
			return k, true
		}
	}
	return 0, false
}

// simpleLRU adapts hashicorp/golang-lru/v2's simplelru to the Policy
// interface for the benchmark: Insert is Add, Access is Get, Evict is
// RemoveOldest. Its size is set above the benchmark's working size so that
// Add never evicts on its own. It has no pins.
type simpleLRU struct {
	c *simplelru.LRU[int, struct{}]
}

func newSimpleLRU(n int) (*simpleLRU, error) {
	c, err := simplelru.NewLRU[int, struct{}](2*n, nil)
	if err != nil {
		return nil, err
	}
	return &simpleLRU{c: c}, nil
}

func (s *simpleLRU) Insert(k int, _ eviction.Entry) error { s.c.Add(k, struct{}{}); return nil }
func (s *simpleLRU) Access(k int)                         { s.c.Get(k) }
func (s *simpleLRU) Pin(int)                              {}
func (s *simpleLRU) Unpin(int)                            {}
func (s *simpleLRU) Remove(k int)                         { s.c.Remove(k) }
func (s *simpleLRU) Len() int                             { return s.c.Len() }
func (s *simpleLRU) Evict() (int, bool) {
	k, _, ok := s.c.RemoveOldest()
	return k, ok
}

// benchStream is the key stream of one size: Zipf-distributed requests over
// a universe of twice the resident keys.
type benchStream struct {
	keys     []int // the requests, replayed in a ring
	universe int
}

// streamLen is the length of the request ring; a power of two.
const streamLen = 1 << 20

func newBenchStream(n int) *benchStream {
	universe := 2 * n
	rng := rand.New(rand.NewPCG(uint64(n), 42))
	zipf := rand.NewZipf(rng, 1.1, 1, uint64(universe-1))
	// Scatter the ranks over the keys so that popularity does not follow
	// key order.
	perm := rng.Perm(universe)
	s := &benchStream{keys: make([]int, streamLen), universe: universe}
	for i := range s.keys {
		s.keys[i] = perm[zipf.Uint64()]
	}
	return s
}

// benchEntry is key k's entry, computed rather than looked up so that the
// harness adds no cache miss to the timed loops: size 1, one of three
// priorities, and a place among 32 layers and 64 chunks for the retention
// policy's cost.
func benchEntry(k int) eviction.Entry {
	chunk := k & 63
	return eviction.Entry{
		Size:     1,
		Priority: 20 + 15*(k%3),
		Unit:     costmodel.Unit{Layer: (k >> 6) & 31, Layers: 32, Chunk: chunk, Chunks: 64, ContextTokens: int64(16 * (chunk + 1))},
	}
}

// benchCache is a policy at its working size with the harness's view of
// which keys are resident.
type benchCache struct {
	p        eviction.Policy[int]
	clk      *eviction.ManualClock
	s        *benchStream
	rng      *rand.Rand
	resident []bool
	cursor   int
	batch    []int
}

func newBenchCache(b *testing.B, bp benchPolicy, s *benchStream, n int) *benchCache {
	clk := new(eviction.ManualClock)
	p, err := bp.build(clk, n)
	if err != nil {
		b.Fatalf("building %s: %v", bp.name, err)
	}
	c := &benchCache{
		p: p, clk: clk, s: s,
		rng:      rand.New(rand.NewPCG(uint64(n), 7)),
		resident: make([]bool, s.universe),
		batch:    make([]int, 0, batchSize(n)),
	}
	// Start from a random half of the universe, so that the stream has
	// misses from the start.
	for _, k := range c.rng.Perm(s.universe)[:n] {
		c.insert(k)
	}
	if got := p.Len(); got != n {
		b.Fatalf("%s tracks %d keys after %d inserts", bp.name, got, n)
	}
	return c
}

// batchSize is how many operations run between two timer switches.
func batchSize(n int) int { return min(n/4, 4096) }

func (c *benchCache) insert(k int) {
	if c.resident[k] {
		return
	}
	if err := c.p.Insert(k, benchEntry(k)); err == nil {
		c.resident[k] = true
	}
}

func (c *benchCache) next() int {
	k := c.s.keys[c.cursor&(streamLen-1)]
	c.cursor++
	return k
}

// nextResident fills c.batch with the next m stream keys that are resident.
func (c *benchCache) nextResident(m int) {
	c.batch = c.batch[:0]
	for len(c.batch) < m {
		if k := c.next(); c.resident[k] {
			c.batch = append(c.batch, k)
		}
	}
}

// nextMissing fills c.batch with m distinct keys that are not resident,
// drawn uniformly from the universe.
func (c *benchCache) nextMissing(m int) {
	c.batch = c.batch[:0]
	for len(c.batch) < m {
		k := c.rng.IntN(len(c.resident))
		if c.resident[k] {
			continue
		}
		c.resident[k] = true // reserve it so it is not picked twice
		c.batch = append(c.batch, k)
	}
	for _, k := range c.batch {
		c.resident[k] = false
	}
}

// evictBatch evicts up to m keys into c.batch. The harness's residency
// is updated by markEvicted, outside the timed loop.
func (c *benchCache) evictBatch(m int) {
	c.batch = c.batch[:0]
	for range m {
		k, ok := c.p.Evict()
		if !ok {
			return
		}
		c.batch = append(c.batch, k)
	}
}

func (c *benchCache) markEvicted() {
	for _, k := range c.batch {
		c.resident[k] = false
	}
}

// insertBatch inserts the keys of c.batch, which are not resident, and
// counts the failures; markInserted updates the residency afterwards.
func (c *benchCache) insertBatch() (failed int) {
	for _, k := range c.batch {
		if c.p.Insert(k, benchEntry(k)) != nil {
			failed++
		}
	}
	return failed
}

func (c *benchCache) markInserted(b *testing.B, failed int) {
	if failed > 0 {
		b.Fatalf("%d Inserts of keys that were not resident failed", failed)
	}
	for _, k := range c.batch {
		c.resident[k] = true
	}
}

func (c *benchCache) benchAccess(b *testing.B) {
	m := cap(c.batch)
	for done := 0; done < b.N; done += m {
		m = min(m, b.N-done)
		b.StopTimer()
		c.clk.Advance(time.Millisecond)
		c.nextResident(m)
		b.StartTimer()
		for _, k := range c.batch {
			c.p.Access(k)
		}
	}
}

func (c *benchCache) benchEvict(b *testing.B) {
	m := cap(c.batch)
	for done := 0; done < b.N; done += m {
		m = min(m, b.N-done)
		c.evictBatch(m)
		b.StopTimer()
		c.markEvicted()
		c.clk.Advance(time.Millisecond)
		c.nextMissing(m)
		c.markInserted(b, c.insertBatch())
		b.StartTimer()
	}
}

func (c *benchCache) benchInsert(b *testing.B) {
	m := cap(c.batch)
	for done := 0; done < b.N; done += m {
		m = min(m, b.N-done)
		b.StopTimer()
		c.clk.Advance(time.Millisecond)
		c.evictBatch(m)
		c.markEvicted()
		c.nextMissing(m)
		b.StartTimer()
		failed := c.insertBatch()
		b.StopTimer()
		c.markInserted(b, failed)
		b.StartTimer()
	}
}

func (c *benchCache) benchPinUnpin(b *testing.B) {
	m := cap(c.batch)
	for done := 0; done < b.N; done += m {
		m = min(m, b.N-done)
		b.StopTimer()
		c.clk.Advance(time.Millisecond)
		c.nextResident(m)
		b.StartTimer()
		for _, k := range c.batch {
			c.p.Pin(k)
			c.p.Unpin(k)
		}
	}
}

// benchRequest replays the stream as a cache would. The clock moves once
// per batch, untimed, like the other operations.
func (c *benchCache) benchRequest(b *testing.B) {
	m := cap(c.batch)
	misses := 0
	for done := 0; done < b.N; done += m {
		m = min(m, b.N-done)
		b.StopTimer()
		c.clk.Advance(time.Millisecond)
		b.StartTimer()
		for range m {
			k := c.next()
			if c.resident[k] {
				c.p.Access(k)
				continue
			}
			misses++
			if v, ok := c.p.Evict(); ok {
				c.resident[v] = false
			}
			if c.p.Insert(k, benchEntry(k)) == nil {
				c.resident[k] = true
			}
		}
	}
	b.ReportMetric(float64(misses)/float64(b.N), "misses/op")
}

func BenchmarkPolicy(b *testing.B) {
	sizes := [...]int{1 << 10, 1 << 16, 1 << 20}
	streams := map[int]*benchStream{}
	for _, bp := range benchPolicies() {
		b.Run(bp.name, func(b *testing.B) {
			for _, n := range sizes {
				b.Run(sizeName(n), func(b *testing.B) {
					s, ok := streams[n]
					if !ok {
						s = newBenchStream(n)
						streams[n] = s
					}
					c := newBenchCache(b, bp, s, n)
					ops := []struct {
						name string
						run  func(*testing.B)
					}{
						{"Access", c.benchAccess},
						{"Evict", c.benchEvict},
						{"Insert", c.benchInsert},
						{"Request", c.benchRequest},
					}
					if bp.pins {
						ops = append(ops, struct {
							name string
							run  func(*testing.B)
						}{"PinUnpin", c.benchPinUnpin})
					}
					for _, op := range ops {
						b.Run(op.name, func(b *testing.B) {
							b.ReportAllocs()
							op.run(b)
							if got := c.p.Len(); got != n {
								b.Fatalf("%s left %d keys resident, want %d", op.name, got, n)
							}
						})
					}
				})
			}
		})
	}
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dM", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dK", n>>10)
	}
	return fmt.Sprint(n)
}

// BenchmarkPolicyBytesPerKey reports each policy's heap bytes per tracked
// key at 1M keys (the live heap after a GC, before and after inserting),
// for the metadata target (policy + radix + pool ≤ 128 bytes
// per resident unit). The ns/op it prints is the time to insert 1M keys
// and means little.
func BenchmarkPolicyBytesPerKey(b *testing.B) {
	const n = 1 << 20
	for _, bp := range benchPolicies() {
		b.Run(bp.name, func(b *testing.B) {
			var perKey float64
			for range b.N {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				p, err := bp.build(new(eviction.ManualClock), n)
				if err != nil {
					b.Fatal(err)
				}
				for k := range n {
					if err := p.Insert(k, benchEntry(k)); err != nil {
						b.Fatal(err)
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				perKey = float64(after.HeapAlloc-before.HeapAlloc) / n
				runtime.KeepAlive(p)
			}
			b.ReportMetric(perKey, "B/key")
		})
	}
}
