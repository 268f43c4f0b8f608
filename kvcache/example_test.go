package kvcache_test

import (
	"context"
	"fmt"

	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/layout"
)

// smallModel is a toy model: 2 layers, 4 query heads over 2 KV heads.
func smallModel() layout.Model {
	return layout.Model{Name: "toy", Layers: 2, QueryHeads: 4, KVHeads: 2, HeadDim: 8, ElemBytes: 2}
}

// A server's loop: acquire a prompt, compute what the plan says, decode,
// commit what was computed, release; a second request with the same prefix
// reuses it.
func Example() {
	l, _ := layout.New(smallModel(), layout.PagedLayer, 16)
	tiers := []kvcache.TierConfig{{Name: "GPU", Capacity: kvcache.Capacity{Units: 64}}}
	store, _ := kvcache.NewMemoryStore(l, tiers)
	c, _ := kvcache.New(kvcache.Config{Layout: l, Tiers: tiers, Mover: store})

	prompt := make([]uint32, 40) // 2 full blocks and a partial one
	for i := range prompt {
		prompt[i] = uint32(i)
	}
	plan, _ := c.Acquire(kvcache.Request{Tokens: prompt})
	fmt.Println("compute", plan.Compute, "fresh units", plan.Computed)
	table, _ := c.BlockTable(nil, plan.Seq, 0) // layer 0's slots, for the kernel
	fmt.Println("layer 0 block table", table)
	// The prefill runs; each decode step's Append commits the tokens
	// computed before it, which makes their full blocks reusable.
	for tok := uint32(100); tok < 108; tok++ {
		plan, _ = c.Append(plan.Seq, tok) // block 2 fills at token 47
	}
	_ = c.Commit(plan.Seq, plan.Tokens) // the last step ran too
	_ = c.Release(plan.Seq)

	again, _ := c.Acquire(kvcache.Request{Tokens: append(prompt[:32:32], 7, 7)})
	fmt.Println("reused", again.ReusedTokens, "tokens; compute", again.Compute)
	st := c.Stats()
	gpuStats := st.Tier(kvcache.GPU)
	fmt.Printf("GPU hits %d misses %d, blocks cached %d\n", gpuStats.Hits, gpuStats.Misses, st.Blocks)
	// Output:
	// compute [{0 40}] fresh units 6
	// layer 0 block table [0 2 4]
	// reused 32 tokens; compute [{32 34}]
	// GPU hits 4 misses 8, blocks cached 3
}

// Bytes written on the GPU survive an offload to the CPU and the way back.
func ExampleMemoryStore() {
	l, _ := layout.New(smallModel(), layout.AllLayers, 16) // one unit per block
	tiers := kvcache.GPUAndCPU(kvcache.Capacity{Units: 2}, kvcache.Capacity{Units: 4})
	store, _ := kvcache.NewMemoryStore(l, tiers)
	c, _ := kvcache.New(kvcache.Config{Layout: l, Tiers: tiers, Mover: store})

	a := make([]uint32, 32)
	plan, _ := c.Acquire(kvcache.Request{Tokens: a})
	for b := range 2 {
		loc, _ := c.Locate(plan.Seq, b, 0)
		copy(store.Bytes(kvcache.GPU, loc.Pool, loc.Slot), fmt.Sprintf("block %d KV", b))
	}
	_ = c.Commit(plan.Seq, 32) // written: shared from now on
	_ = c.Release(plan.Seq)

	other, _ := c.Acquire(kvcache.Request{Tokens: make([]uint32, 32), Namespace: "other"})
	fmt.Println("offloaded", other.Offloaded)
	_ = c.Release(other.Seq)

	back, _ := c.Acquire(kvcache.Request{Tokens: a})
	fmt.Println("onboarded", back.Onboarded, "compute", back.Compute)
	for b := range 2 {
		loc, _ := c.Locate(back.Seq, b, 0)
		fmt.Printf("%s: %s\n", loc.Tier, store.Bytes(kvcache.GPU, loc.Pool, loc.Slot)[:10])
	}
	// Output:
	// offloaded 2
	// onboarded 2 compute []
	// gpu: block 0 KV
	// gpu: block 1 KV
}

// A block-sparse sequence whose context is larger than the GPU: prefill
// block by block, then let each layer's heads select blocks.
func ExampleCache_SparseAccess() {
	l, _ := layout.New(smallModel(), layout.BSA, 16) // 4 units per block
	tiers := kvcache.GPUAndCPU(kvcache.Capacity{Units: 12}, kvcache.Capacity{Units: 64})
	store, _ := kvcache.NewMemoryStore(l, tiers)
	c, _ := kvcache.New(kvcache.Config{Layout: l, Tiers: tiers, Mover: store})

	prompt := make([]uint32, 128) // 8 blocks: 32 units, the GPU holds 12
	plan, _ := c.Acquire(kvcache.Request{Tokens: prompt, Sparse: true})
	for i := 0; i < plan.Pending; i += 16 {
		_, _ = c.Append(plan.Seq, prompt[i:i+16]...)
	}
	_, _ = c.Append(plan.Seq, 1) // decode one token: block 8
	var res kvcache.SparseResult
	for layer := range 2 {
		// Query heads 0 and 1 selected blocks 0 and 5, read through KV
		// head 0; heads 2 and 3 selected block 1, read through KV head 1;
		// every head reads the current block 8.
		sel := kvcache.Selection{Layer: layer, Blocks: [][]int{{0, 5, 8}, {1, 8}}}
		_ = c.SparseAccess(plan.Seq, sel, &res)
		fmt.Printf("layer %d: %d units, %d hits, %d onboarded, %d bytes read\n",
			layer, len(res.Units), res.Hits, res.Onboarded, res.BytesRead)
	}
	// Output:
	// layer 0: 5 units, 2 hits, 3 onboarded, 2560 bytes read
	// layer 1: 5 units, 2 hits, 3 onboarded, 2560 bytes read
}

// A server with an asynchronous copy engine: Acquire returns before the
// cached blocks are back from the CPU, and each layer's attention runs as
// soon as that layer is ready.
func ExampleCache_WaitReady() {
	l, _ := layout.New(smallModel(), layout.PagedLayer, 16)
	tiers := kvcache.GPUAndCPU(kvcache.Capacity{Units: 4}, kvcache.Capacity{Units: 8})
	store, _ := kvcache.NewMemoryStore(l, tiers)
	engine, _ := kvcache.NewAsyncMemoryStore(store, kvcache.AsyncOptions{Workers: 2})
	defer engine.Close()
	c, _ := kvcache.New(kvcache.Config{Layout: l, Tiers: tiers, Engine: engine})

	serve := func(prompt []uint32) kvcache.Plan {
		plan, _ := c.Acquire(kvcache.Request{Tokens: prompt})
		for layer := range l.Model().Layers {
			recompute, _ := c.WaitReady(context.Background(), plan.Seq, layer)
			_ = recompute // failed loads: compute these tokens too
			// ... layer's attention over the sequence's block tables ...
		}
		_ = c.Commit(plan.Seq, len(prompt))
		_ = c.Release(plan.Seq)
		return plan
	}
	a, b := make([]uint32, 32), make([]uint32, 32)
	for i := range a {
		a[i], b[i] = uint32(i), uint32(1000+i)
	}
	serve(a)
	serve(b) // pushes a's blocks down to the CPU
	plan := serve(a)
	fmt.Println("onboarded", plan.Onboarded, "loading at return", plan.Loading)
	// Output:
	// onboarded 4 loading at return 4
}
