// Command quickstart is the smallest server loop over kvcache: acquire a
// prompt, compute what the plan says, decode, release. A Go-memory mover
// (kvcache.MemoryStore) holds the KV, so bytes really move between tiers.
package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/layout"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// run serves four requests on a GPU of 4 blocks backed by a CPU of 8.
func run(w io.Writer) error {
	model := layout.Model{Name: "toy", Layers: 2, QueryHeads: 4, KVHeads: 2, HeadDim: 8, ElemBytes: 2}
	l, err := layout.New(model, layout.AllLayers, 16) // one unit = one 16-token block, all layers
	if err != nil {
		return err
	}
	tiers := kvcache.GPUAndCPU(kvcache.Capacity{Units: 4}, kvcache.Capacity{Units: 8})
	store, err := kvcache.NewMemoryStore(l, tiers) // the "device memory" the cache copies in
	if err != nil {
		return err
	}
	c, err := kvcache.New(kvcache.Config{Layout: l, Tiers: tiers, Mover: store})
	if err != nil {
		return err
	}
	text := func(tok uint32, n int) []uint32 { return slices.Repeat([]uint32{tok}, n) }
	system := text(1, 32) // a 2-block system prompt that a, b and d share
	prompts := [][]uint32{slices.Concat(system, text(2, 10)), slices.Concat(system, text(3, 12)),
		text(4, 60), slices.Concat(system, text(5, 5))} // c fills the GPU: the shared blocks go to the CPU
	for i, prompt := range prompts {
		name := string(rune('a' + i))
		plan, err := c.Acquire(kvcache.Request{Tokens: prompt})
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s: %d tokens, reused %d (%d blocks on GPU, %d onboarded from CPU), compute %v, offloaded %d\n",
			name, len(prompt), plan.ReusedTokens, plan.Hits, plan.Onboarded, plan.Compute, plan.Offloaded)
		table, err := c.BlockTable(nil, plan.Seq, 0) // GPU slot of each block: what attention reads
		if err != nil {
			return err
		}
		for b, slot := range table {
			kv := store.Bytes(kvcache.GPU, 0, slot)
			if !computes(plan, b*16, min((b+1)*16, len(prompt))) { // reused: the KV an earlier request wrote
				fmt.Fprintf(w, "   block %d in GPU slot %d holds %q\n", b, slot, strings.TrimRight(string(kv[:16]), "\x00"))
			} else { // in plan.Compute: the server computes the block's KV into its slot
				copy(kv, fmt.Sprintf("%s's block %d", name, b))
				fmt.Fprintf(w, "   block %d computed into GPU slot %d\n", b, slot)
			}
		}
		if plan, err = c.Append(plan.Seq, 7, 7, 7); err != nil { // decode: commits the prompt's KV
			return err
		}
		if err := c.Commit(plan.Seq, plan.Tokens); err != nil { // the last step ran: share it too
			return err
		}
		if err := c.Release(plan.Seq); err != nil { // committed blocks stay cached for reuse
			return err
		}
	}
	st := c.Stats()
	gpu := st.Tier(kvcache.GPU)
	_, err = fmt.Fprintf(w, "GPU hits %d misses %d, %d offloads, %d onboards, %d bytes moved\n",
		gpu.Hits, gpu.Misses, st.Offloads, st.Onboards, st.BytesMoved)
	return err
}

// computes reports whether plan asks the server to compute a token of
// [start, end): the tokens of a reused block are in no range of Compute.
func computes(plan kvcache.Plan, start, end int) bool {
	for _, r := range plan.Compute {
		if r.Start < end && r.End > start {
			return true
		}
	}
	return false
}
