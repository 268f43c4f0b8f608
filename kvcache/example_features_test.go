package kvcache_test

import (
	"fmt"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/layout"
)

func countTo(n int, base uint32) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = base + uint32(i)
	}
	return out
}

// Chunked prefill: the server computes a long prompt a chunk per step and
// declares each chunk written with Commit, which makes its full blocks
// reusable at once, before the prefill ends.
func ExampleCache_Commit() {
	l, _ := layout.New(smallModel(), layout.PagedLayer, 16)
	tiers := []kvcache.TierConfig{{Capacity: kvcache.Capacity{Units: 64}}}
	c, _ := kvcache.New(kvcache.Config{Layout: l, Tiers: tiers})

	prompt := countTo(80, 0)
	plan, _ := c.Acquire(kvcache.Request{Tokens: prompt})
	const chunk = 32
	for start := 0; start < len(prompt); start += chunk {
		end := min(start+chunk, len(prompt))
		// ... the forward pass of tokens [start, end) writes their KV ...
		_ = c.Commit(plan.Seq, end)
		other, _ := c.Admit(kvcache.Request{Tokens: prompt})
		fmt.Printf("after tokens [%d, %d): another request would reuse %d tokens\n", start, end, other.ReusedTokens)
	}
	_ = c.Release(plan.Seq)
	// Output:
	// after tokens [0, 32): another request would reuse 32 tokens
	// after tokens [32, 64): another request would reuse 64 tokens
	// after tokens [64, 80): another request would reuse 80 tokens
}

// A prompt found whole in the cache leaves nothing to compute, but the server
// needs its last token's logits to sample the next token: it reruns that
// token's forward pass over the stored KV, or asks the cache to leave the
// last token to compute.
func ExampleRequest_computeLast() {
	l, _ := layout.New(smallModel(), layout.PagedLayer, 16)
	tiers := []kvcache.TierConfig{{Capacity: kvcache.Capacity{Units: 64}}}
	c, _ := kvcache.New(kvcache.Config{Layout: l, Tiers: tiers})

	prompt := countTo(32, 0) // two whole blocks
	first, _ := c.Acquire(kvcache.Request{Tokens: prompt})
	_ = c.Commit(first.Seq, len(prompt))
	_ = c.Release(first.Seq)

	plain, _ := c.Acquire(kvcache.Request{Tokens: prompt})
	fmt.Println("cached whole: compute", plain.Compute)
	_ = c.Release(plain.Seq)
	last, _ := c.Acquire(kvcache.Request{Tokens: prompt, ComputeLast: true})
	fmt.Println("ComputeLast: compute", last.Compute)
	_ = c.Release(last.Seq)
	// Output:
	// cached whole: compute []
	// ComputeLast: compute [{16 32}]
}

// countingMover is a custom Mover: it hands every batch to the memory that
// holds the tiers' bytes (a server's would issue device copies) and counts
// what moved where.
type countingMover struct {
	mem               *kvcache.MemoryStore
	offloads, onloads int
}

func (m *countingMover) Copy(batch []kvcache.Copy) error {
	for _, cp := range batch {
		switch {
		case cp.To == kvcache.GPU && cp.From != kvcache.GPU:
			m.onloads++
		case cp.From == kvcache.GPU && cp.To != kvcache.GPU:
			m.offloads++
		}
	}
	return m.mem.Copy(batch)
}

// A custom Mover sees every copy the cache plans, in order: victims' moves
// down before the loads that reuse their slots.
func ExampleMover() {
	l, _ := layout.New(smallModel(), layout.AllLayers, 16) // one unit per block
	tiers := kvcache.GPUAndCPU(kvcache.Capacity{Units: 2}, kvcache.Capacity{Units: 4})
	mem, _ := kvcache.NewMemoryStore(l, tiers)
	mover := &countingMover{mem: mem}
	c, _ := kvcache.New(kvcache.Config{Layout: l, Tiers: tiers, Mover: mover})

	serve := func(prompt []uint32) {
		plan, _ := c.Acquire(kvcache.Request{Tokens: prompt})
		_ = c.Commit(plan.Seq, len(prompt))
		_ = c.Release(plan.Seq)
	}
	a, b := countTo(32, 0), countTo(32, 1000)
	serve(a)
	serve(b) // a's two blocks move down to the CPU
	serve(a) // and come back, b's moving down
	fmt.Println("offloads", mover.offloads, "loads", mover.onloads)
	// Output:
	// offloads 4 loads 2
}

// Write-through copies every committed block to the tier below at once, so
// that evicting it later costs no copy.
func ExampleTierConfig_writeThrough() {
	l, _ := layout.New(smallModel(), layout.AllLayers, 16)
	tiers := kvcache.GPUAndCPU(kvcache.Capacity{Units: 2}, kvcache.Capacity{Units: 4})
	tiers[1].WriteThrough = true
	mem, _ := kvcache.NewMemoryStore(l, tiers)
	c, _ := kvcache.New(kvcache.Config{Layout: l, Tiers: tiers, Mover: mem})

	plan, _ := c.Acquire(kvcache.Request{Tokens: countTo(32, 0)})
	_ = c.Commit(plan.Seq, 32)
	fmt.Println("backups on the CPU after the commit:", c.Stats().Tier(kvcache.CPU).Backups)
	_ = c.Release(plan.Seq)
	before := c.Stats().BytesMoved
	plan, _ = c.Acquire(kvcache.Request{Tokens: countTo(32, 1000)}) // evicts both blocks
	fmt.Println("bytes copied to evict them:", c.Stats().BytesMoved-before)
	_ = c.Release(plan.Seq)
	// Output:
	// backups on the CPU after the commit: 2
	// bytes copied to evict them: 0
}

// countingPolicy counts the keys its policy is given.
type countingPolicy struct {
	eviction.Policy[kvcache.UnitID]
	inserts *int
}

func (p countingPolicy) Insert(k kvcache.UnitID, e eviction.Entry) error {
	*p.inserts++
	return p.Policy.Insert(k, e)
}

// With one policy key per block and pool (Config.BlockKeys), the policy of a
// per-layer layout hears of each block once instead of once per layer, and
// a victim block leaves the tier whole.
func ExampleConfig_blockKeys() {
	l, _ := layout.New(smallModel(), layout.PagedLayer, 16) // 2 layers: 2 units per block
	for _, blockKeys := range []bool{false, true} {
		inserts := 0
		counting := func(info kvcache.PoolInfo) (eviction.Policy[kvcache.UnitID], error) {
			p, err := kvcache.LRUPolicy()(info)
			return countingPolicy{Policy: p, inserts: &inserts}, err
		}
		tiers := []kvcache.TierConfig{{Capacity: kvcache.Capacity{Units: 8}, Policy: counting}}
		c, _ := kvcache.New(kvcache.Config{Layout: l, Tiers: tiers, BlockKeys: blockKeys})
		for i := range 3 {
			prompt := countTo(48, uint32(i)<<16) // 3 blocks, 6 units
			plan, _ := c.Acquire(kvcache.Request{Tokens: prompt})
			_ = c.Commit(plan.Seq, len(prompt))
			_ = c.Release(plan.Seq)
		}
		st := c.Stats().Tiers[0]
		fmt.Printf("BlockKeys %v: %d policy inserts, %d units evicted, %d cached\n", blockKeys, inserts, st.Evictions, st.Cached)
	}
	// Output:
	// BlockKeys false: 18 policy inserts, 10 units evicted, 8 cached
	// BlockKeys true: 9 policy inserts, 10 units evicted, 8 cached
}

// Shares of the CPU: a quiet tenant reserves half of it, so that a noisy
// tenant's burst, which pushes everything off the GPU, cannot evict the
// quiet tenant's cached prompt from the CPU; the noisy tenant's own units
// make room for its next ones.
func ExampleTierConfig_shares() {
	l, _ := layout.New(layout.Model{Name: "tiny", Layers: 2, QueryHeads: 2, KVHeads: 1, HeadDim: 4, ElemBytes: 2}, layout.AllLayers, 4)
	tiers := kvcache.GPUAndCPU(kvcache.Capacity{Units: 4}, kvcache.Capacity{Units: 8})
	tiers[1].Shares = []kvcache.Share{{Namespace: "quiet", Reserve: 0.5}}
	c, _ := kvcache.New(kvcache.Config{Layout: l, Tiers: tiers})
	serve := func(ns string, tokens []uint32) int {
		p, _ := c.Acquire(kvcache.Request{Tokens: tokens, Namespace: ns})
		_ = c.Commit(p.Seq, len(tokens))
		_ = c.Release(p.Seq)
		return p.ReusedTokens
	}
	serve("quiet", countTo(12, 0)) // 3 blocks
	for i := range 20 {
		serve("noisy", countTo(8, uint32(1000+100*i)))
	}
	share := c.Stats().Tier(kvcache.CPU).Shares[0]
	fmt.Printf("quiet on the CPU: %d of %d reserved slots, %d evicted\n", share.Used, share.Reserved, share.Evictions)
	fmt.Println("quiet reuses", serve("quiet", countTo(12, 0)), "tokens")
	// Output:
	// quiet on the CPU: 3 of 4 reserved slots, 0 evicted
	// quiet reuses 12 tokens
}
