package kvcache_test

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/layout"
)

// Speculative decoding rejects the last tokens of a sequence whose first
// layer attends over a 16-token sliding window. After the Truncate, the
// windowed layer's block table covers the window of the last kept token
// again (the decode steps had unpinned it), so a server that needs that
// token's logits reruns its forward pass over the tables, writing nothing.
func ExampleCache_Truncate_slidingWindow() {
	m := smallModel()
	m.Windows = []int{16, 0} // layer 0: a 16-token window; layer 1: full attention
	l, _ := layout.New(m, layout.PagedLayer, 16)
	tiers := []kvcache.TierConfig{{Capacity: kvcache.Capacity{Units: 64}}}
	c, _ := kvcache.New(kvcache.Config{Layout: l, Tiers: tiers})
	windowed, _ := l.SliceOf(0, 0) // layer 0's slice (PagedLayer: one per layer)
	slice, _ := l.Slice(windowed)
	w, B := slice.Window, c.BlockTokens()

	plan, _ := c.Acquire(kvcache.Request{Tokens: countTo(40, 0)})
	for tok := range uint32(40) { // decode steps; each Append commits the tokens before it
		plan, _ = c.Append(plan.Seq, 500+tok)
	}
	// Layer 0 pins only the blocks the window of the next token reads.
	table, _ := c.BlockTable(nil, plan.Seq, windowed)
	fmt.Println(plan.Tokens, "tokens, layer 0 table", table)

	plan, _ = c.Truncate(plan.Seq, 33) // the verifier rejected the last 33
	last := plan.Tokens - 1
	table, _ = c.BlockTable(nil, plan.Seq, windowed)
	// Block 2, partial again, is a private copy of the committed one.
	fmt.Println(plan.Tokens, "tokens, layer 0 table", table, "compute", plan.Compute)
	// Token last attends to tokens [last+1-w, last] in layer 0.
	first, end := max(0, last+1-w)/B, last/B+1
	reads := table[first:end]
	fmt.Printf("rerun token %d: layer 0 reads blocks %d..%d, slots %v, unpinned: %v\n",
		last, first, end-1, reads, slices.Contains(reads, -1))

	plan, _ = c.Append(plan.Seq, 7) // the token sampled from those logits
	table, _ = c.BlockTable(nil, plan.Seq, windowed)
	fmt.Println(plan.Tokens, "tokens, layer 0 table", table)
	// Output:
	// 80 tokens, layer 0 table [-1 -1 -1 -1 4]
	// 47 tokens, layer 0 table [-1 1 5] compute []
	// rerun token 46: layer 0 reads blocks 1..2, slots [1 5], unpinned: false
	// 48 tokens, layer 0 table [-1 -1 5]
}

// A block-sparse decode step on a GPU too small for the whole context: the
// selection of layer 2 needs a unit of block 0 that was dropped. The server
// restores it from block 0's tokens, whose hidden state at layer 2 it gets
// by running them through layers 0 and 1 with Keep calls, which leave layer
// 2's selection pinned; then it runs layer 2, whose kernel writes the
// restored unit before the step's attention reads it.
func ExampleCache_SparseAccess_restore() {
	m := layout.Model{Name: "toy3", Layers: 3, QueryHeads: 4, KVHeads: 2, HeadDim: 8, ElemBytes: 2}
	l, _ := layout.New(m, layout.BSA, 16)                                  // 6 units per block: 3 layers × 2 KV heads
	tiers := []kvcache.TierConfig{{Capacity: kvcache.Capacity{Units: 24}}} // 4 blocks, no tier below
	c, _ := kvcache.New(kvcache.Config{Layout: l, Tiers: tiers})

	// The prefill, a block per chunk: layers 0 and 1 keep selecting block
	// 0 through KV head 0, layer 2 only the current block, so block 0's
	// layer 2 units are the least recently used when block 4 needs room.
	prompt := countTo(78, 0) // 5 blocks, the last one partial
	plan, _ := c.Acquire(kvcache.Request{Tokens: prompt, Sparse: true})
	var res kvcache.SparseResult
	for i := 0; i < plan.Pending; i += 16 {
		_, _ = c.Append(plan.Seq, prompt[i:min(i+16, len(prompt))]...)
		b := i / 16
		for layer := range 3 {
			sel := kvcache.Selection{Layer: layer, Blocks: [][]int{{0, b}, {b}}}
			if layer == 2 {
				sel.Blocks[0] = []int{b}
			}
			_ = c.SparseAccess(plan.Seq, sel, &res)
		}
	}

	// restored lists the units a SparseAccess gave fresh slots: the
	// blocks whose tokens the server runs, and the units their kernel
	// writes.
	restored := func(res *kvcache.SparseResult) (blocks []int, units string) {
		for _, u := range res.Units {
			if u.From == kvcache.Dropped {
				blocks = append(blocks, u.Block)
				units += fmt.Sprintf(" (block %d, KV head %d)", u.Block, u.KVHead)
			}
		}
		slices.Sort(blocks)
		return slices.Compact(blocks), units
	}
	// One decode step: every layer selects block 0 through KV head 0.
	_, _ = c.Append(plan.Seq, 1)
	var lower kvcache.SparseResult
	for layer := range 3 {
		_ = c.SparseAccess(plan.Seq, kvcache.Selection{Layer: layer, Blocks: [][]int{{0, 4}, {4}}}, &res)
		blocks, units := restored(&res)
		if len(blocks) == 0 {
			fmt.Printf("layer %d: attention over %d units\n", layer, len(res.Units))
			continue
		}
		fmt.Printf("layer %d: dropped%s: restore blocks %v, keeping layer %d's selection pinned\n", layer, units, blocks, layer)
		for below := range layer {
			// The restored blocks' tokens read their own blocks, through
			// every KV head (block 0's tokens can read no other block).
			keep := kvcache.Selection{Layer: below, Blocks: [][]int{blocks, blocks}, Keep: true}
			_ = c.SparseAccess(plan.Seq, keep, &lower)
			_, also := restored(&lower)
			fmt.Printf("  layer %d (Keep): run blocks %v's tokens; the kernel also writes%s\n", below, blocks, also)
		}
		slice, _ := l.SliceOf(layer, 0)
		table, _ := c.BlockTable(nil, plan.Seq, slice)
		fmt.Printf("  layer %d's selection is still pinned: KV head 0's table %v\n", layer, table)
		fmt.Printf("  layer %d: run blocks %v's tokens, writing%s; then the step's attention over %d units\n", layer, blocks, units, len(res.Units))
	}

	// The next step's Append (or SparseAccess without Keep) declares the
	// restored units written: they are on the GPU for the next selections.
	_, _ = c.Append(plan.Seq, 2)
	for layer, heads := range [][][]int{{{0}, {0}}, {{0}, {0}}, {{0}, {}}} {
		_ = c.SparseAccess(plan.Seq, kvcache.Selection{Layer: layer, Blocks: heads}, &res)
		fmt.Printf("next step, layer %d: block 0: %d hits, %d computed\n", layer, res.Hits, res.Computed)
	}
	// Output:
	// layer 0: attention over 3 units
	// layer 1: attention over 3 units
	// layer 2: dropped (block 0, KV head 0): restore blocks [0], keeping layer 2's selection pinned
	//   layer 0 (Keep): run blocks [0]'s tokens; the kernel also writes (block 0, KV head 1)
	//   layer 1 (Keep): run blocks [0]'s tokens; the kernel also writes (block 0, KV head 1)
	//   layer 2's selection is still pinned: KV head 0's table [8 -1 -1 -1 6]
	//   layer 2: run blocks [0]'s tokens, writing (block 0, KV head 0); then the step's attention over 3 units
	// next step, layer 0: block 0: 2 hits, 0 computed
	// next step, layer 1: block 0: 2 hits, 0 computed
	// next step, layer 2: block 0: 1 hits, 0 computed
}

// deviceStream is a TransferEngine whose copies run on the device in the
// order they were issued, like a CUDA stream that the server's kernels
// follow: the server need not wait on the host before computing. The host
// learns that transfers finished when the stream reports them (sync).
type deviceStream struct {
	mem  *kvcache.MemoryStore
	mu   sync.Mutex
	held []func()
}

func (d *deviceStream) Start(copies []kvcache.Copy, done func(error)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.held = append(d.held, func() { done(d.mem.Copy(copies)) })
}

// sync performs the transfers started so far and reports them done.
func (d *deviceStream) sync() {
	d.mu.Lock()
	held := d.held
	d.held = nil
	d.mu.Unlock()
	for _, run := range held {
		run()
	}
}

// With a TransferEngine, a Commit waits for the transfers that vacate the
// new blocks' slots (the victims' bytes moving down to the CPU), and a
// Release that comes before they finish discards it. A server whose
// kernels follow the copies on the device, instead of waiting for each
// layer's Readiness on the host, commits while those transfers are still
// pending: to have the blocks shared, it waits until the sequence's
// Readiness reports nothing pending (WaitReady with layer -1) between its
// Commit and its Release. Readiness counts the waiting commit as pending
// until it is done.
func ExampleCache_Release_afterCommit() {
	serve := func(waitBeforeRelease bool) {
		l, _ := layout.New(smallModel(), layout.PagedLayer, 16)
		tiers := kvcache.GPUAndCPU(kvcache.Capacity{Units: 4}, kvcache.Capacity{Units: 8})
		mem, _ := kvcache.NewMemoryStore(l, tiers)
		stream := &deviceStream{mem: mem}
		c, _ := kvcache.New(kvcache.Config{Layout: l, Tiers: tiers, Engine: stream})

		a, b := countTo(32, 0), countTo(32, 1000)
		plan, _ := c.Acquire(kvcache.Request{Tokens: a})
		_ = c.Commit(plan.Seq, len(a))
		_ = c.Release(plan.Seq)

		// b's blocks take the slots of a's, whose bytes move down first.
		plan, _ = c.Acquire(kvcache.Request{Tokens: b})
		// ... the prefill's kernels, queued behind those moves ...
		_ = c.Commit(plan.Seq, len(b))
		var r kvcache.Readiness
		_ = c.Readiness(plan.Seq, &r)
		fmt.Printf("Commit, Pending %d (2 transfers and the commit), ", r.Pending)
		if waitBeforeRelease {
			go stream.sync() // the device gets there later
			_, _ = c.WaitReady(context.Background(), plan.Seq, -1)
			fmt.Print("WaitReady, ")
		}
		fmt.Print("Release: ")
		_ = c.Release(plan.Seq)
		stream.sync() // whatever was still in flight

		again, _ := c.Acquire(kvcache.Request{Tokens: b})
		fmt.Println("the same prompt again hits", again.Hits, "units, computes", again.Compute)
		_ = c.Release(again.Seq)
	}
	serve(false)
	serve(true)
	// Output:
	// Commit, Pending 3 (2 transfers and the commit), Release: the same prompt again hits 0 units, computes [{0 32}]
	// Commit, Pending 3 (2 transfers and the commit), WaitReady, Release: the same prompt again hits 4 units, computes []
}
