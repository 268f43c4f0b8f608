package kvcache

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvtier/kvtier/layout"
)

// The benchmarks of this file measure what a server pays on every
// scheduling step, at the context lengths where a cost that grows with the
// context would show: one decode token (Append), a cached prompt (Acquire
// and Release), a prompt that misses and evicts everything, and a whole
// decode step of a batch. All run on the seed model with the paged
// per-layer layout (28 units per 16-token block), metadata only.

// contexts are the context lengths the per-token benchmarks run at.
var contexts = []int{1 << 10, 8 << 10, 32 << 10, 128 << 10}

func ctxName(n int) string { return fmt.Sprintf("ctx=%dk", n>>10) }

// seqPrompt returns n tokens distinct from those of other values of seed.
func seqPrompt(seed, n int) []uint32 {
	p := make([]uint32, n)
	for i := range p {
		p[i] = uint32(seed)<<24 ^ uint32(i)
	}
	return p
}

// BenchmarkAppendContext appends one token per iteration to a sequence of
// ctx tokens; every 1024 appends the sequence is truncated back to ctx
// (timer stopped), so the context stays within [ctx, ctx+1024). A new block
// (28 fresh units) every 16 tokens.
func BenchmarkAppendContext(b *testing.B) {
	for _, ctx := range contexts {
		b.Run(ctxName(ctx), func(b *testing.B) {
			l := seedPaged(b, 16)
			c, err := New(Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: int64(28 * (ctx/16 + 64 + 16))}, Capacity{})})
			if err != nil {
				b.Fatal(err)
			}
			p, err := c.Acquire(Request{Tokens: seqPrompt(1, ctx)})
			if err != nil {
				b.Fatal(err)
			}
			if err := c.Commit(p.Seq, ctx); err != nil {
				b.Fatal(err)
			}
			const period = 1024
			tok := uint32(0)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if i > 0 && i%period == 0 {
					b.StopTimer()
					if _, err := c.Truncate(p.Seq, period); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				tok++
				if _, err := c.Append(p.Seq, tok); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAcquireCached acquires and releases a prompt of ctx tokens that
// is wholly cached on the GPU (every unit a hit). Linear cost shows as the
// same ns/token at every length.
func BenchmarkAcquireCached(b *testing.B) {
	for _, ctx := range []int{1 << 10, 128 << 10} {
		b.Run(ctxName(ctx), func(b *testing.B) {
			l := seedPaged(b, 16)
			c, err := New(Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: int64(28 * (ctx/16 + 16))}, Capacity{})})
			if err != nil {
				b.Fatal(err)
			}
			prompt := seqPrompt(2, ctx)
			p, err := c.Acquire(Request{Tokens: prompt})
			if err != nil {
				b.Fatal(err)
			}
			if err := c.Commit(p.Seq, ctx); err != nil {
				b.Fatal(err)
			}
			if err := c.Release(p.Seq); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p, err := c.Acquire(Request{Tokens: prompt})
				if err != nil {
					b.Fatal(err)
				}
				if err := c.Release(p.Seq); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(ctx), "ns/token")
		})
	}
}

// BenchmarkAcquireMiss acquires, commits and releases a new 32k-token
// prompt (2,048 blocks of 16 tokens, seed model) per iteration on a GPU
// that holds exactly one such prompt, so every unit takes a slot from a
// victim: dropped (drop: no tier below), or offloaded to a CPU tier that,
// once full, drops its own victims (offload). paged-layer has 28 units
// per block, all-layers one. Reported: the Acquire alone (the plan:
// evict, offload, fresh slot) per unit and per block, and the whole
// iteration per unit.
//
// The paged per-layer layout runs with a policy key per unit and, as
// "paged-layer-blockkeys", with one per block and pool (Config.BlockKeys).
func BenchmarkAcquireMiss(b *testing.B) {
	for _, kind := range []layout.Kind{layout.PagedLayer, layout.AllLayers} {
		for _, keys := range []bool{false, true} {
			if keys && kind == layout.AllLayers {
				continue // one unit per block: nothing to group
			}
			name := kind.String()
			if keys {
				name += "-blockkeys"
			}
			for _, below := range []string{"drop", "offload"} {
				b.Run(name+"/"+below, func(b *testing.B) { acquireMiss(b, kind, keys, below == "offload") })
			}
		}
	}
}

func acquireMiss(b *testing.B, kind layout.Kind, blockKeys, offload bool) {
	const ctx = 32 << 10
	l, err := layout.New(layout.SeedModel(), kind, 16)
	if err != nil {
		b.Fatal(err)
	}
	blocks := int64(ctx / 16)
	units := int64(l.UnitsPerBlock()) * blocks
	tiers := []TierConfig{{Name: "gpu", Capacity: Capacity{Units: units}}}
	if offload {
		tiers = GPUAndCPU(Capacity{Units: units}, Capacity{Units: 4 * units})
	}
	c, err := New(Config{Layout: l, Tiers: tiers, BlockKeys: blockKeys})
	if err != nil {
		b.Fatal(err)
	}
	prompt := seqPrompt(0, ctx)
	var acquire time.Duration
	run := func(seed int) {
		for i := range prompt {
			prompt[i] = uint32(seed)<<24 ^ uint32(i)
		}
		start := time.Now()
		p, err := c.Acquire(Request{Tokens: prompt})
		acquire += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Commit(p.Seq, ctx); err != nil {
			b.Fatal(err)
		}
		if err := c.Release(p.Seq); err != nil {
			b.Fatal(err)
		}
	}
	run(1) // the GPU is full from now on
	acquire = 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		run(i + 2)
	}
	n := float64(b.N)
	b.ReportMetric(float64(acquire.Nanoseconds())/n/float64(units), "acquire-ns/unit")
	b.ReportMetric(float64(acquire.Nanoseconds())/n/float64(blocks), "acquire-ns/block")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n/float64(units), "ns/unit")
}

// decodeBatch is the batch of BenchmarkDecodeStep: batch sequences of ctx
// tokens that share their first ctx-16 tokens (one cached copy, so the GPU
// need not hold batch×ctx tokens) and differ in their last block.
type decodeBatch struct {
	c   *Cache
	ids []SeqID
	ctx int
}

func newDecodeBatch(b *testing.B, batch, ctx int) *decodeBatch {
	return newDecodeBatchOf(b, seedPaged(b, 16), false, batch, ctx)
}

func newDecodeBatchOf(b *testing.B, l *layout.Layout, blockKeys bool, batch, ctx int) *decodeBatch {
	u := int64(l.UnitsPerBlock())
	// The shared prefix, then per sequence a private last block and room
	// for 512 decode tokens (32 blocks).
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: u * int64(ctx/16+batch*(1+33))}, Capacity{}), BlockKeys: blockKeys})
	if err != nil {
		b.Fatal(err)
	}
	d := &decodeBatch{c: c, ctx: ctx}
	prompt := seqPrompt(3, ctx)
	for i := range batch {
		for j := ctx - 16; j < ctx; j++ {
			prompt[j] = uint32(i)<<16 | uint32(j&0xffff)
		}
		p, err := c.Acquire(Request{Tokens: prompt})
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Commit(p.Seq, ctx); err != nil {
			b.Fatal(err)
		}
		d.ids = append(d.ids, p.Seq)
	}
	// One period of decoding, undone: the sequences' buffers (tokens,
	// blocks, tables) have grown to what the measured steps need, as in a
	// server that has been decoding for a while.
	for i := range 512 {
		for _, id := range d.ids {
			if _, err := c.Append(id, uint32(i)); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, id := range d.ids {
		if _, err := c.Truncate(id, 512); err != nil {
			b.Fatal(err)
		}
	}
	return d
}

// BenchmarkDecodeStep runs decode steps of 256 sequences of 32k tokens: one
// Append per sequence, then the block table of every slice of every
// sequence, as a server fetches them for the step's kernels: none
// ("append"), one BlockTable copy per sequence and slice ("per-slice"), or
// one BlockTables call for the batch ("batched"). Every 512 steps the
// sequences are truncated back (timer stopped). One iteration is one step.
// The seed model's paged per-layer layout has 28 units per block (one per
// layer); the all-layers layout one, as vLLM's and TensorRT-LLM's blocks.
//
// "blockkeys/" runs the paged layout with one policy key per block and pool
// (Config.BlockKeys).
func BenchmarkDecodeStep(b *testing.B) {
	const batch, ctx, period = 256, 32 << 10, 512
	for _, kind := range []layout.Kind{layout.PagedLayer, layout.AllLayers} {
		for _, keys := range []bool{false, true} {
			if keys && kind == layout.AllLayers {
				continue
			}
			for _, tables := range []string{"append", "per-slice", "batched"} {
				name := tables
				switch {
				case kind == layout.AllLayers:
					name = "all-layers/" + tables
				case keys:
					name = "blockkeys/" + tables
				}
				b.Run(name, func(b *testing.B) { decodeSteps(b, kind, keys, tables, batch, ctx, period) })
			}
		}
	}
}

func decodeSteps(b *testing.B, kind layout.Kind, blockKeys bool, tables string, batch, ctx, period int) {
	l, err := layout.New(layout.SeedModel(), kind, 16)
	if err != nil {
		b.Fatal(err)
	}
	d := newDecodeBatchOf(b, l, blockKeys, batch, ctx)
	c := d.c
	var dst []int32
	var st StepTables
	slices := c.Layout().UnitsPerBlock()
	tok := uint32(0)
	read := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i > 0 && i%period == 0 {
			b.StopTimer()
			for _, id := range d.ids {
				if _, err := c.Truncate(id, period); err != nil {
					b.Fatal(err)
				}
			}
			b.StartTimer()
		}
		tok++
		for _, id := range d.ids {
			if _, err := c.Append(id, tok); err != nil {
				b.Fatal(err)
			}
		}
		switch tables {
		case "per-slice":
			for _, id := range d.ids {
				for s := range slices {
					var err error
					if dst, err = c.BlockTable(dst[:0], id, s); err != nil {
						b.Fatal(err)
					}
				}
			}
			read += len(dst)
		case "batched":
			if err := c.BlockTables(&st, d.ids...); err != nil {
				b.Fatal(err)
			}
			read += len(st.Table(batch-1, slices-1))
		}
	}
	_ = read
}

// BenchmarkBlockTables fetches the block tables of every slice of 256
// sequences of 32k tokens (28 slices × 2048 blocks each), without decoding:
// one BlockTable copy per sequence and slice against one BlockTables call.
func BenchmarkBlockTables(b *testing.B) {
	const batch, ctx = 256, 32 << 10
	d := newDecodeBatch(b, batch, ctx)
	c := d.c
	slices := c.Layout().UnitsPerBlock()
	b.Run("per-slice", func(b *testing.B) {
		var dst []int32
		b.ReportAllocs()
		for b.Loop() {
			for _, id := range d.ids {
				for s := range slices {
					var err error
					if dst, err = c.BlockTable(dst[:0], id, s); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
	})
	b.Run("batched", func(b *testing.B) {
		var st StepTables
		b.ReportAllocs()
		for b.Loop() {
			if err := c.BlockTables(&st, d.ids...); err != nil {
				b.Fatal(err)
			}
		}
	})
}
