package kvcache

import (
	"context"
	"slices"
	"sync"
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

// BenchmarkLockWaitOnboard measures how long another goroutine waits for
// the cache's lock while 32k-token prompts onboard from the CPU tier: each
// iteration acquires one of two prompts that each fill the GPU, so every
// Acquire moves the other prompt's units down and loads its own, then
// waits for them and releases. A prober calls Stats every 20 µs and
// records how long each call took. The copy engine takes 2 ms per batch
// (sync-mover: a Mover that sleeps 2 ms per Copy, under the lock) or per
// transfer (async-engine: an AsyncMemoryStore with a 2 ms latency, on its
// worker). Reported: the probe's p50, p99 and max wait, and the hold of
// the Acquire itself.
func BenchmarkLockWaitOnboard(b *testing.B) {
	for _, kind := range []layout.Kind{layout.AllLayers, layout.PagedLayer} {
		for _, mode := range []string{"sync-mover", "async-engine"} {
			b.Run(kind.String()+"/"+mode, func(b *testing.B) { benchLockWait(b, kind, mode) })
		}
	}
}

func benchLockWait(b *testing.B, kind layout.Kind, mode string) {
	m := layout.Model{Name: "bench", Layers: 32, QueryHeads: 8, KVHeads: 1, HeadDim: 8, ElemBytes: 1}
	l, err := layout.New(m, kind, 16)
	if err != nil {
		b.Fatal(err)
	}
	const tokens = 32 << 10
	units := tokens / 16 * l.UnitsPerBlock()
	tiers := GPUAndCPU(Capacity{Units: int64(units)}, Capacity{Units: int64(2 * units)})
	store, err := NewMemoryStore(l, tiers)
	if err != nil {
		b.Fatal(err)
	}
	cfg := Config{Layout: l, Tiers: tiers}
	const delay = 2 * time.Millisecond
	if mode == "sync-mover" {
		cfg.Mover = sleepyMover{store: store, delay: delay}
	} else {
		e, err := NewAsyncMemoryStore(store, AsyncOptions{Workers: 1, Latency: delay})
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
	prompts := [2][]uint32{seqTokens(tokens, 0), seqTokens(tokens, 1<<20)}
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
	// Both prompts cached, one on the GPU, one on the CPU.
	run(prompts[0])
	run(prompts[1])
	var stop atomic.Bool
	var waits []time.Duration
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			start := time.Now()
			_ = c.Stats()
			waits = append(waits, time.Since(start))
			time.Sleep(20 * time.Microsecond)
		}
	}()
	var holds []time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		holds = append(holds, run(prompts[i%2]))
	}
	b.StopTimer()
	stop.Store(true)
	wg.Wait()
	if st := c.Stats(); st.Onboards < uint64(b.N*units) {
		b.Fatalf("%d onboards for %d iterations of %d units", st.Onboards, b.N, units)
	}
	slices.Sort(waits)
	slices.Sort(holds)
	q := func(d []time.Duration, f float64) float64 {
		return float64(d[min(len(d)-1, int(f*float64(len(d))))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(q(waits, 0.5), "p50-wait-µs")
	b.ReportMetric(q(waits, 0.99), "p99-wait-µs")
	b.ReportMetric(q(waits, 1), "max-wait-µs")
	b.ReportMetric(q(holds, 0.5), "acquire-µs")
	b.ReportMetric(float64(units), "units/onboard")
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
