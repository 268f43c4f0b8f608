package kvcache

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier/layout"
)

// sleepyMover is a synchronous Mover whose every batch takes delay more
// than its memcpy (a copy engine's latency, paid under the cache's lock).
type sleepyMover struct {
	store *MemoryStore
	delay time.Duration
}

func (m sleepyMover) Copy(b []Copy) error {
	time.Sleep(m.delay)
	return m.store.Copy(b)
}

// BenchmarkLockWait measures how long another sequence's calls wait for
// the cache's lock while 32k-token prompts move through it (2,048 blocks;
// 65,536 units paged per layer over 32 layers). Each iteration acquires
// one prompt, waits for its transfers, commits it and releases it:
//
//   - onboard: one of two prompts that each fill the GPU, alternately, so
//     every Acquire moves the other prompt's units down to the CPU and
//     loads its own from there;
//   - miss: a new prompt each time, so every Acquire evicts the last one
//     (offloaded to the CPU tier, which evicts in turn) and every Commit
//     registers 2,048 new blocks.
//
// Meanwhile a prober runs a small sequence of its own the way a server
// decodes it: every 20 µs a BlockTables of the sequence and a Stats, every
// 8th time also an Append of a token, every 128th a Readiness, and every
// 256 tokens a new sequence (Release, Acquire of 16 tokens); it times
// every call. The copy
// engine takes 2 ms per batch (sync-mover: a Mover that sleeps 2 ms per
// Copy, under the lock) or per transfer (async-engine: an
// AsyncMemoryStore with a 2 ms latency, on its worker). Reported: the
// prober's p50, p99 and max wait over all its calls, and the wall time of
// the long Acquire itself.
//
// "paged-layer-blockkeys" is the paged layout with one policy key per block
// and pool (Config.BlockKeys).
func BenchmarkLockWait(b *testing.B) {
	for _, kind := range []layout.Kind{layout.AllLayers, layout.PagedLayer} {
		for _, keys := range []bool{false, true} {
			if keys && kind == layout.AllLayers {
				continue
			}
			name := kind.String()
			if keys {
				name += "-blockkeys"
			}
			for _, mode := range []string{"sync-mover", "async-engine"} {
				for _, work := range []string{"onboard", "miss"} {
					b.Run(name+"/"+mode+"/"+work, func(b *testing.B) { benchLockWait(b, kind, keys, mode, work) })
				}
			}
		}
	}
}

func benchLockWait(b *testing.B, kind layout.Kind, blockKeys bool, mode, work string) {
	m := layout.Model{Name: "bench", Layers: 32, QueryHeads: 8, KVHeads: 1, HeadDim: 8, ElemBytes: 1}
	l, err := layout.New(m, kind, 16)
	if err != nil {
		b.Fatal(err)
	}
	const tokens = 32 << 10
	units := tokens / 16 * l.UnitsPerBlock()
	// The GPU holds one prompt and the prober's blocks.
	slack := 64 * l.UnitsPerBlock()
	tiers := GPUAndCPU(Capacity{Units: int64(units + slack)}, Capacity{Units: int64(2 * units)})
	store, err := NewMemoryStore(l, tiers)
	if err != nil {
		b.Fatal(err)
	}
	cfg := Config{Layout: l, Tiers: tiers, BlockKeys: blockKeys}
	const delay = 2 * time.Millisecond
	if mode == "sync-mover" {
		cfg.Mover = sleepyMover{store: store, delay: delay}
	} else {
		e, err := NewAsyncMemoryStore(store, AsyncOptions{Workers: 16, Latency: delay})
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close()
		cfg.Engine = e
	}
	c, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	run := func(p []uint32) time.Duration {
		start := time.Now()
		plan, err := c.Acquire(Request{Tokens: p})
		hold := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.WaitReady(context.Background(), plan.Seq, -1); err != nil {
			b.Fatal(err)
		}
		if err := c.Commit(plan.Seq, len(p)); err != nil {
			b.Fatal(err)
		}
		if err := c.Release(plan.Seq); err != nil {
			b.Fatal(err)
		}
		return hold
	}
	prompt := func(i int) []uint32 {
		if work == "onboard" {
			i %= 2
		}
		return seqTokens(tokens, uint32(i+1)<<20)
	}
	// onboard: both prompts cached, one on the GPU, one on the CPU.
	// miss: the GPU and the CPU full of earlier prompts.
	for i := range 3 {
		run(prompt(-3 + i))
	}
	var stop atomic.Bool
	waits, errc := make(chan []time.Duration, 1), make(chan error, 1)
	go func() {
		var d []time.Duration
		defer func() { waits <- d }()
		timed := func(f func() error) {
			start := time.Now()
			err := f()
			d = append(d, time.Since(start))
			if err != nil {
				select {
				case errc <- err:
				default:
				}
			}
		}
		var id SeqID
		var tables StepTables
		var r Readiness
		for i, n := 0, 0; !stop.Load(); i++ {
			if i%8 == 0 {
				if n%256 == 0 {
					if n > 0 {
						timed(func() error { return c.Release(id) })
					}
					timed(func() error {
						plan, err := c.Acquire(Request{Tokens: seqTokens(16, 7<<28+uint32(n))})
						id = plan.Seq
						return err
					})
				}
				timed(func() error { _, err := c.Append(id, uint32(n)); return err })
				n++
			}
			timed(func() error { return c.BlockTables(&tables, id) })
			timed(func() error { _ = c.Stats(); return nil })
			if i%128 == 0 {
				timed(func() error { return c.Readiness(id, &r) })
			}
			time.Sleep(20 * time.Microsecond)
		}
	}()
	var holds []time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		holds = append(holds, run(prompt(i)))
	}
	b.StopTimer()
	stop.Store(true)
	d := <-waits
	select {
	case err := <-errc:
		b.Fatalf("prober: %v", err)
	default:
	}
	st := c.Stats()
	// The prober's blocks leave room for some of each prompt on the GPU.
	if work == "onboard" && st.Onboards < uint64(b.N*(units-slack)) {
		b.Fatalf("%d onboards for %d iterations of %d units", st.Onboards, b.N, units-slack)
	}
	if work == "miss" && st.Offloads < uint64(b.N*units) {
		b.Fatalf("%d offloads for %d iterations of %d units", st.Offloads, b.N, units)
	}
	slices.Sort(d)
	slices.Sort(holds)
	q := func(d []time.Duration, f float64) float64 {
		return float64(d[min(len(d)-1, int(f*float64(len(d))))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(q(d, 0.5), "p50-wait-µs")
	b.ReportMetric(q(d, 0.99), "p99-wait-µs")
	b.ReportMetric(q(d, 1), "max-wait-µs")
	b.ReportMetric(q(holds, 0.5), "acquire-µs")
	b.ReportMetric(float64(units), "units/prompt")
}

// BenchmarkAppendWaits decodes 3,000 blocks (one token per Append) on a
// GPU whose victims move down to the CPU through an engine, so that every
// block-opening Append makes transfers its sequence waits on, and drives
// completion the two ways the docs allow: Poll after each Append
// ("poll"), or Readiness ("readiness"). One iteration is the whole decode;
// the metrics are the mean block-opening Append over the first and the
// last 300 blocks (first-µs, last-µs): a cost that grows with the
// transfers the sequence has waited on shows as last > first.
func BenchmarkAppendWaits(b *testing.B) {
	for _, mode := range []string{"poll", "readiness"} {
		b.Run(mode, func(b *testing.B) {
			const blocks = 3000
			var first, last time.Duration
			b.ReportAllocs()
			for range b.N {
				b.StopTimer()
				c, id := waitsCache(b)
				b.StartTimer()
				var r Readiness
				for i := range blocks * 4 {
					t0 := time.Now()
					if _, err := c.Append(id, uint32(i)); err != nil {
						b.Fatal(err)
					}
					d := time.Since(t0)
					if i%4 == 0 && i/4 < 300 {
						first += d
					} else if i%4 == 0 && i/4 >= blocks-300 {
						last += d
					}
					var err error
					if mode == "poll" {
						_, err = c.Poll()
					} else {
						err = c.Readiness(id, &r)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(first.Nanoseconds())/float64(300*b.N)/1e3, "first-µs")
			b.ReportMetric(float64(last.Nanoseconds())/float64(300*b.N)/1e3, "last-µs")
		})
	}
}
