package kvcache

import (
	"runtime"
	"testing"
	"time"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/layout"
)

func BenchmarkSlotAllocFree(b *testing.B) {
	a := newArena(nil, GPU, 0, 1<<16, eviction.NewLRU[UnitID]())
	b.ReportAllocs()
	for b.Loop() {
		s, _ := a.pop()
		a.push(s)
	}
}

func seedPaged(b testing.TB, blockTokens int) *layout.Layout {
	l, err := layout.New(layout.SeedModel(), layout.PagedLayer, blockTokens)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkAcquireRelease90 acquires, commits and releases 1024-token
// prompts (seed model, paged, 16-token blocks: 64 blocks × 28 layers = 1792
// units) of which the first 90% is a shared prefix and the rest new, so
// every iteration hits 57 blocks, computes 7 and, in steady state, evicts
// 7. Metadata only (no Mover).
func BenchmarkAcquireRelease90(b *testing.B) {
	l := seedPaged(b, 16)
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: 28 * 64 * 8}, Capacity{})})
	if err != nil {
		b.Fatal(err)
	}
	prompt := make([]uint32, 1024)
	for i := range prompt {
		prompt[i] = uint32(i)
	}
	shared := 1024 * 9 / 10 / 16 * 16
	b.ReportAllocs()
	i := uint32(0)
	for b.Loop() {
		i++
		for j := shared; j < len(prompt); j++ {
			prompt[j] = i<<16 + uint32(j)
		}
		p, err := c.Acquire(Request{Tokens: prompt})
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Commit(p.Seq, p.Tokens); err != nil { // the prefill ran
			b.Fatal(err)
		}
		if err := c.Release(p.Seq); err != nil {
			b.Fatal(err)
		}
	}
	st := c.Stats()
	b.ReportMetric(float64(st.Tier(GPU).Hits)/float64(st.Tier(GPU).Hits+st.Tier(GPU).Misses), "hit-rate")
}

// BenchmarkAppendToken decodes one token at a time on a sequence of the seed
// model (paged, 16-token blocks, 28 units per block); a new block every 16
// tokens. Sequences are released and restarted every 4096 tokens.
func BenchmarkAppendToken(b *testing.B) {
	l := seedPaged(b, 16)
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: 28 * 600}, Capacity{})})
	if err != nil {
		b.Fatal(err)
	}
	p, err := c.Acquire(Request{Tokens: []uint32{1}})
	if err != nil {
		b.Fatal(err)
	}
	n, tok := 1, uint32(0)
	b.ReportAllocs()
	for b.Loop() {
		tok++
		if _, err := c.Append(p.Seq, tok); err != nil {
			b.Fatal(err)
		}
		if n++; n == 4096 {
			_ = c.Release(p.Seq)
			p, _ = c.Acquire(Request{Tokens: []uint32{tok}})
			n = 1
		}
	}
}

// BenchmarkSparseAccessLayer is the seed's BSA decode: 28 layers, 16 query
// and 8 KV heads, 512-token blocks (2 MiB units), context 4096, top-3 plus
// the current block per head; a 1 GiB GPU that cannot hold the 3.5 GiB
// context, a large CPU tier. One iteration is one SparseAccess (one layer of
// one step). Metadata only.
func BenchmarkSparseAccessLayer(b *testing.B) {
	l, err := layout.New(layout.SeedModel(), layout.BSA, 512)
	if err != nil {
		b.Fatal(err)
	}
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(Capacity{Bytes: 1 << 30}, Capacity{Bytes: 8 << 30})})
	if err != nil {
		b.Fatal(err)
	}
	prompt := make([]uint32, 4096)
	p, err := c.Acquire(Request{Tokens: prompt, Sparse: true})
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < len(prompt); i += 512 {
		if _, err := c.Append(p.Seq, prompt[i:i+512]...); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := c.Append(p.Seq, 1); err != nil { // block 8 is the current block
		b.Fatal(err)
	}
	heads := make([]struct{}, 16) // query heads
	var res SparseResult
	step := 0
	var read, onboarded int64
	// The selection by KV head, in buffers reused from step to step: query
	// heads 2h and 2h+1 read KV head h.
	sel := Selection{Blocks: make([][]int, 8)}
	b.ReportAllocs()
	for b.Loop() {
		sel.Layer = step % 28
		for h := range sel.Blocks {
			sel.Blocks[h] = sel.Blocks[h][:0]
		}
		for q := range heads {
			// Deterministic varied top-3 among blocks 0..7, plus block 8.
			x := uint64(step*16+q) * 0x9e3779b97f4a7c15
			sel.Blocks[q/2] = append(sel.Blocks[q/2], int(x>>61), int(x>>58&7), int(x>>55&7), 8)
		}
		if err := c.SparseAccess(p.Seq, sel, &res); err != nil {
			b.Fatal(err)
		}
		read += res.BytesRead
		onboarded += res.BytesOnboarded
		step++
	}
	b.ReportMetric(float64(read)/float64(b.N)/(1<<20), "MiB-read/op")
	b.ReportMetric(float64(onboarded)/float64(b.N)/(1<<20), "MiB-onboarded/op")
}

// BenchmarkOffloadCopy compares MemoryStore.Copy (the Go-memory mover) on
// batches of 16 offloads of 1 MiB units with copy() of the same buffers.
func BenchmarkOffloadCopy(b *testing.B) {
	m := layout.Model{Name: "1MiB", Layers: 1, QueryHeads: 8, KVHeads: 8, HeadDim: 1024, ElemBytes: 2}
	l, err := layout.New(m, layout.PagedLayer, 32) // 32 × 2 × 8 × 1024 × 2 = 1 MiB
	if err != nil {
		b.Fatal(err)
	}
	const n = 16
	store, err := NewMemoryStore(l, GPUAndCPU(Capacity{Units: n}, Capacity{Units: n}))
	if err != nil {
		b.Fatal(err)
	}
	batch := make([]Copy, n)
	for i := range batch {
		batch[i] = Copy{From: GPU, FromSlot: int32(i), To: CPU, ToSlot: int32(n - 1 - i)}
		buf := store.Bytes(GPU, 0, int32(i))
		for j := range buf {
			buf[j] = byte(i + j)
		}
		// Touch the destination too, so neither side pays first-touch
		// page faults.
		clear(store.Bytes(CPU, 0, int32(i)))
	}
	// Both ways run alternately in the same loop, so machine noise hits
	// them alike; each is timed on its own.
	var moverTime, copyTime time.Duration
	b.SetBytes(2 * n << 20)
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		if err := store.Copy(batch); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		for _, cp := range batch {
			copy(store.Bytes(CPU, 0, cp.ToSlot), store.Bytes(GPU, 0, cp.FromSlot))
		}
		copyTime += time.Since(t1)
		moverTime += t1.Sub(t0)
	}
	bytes := float64(b.N) * n * (1 << 20)
	b.ReportMetric(bytes/moverTime.Seconds()/1e9, "mover-GB/s")
	b.ReportMetric(bytes/copyTime.Seconds()/1e9, "copy-GB/s")
	b.ReportMetric(copyTime.Seconds()/moverTime.Seconds(), "mover/copy")
}

// BenchmarkMetadataPerUnit measures the heap the cache keeps per resident
// unit (unit tables, slot arenas, LRU policy, block records and radix nodes)
// with every GPU slot holding a cached unit, reported as B/unit. It is a
// measurement, not a test: the target (at most 128 bytes) is compared
// in BENCHMARKS.md. Two layouts of the seed model bracket it: paged per layer
// (28 units share each block's radix node) and all layers (one unit per
// block pays the whole node).
func BenchmarkMetadataPerUnit(b *testing.B) {
	for _, tc := range []struct {
		name string
		kind layout.Kind
	}{{"paged", layout.PagedLayer}, {"all-layers", layout.AllLayers}} {
		b.Run(tc.name, func(b *testing.B) {
			l, err := layout.New(layout.SeedModel(), tc.kind, 16)
			if err != nil {
				b.Fatal(err)
			}
			const blocks = 4096
			units := blocks * l.UnitsPerBlock()
			var per float64
			for b.Loop() {
				per = metadataPerUnit(b, l, blocks, units)
			}
			b.ReportMetric(per, "B/unit")
		})
	}
}

func metadataPerUnit(b *testing.B, l *layout.Layout, blocks, units int) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: int64(units)}, Capacity{})})
	if err != nil {
		b.Fatal(err)
	}
	prompt := make([]uint32, 16*64)
	for s := range blocks / 64 {
		for i := range prompt {
			prompt[i] = uint32(s<<16 + i)
		}
		p, err := c.Acquire(Request{Tokens: prompt})
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Commit(p.Seq, p.Tokens); err != nil {
			b.Fatal(err)
		}
		if err := c.Release(p.Seq); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if st := c.Stats(); st.Tier(GPU).Cached != int64(units) {
		b.Fatalf("%d cached units, want %d", st.Tier(GPU).Cached, units)
	}
	runtime.KeepAlive(c)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(units)
}
