package kvcache

import (
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier/layout"
)

// BenchmarkHolds times, for each of the cache's calls that a server may
// make on a long sequence, the call's wall time and the longest wait of a
// prober that reads the block tables of a sequence of its own over and
// over meanwhile (yielding between calls; a sleep would miss holds shorter
// than the timer's resolution): the longest the call held the lock at
// once. Clear, which needs a cache with no live sequence, runs after the
// prober has stopped: its hold is its wall time. Every
// iteration builds a cache holding one sequence of ctx tokens on the
// seed model, metadata only, and runs the calls in this order: Acquire
// (a miss), Commit, Fork, Admit and Blocks (the whole prefix cached),
// Truncate of the child to 10 tokens, Release of the child, Truncate of
// the parent, Release of the parent, Acquire of another prompt, Abort,
// Clear. Reported per call, in ms, medians over the iterations: wall,
// and hold, the prober's longest wait during the call. A prober's wait
// includes the time the holder was descheduled, which on a busy machine
// can be milliseconds: run it on a quiet one, and several iterations.
func BenchmarkHolds(b *testing.B) {
	for _, ctx := range []int{32 << 10, 128 << 10} {
		for _, kind := range []layout.Kind{layout.PagedLayer, layout.AllLayers} {
			for _, keys := range []bool{false, true} {
				if keys && kind == layout.AllLayers {
					continue
				}
				name := ctxName(ctx) + "/" + kind.String()
				if keys {
					name += "-blockkeys"
				}
				b.Run(name, func(b *testing.B) { holds(b, ctx, kind, keys) })
			}
		}
	}
}

// holdCalls names the calls holds times, in order.
var holdCalls = []string{"Acquire", "Commit", "Fork", "Admit", "Blocks", "TruncateChild",
	"ReleaseChild", "TruncateParent", "ReleaseParent", "AcquireAgain", "Abort", "Clear"}

func holds(b *testing.B, ctx int, kind layout.Kind, keys bool) {
	l, err := layout.New(layout.SeedModel(), kind, 16)
	if err != nil {
		b.Fatal(err)
	}
	per := int64(l.UnitsPerBlock())
	wall := make([][]time.Duration, len(holdCalls))
	hold := make([][]time.Duration, len(holdCalls))
	b.ReportAllocs()
	for range b.N {
		c, err := New(Config{Layout: l, BlockKeys: keys, Tiers: GPUAndCPU(Capacity{Units: per * int64(3*ctx/16+64)}, Capacity{})})
		if err != nil {
			b.Fatal(err)
		}
		// The prober reads the block tables of a sequence of its own
		// (Stats would not wait: it answers from a snapshot while the
		// lock is held).
		probe, err := c.Acquire(Request{Tokens: seqPrompt(9, 16)})
		if err != nil {
			b.Fatal(err)
		}
		var stop atomic.Bool
		var maxWait atomic.Int64
		done := make(chan struct{})
		var probeErr error
		go func() {
			defer close(done)
			var tables StepTables
			for !stop.Load() {
				s := time.Now()
				if err := c.BlockTables(&tables, probe.Seq); err != nil {
					probeErr = err
					return
				}
				if d := int64(time.Since(s)); d > maxWait.Load() {
					maxWait.Store(d)
				}
				runtime.Gosched()
			}
		}()
		k := 0
		timed := func(f func() error) {
			time.Sleep(time.Millisecond) // the prober runs
			maxWait.Store(0)
			s := time.Now()
			if err := f(); err != nil {
				b.Fatalf("%s: %v", holdCalls[k], err)
			}
			wall[k] = append(wall[k], time.Since(s))
			time.Sleep(time.Millisecond)
			hold[k] = append(hold[k], time.Duration(maxWait.Load()))
			k++
		}
		var p, ch, q Plan
		prompt := seqPrompt(1, ctx+5)
		timed(func() (err error) { p, err = c.Acquire(Request{Tokens: prompt}); return })
		timed(func() error { return c.Commit(p.Seq, ctx+5) })
		timed(func() (err error) { ch, err = c.Fork(p.Seq); return })
		timed(func() (err error) { _, err = c.Admit(Request{Tokens: prompt}); return })
		timed(func() (err error) { _, err = c.Blocks(nil); return })
		timed(func() (err error) { _, err = c.Truncate(ch.Seq, 10); return })
		timed(func() error { return c.Release(ch.Seq) })
		timed(func() (err error) { _, err = c.Truncate(p.Seq, 10); return })
		timed(func() error { return c.Release(p.Seq) })
		timed(func() (err error) { q, err = c.Acquire(Request{Tokens: seqPrompt(2, ctx+5)}); return })
		timed(func() error { return c.Abort(q.Seq) })
		timed(func() error {
			// Clear needs no live sequence: the prober's goes first.
			stop.Store(true)
			<-done
			if err := c.Release(probe.Seq); err != nil {
				return err
			}
			return c.Clear()
		})
		if probeErr != nil {
			b.Fatalf("prober: %v", probeErr)
		}
	}
	for k, name := range holdCalls {
		w, h := wall[k], hold[k]
		slices.Sort(w)
		slices.Sort(h)
		b.ReportMetric(float64(w[len(w)/2])/1e6, name+"-wall-ms")
		b.ReportMetric(float64(h[len(h)/2])/1e6, name+"-hold-ms")
	}
}
