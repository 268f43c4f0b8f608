package eviction

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/kvtier/kvtier/costmodel"
	"github.com/kvtier/kvtier/internal/cputime"
)

// retentionWorkload is a fixed stream of entries and clock steps, so that
// the kinetic policy and the exhaustive scan see the same operations.
type retentionWorkload struct {
	name  string
	cost  costmodel.Recompute
	entry func(i int) Entry // the i-th entry of the stream
	steps []time.Duration
}

const benchStream = 1 << 16

// mix64 is the splitmix64 finalizer: a cheap, well-mixed hash of i.
func mix64(i uint64) uint64 {
	i += 0x9e3779b97f4a7c15
	i = (i ^ i>>30) * 0xbf58476d1ce4e5b9
	i = (i ^ i>>27) * 0x94d049bb133111eb
	return i ^ i>>31
}

// seedWorkload prices units as a kvcache tier would: the seed cost model
// over 28 layers and 128 chunks of 32 tokens, so at most 3584 distinct
// costs however many keys there are.
func seedWorkload() retentionWorkload {
	const layers, chunks, block = 28, 128, 32
	w := retentionWorkload{
		name: "seed",
		cost: costmodel.Recompute{Alpha: 2e-7, Beta: 3e-4, NonAttention: 1e-3},
		entry: func(i int) Entry {
			h := mix64(uint64(i))
			chunk := int(h>>8) % chunks
			e := NewEntry(1)
			e.Unit = costmodel.Unit{Layer: int(h % layers), Layers: layers, Chunk: chunk, Chunks: chunks, ContextTokens: int64(chunk * block)}
			return e
		},
	}
	w.fillSteps()
	return w
}

// continuousWorkload gives every key its own cost (a hash of its position
// in the stream), spread over twelve orders of magnitude: the tournament
// then has a leaf per key.
func continuousWorkload() retentionWorkload {
	const chunks = 1 << 30
	w := retentionWorkload{
		name: "continuous",
		cost: costmodel.Recompute{
			Beta:        1,
			LayerWeight: costmodel.Flat,
			PositionWeight: func(i, _ int) float64 {
				return math.Exp(float64(mix64(uint64(i))>>11)*0x1p-53*28 - 14)
			},
		},
		entry: func(i int) Entry {
			e := NewEntry(1)
			e.Unit = costmodel.Unit{Chunk: i % chunks, Chunks: chunks}
			return e
		},
	}
	w.fillSteps()
	return w
}

// fillSteps draws clock steps: a third of the operations at the same
// instant, the rest up to 2 µs apart.
func (w *retentionWorkload) fillSteps() {
	rng := rand.New(rand.NewPCG(1, 2))
	for range benchStream {
		var d time.Duration
		if rng.IntN(3) != 0 {
			d = time.Duration(rng.IntN(2000))
		}
		w.steps = append(w.steps, d)
	}
}

// fill inserts keys 0..n-1 into every policy, advancing the clock 1 µs per
// key, and returns the position in the entry stream.
func (w *retentionWorkload) fill(clock *ManualClock, n int, ps ...Policy[int]) int {
	for k := range n {
		clock.Advance(time.Microsecond)
		for _, p := range ps {
			if err := p.Insert(k, w.entry(k)); err != nil {
				panic(err)
			}
		}
	}
	return n
}

// cpuMeter reports the process CPU time per operation of a benchmark loop
// as the metric cpu-ns/op. On the shared 2-core machine the benchmarks run
// on, wall time also counts the time other processes held the core. The
// process is otherwise idle (nothing allocates), so its CPU time is the
// loop's.
type cpuMeter struct {
	start time.Duration
	ok    bool
}

func startCPU() cpuMeter {
	t, ok := cputime.Process()
	return cpuMeter{start: t, ok: ok}
}

func (m cpuMeter) report(b *testing.B) {
	if t, ok := cputime.Process(); ok && m.ok && b.N > 0 {
		b.ReportMetric(float64(t-m.start)/float64(b.N), "cpu-ns/op")
	}
}

func benchSizes() []int { return []int{1 << 10, 1 << 16, 1 << 20} }

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dM", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dK", n>>10)
	}
	return fmt.Sprint(n)
}

// evictInsert is one steady-state step: move the clock, evict a victim,
// insert it again with the next entry of the stream.
func evictInsert(p Policy[int], clock *ManualClock, w *retentionWorkload, i int) int {
	clock.Advance(w.steps[i%len(w.steps)])
	k, ok := p.Evict()
	if !ok {
		panic("no victim")
	}
	if err := p.Insert(k, w.entry(i)); err != nil {
		panic(err)
	}
	return k
}

// splitTimer times the Evict and the Insert of one step in splitEvery
// separately, in CPU time of the benchmark's thread, so that Evict alone
// can be read against its target on a machine shared with other work. The
// cost of reading the clock (a system call) is measured once and
// subtracted. Where thread CPU time is not available, nothing is reported.
type splitTimer struct {
	evict, insert time.Duration
	samples       int
	overhead      time.Duration
	ok            bool
}

const splitEvery = 64

func newSplitTimer() *splitTimer {
	runtime.LockOSThread()
	st := &splitTimer{}
	const calib = 1000
	t0, ok := cputime.Thread()
	if !ok {
		return st
	}
	for range calib {
		cputime.Thread()
	}
	t1, _ := cputime.Thread()
	st.overhead, st.ok = (t1-t0)/(calib+1), true
	return st
}

func (st *splitTimer) step(p Policy[int], clock *ManualClock, w *retentionWorkload, i int) {
	if !st.ok || i%splitEvery != 0 {
		evictInsert(p, clock, w, i)
		return
	}
	clock.Advance(w.steps[i%len(w.steps)])
	t0, _ := cputime.Thread()
	k, ok := p.Evict()
	t1, _ := cputime.Thread()
	if !ok {
		panic("no victim")
	}
	if err := p.Insert(k, w.entry(i)); err != nil {
		panic(err)
	}
	t2, _ := cputime.Thread()
	st.evict += t1 - t0 - st.overhead
	st.insert += t2 - t1 - st.overhead
	st.samples++
}

// report adds the metrics evict-cpu-ns/op and insert-cpu-ns/op.
func (st *splitTimer) report(b *testing.B) {
	runtime.UnlockOSThread()
	if st.samples > 0 {
		b.ReportMetric(float64(st.evict)/float64(st.samples), "evict-cpu-ns/op")
		b.ReportMetric(float64(st.insert)/float64(st.samples), "insert-cpu-ns/op")
	}
}

// verifyVictims runs steps steady-state steps on a fresh policy and a fresh
// scan and fails unless every victim is the same.
func verifyVictims(b *testing.B, w *retentionWorkload, n, steps int) {
	clock := &ManualClock{}
	p, err := NewRetention[int](clock, w.cost)
	if err != nil {
		b.Fatal(err)
	}
	ref := newScanRetention[int](clock, w.cost, compareScaled)
	w.fill(clock, n, p, ref)
	for i := range steps {
		clock.Advance(w.steps[i%len(w.steps)])
		want, _ := ref.Evict()
		got, _ := p.Evict()
		if got != want {
			b.Fatalf("%s n=%d step %d: kinetic victim %d, scan victim %d", w.name, n, i, got, want)
		}
		e := w.entry(n + i)
		if err := p.Insert(got, e); err != nil {
			b.Fatal(err)
		}
		if err := ref.Insert(want, e); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRetentionEvict measures a steady-state Evict followed by the
// Insert that keeps the key count at n, for the kinetic policy and for an
// exhaustive scan (the baseline) on the same operation stream. Before
// timing the kinetic policy it checks, on a fresh pair, that both choose
// the same victims.
func BenchmarkRetentionEvict(b *testing.B) {
	for _, n := range benchSizes() {
		for _, mk := range []func() retentionWorkload{seedWorkload, continuousWorkload} {
			w := mk()
			b.Run(fmt.Sprintf("costs=%s/n=%s/policy=kinetic", w.name, sizeName(n)), func(b *testing.B) {
				verifyVictims(b, &w, n, max(200, 2_000_000/n))
				clock := &ManualClock{}
				p, err := NewRetention[int](clock, w.cost)
				if err != nil {
					b.Fatal(err)
				}
				i := w.fill(clock, n, p)
				for range 2 * benchStream {
					i++
					evictInsert(p, clock, &w, i) // past the fill pattern
				}
				st := newSplitTimer()
				b.ReportAllocs()
				cpu := startCPU()
				for b.Loop() {
					i++
					st.step(p, clock, &w, i)
				}
				cpu.report(b)
				st.report(b)
			})
			b.Run(fmt.Sprintf("costs=%s/n=%s/policy=scan", w.name, sizeName(n)), func(b *testing.B) {
				clock := &ManualClock{}
				p := newScanRetention[int](clock, w.cost, compareScaled)
				i := w.fill(clock, n, p)
				st := newSplitTimer()
				b.ReportAllocs()
				cpu := startCPU()
				for b.Loop() {
					i++
					st.step(p, clock, &w, i)
				}
				cpu.report(b)
				st.report(b)
			})
		}
	}
}

// BenchmarkRetentionAccess measures Access of a random tracked key. With
// the seed costs most keys are not the least recently used of their cost
// (O(1)); with continuous costs every key heads its own group, so every
// Access repairs the tournament.
func BenchmarkRetentionAccess(b *testing.B) {
	for _, n := range benchSizes() {
		for _, mk := range []func() retentionWorkload{seedWorkload, continuousWorkload} {
			w := mk()
			b.Run(fmt.Sprintf("costs=%s/n=%s", w.name, sizeName(n)), func(b *testing.B) {
				clock := &ManualClock{}
				p, err := NewRetention[int](clock, w.cost)
				if err != nil {
					b.Fatal(err)
				}
				w.fill(clock, n, p)
				rng := rand.New(rand.NewPCG(5, 6))
				keys := make([]int, benchStream)
				for j := range keys {
					keys[j] = rng.IntN(n)
				}
				i := 0
				b.ReportAllocs()
				cpu := startCPU()
				for b.Loop() {
					i++
					clock.Advance(w.steps[i%len(w.steps)])
					p.Access(keys[i%len(keys)])
				}
				cpu.report(b)
			})
		}
	}
}
