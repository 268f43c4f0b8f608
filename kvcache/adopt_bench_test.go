package kvcache

import (
	"testing"
	"time"

	"github.com/kvtier/kvtier/internal/cputime"
)

// BenchmarkAdopt adopts, on the last tier, a 32k-token prompt (seed model,
// paged per layer, 16-token blocks: 2,048 blocks, 57,344 units) that the
// cache holds none of, as tierstore.Lookup does after a probe found it in
// a shared store; the cache is cleared between iterations (untimed). The
// tiers are those of tierstore's BenchmarkLookup. "blockkeys" runs on a
// cache with one policy key per block and pool (Config.BlockKeys),
// "events" on one with an event sink. Reported: wall time (ns/unit) and
// the process's CPU time (cpu-ns/unit, the garbage collector included),
// per adopted unit; the CPU time moves less on a busy machine.
func BenchmarkAdopt(b *testing.B) {
	for _, mode := range []string{"unitkeys", "blockkeys", "events"} {
		b.Run(mode, func(b *testing.B) {
			const ctx = 32 << 10
			l := seedPaged(b, 16)
			tiers := GPUAndCPU(Capacity{Units: 28 * 64}, Capacity{Units: 28 * 64})
			tiers = append(tiers, TierConfig{Name: "shared", Capacity: Capacity{Units: 28 * 4096}})
			cfg := Config{Layout: l, Tiers: tiers, BlockKeys: mode == "blockkeys"}
			events := 0
			if mode == "events" {
				cfg.Events = func(Event) { events++ }
			}
			c, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			req := Request{Tokens: seqPrompt(3, ctx)}
			blocks := ctx / 16
			adopt := func() {
				n, err := c.Adopt(req, blocks, 3)
				if err != nil {
					b.Fatal(err)
				}
				if n != blocks {
					b.Fatalf("adopted %d blocks, want %d", n, blocks)
				}
			}
			adopt() // the policies and arenas have grown to their size
			var cpu time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				if err := c.Clear(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				c0, _ := cputime.Process()
				adopt()
				c1, _ := cputime.Process()
				cpu += c1 - c0
			}
			units := float64(b.N) * float64(blocks*l.UnitsPerBlock())
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/units, "ns/unit")
			b.ReportMetric(float64(cpu.Nanoseconds())/units, "cpu-ns/unit")
		})
	}
}
