package kvevents_test

import (
	"fmt"

	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/kvevents"
	"github.com/kvtier/kvtier/layout"
)

// A server's step: serve a request, drain the step's events, translate
// them to vLLM's, encode the batch (what a Publisher sends) and decode it
// back (what a router receives).
func ExampleTranslator() {
	l, _ := layout.New(layout.Model{Name: "toy", Layers: 2, QueryHeads: 2, KVHeads: 1, HeadDim: 4, ElemBytes: 2}, layout.PagedLayer, 4)
	c, _ := kvcache.New(kvcache.Config{Layout: l, EventBuffer: 1024, Tiers: kvcache.GPUAndCPU(kvcache.Capacity{Units: 4}, kvcache.Capacity{Units: 4})})
	tr := kvevents.NewTranslator(c)
	enc, _ := kvevents.NewEncoder(kvevents.EncoderOptions{})

	step := func(tokens ...uint32) {
		plan, _ := c.Acquire(kvcache.Request{Tokens: tokens})
		_ = c.Commit(plan.Seq, len(tokens))
		_ = c.Release(plan.Seq)
		evs, _, _ := c.TakeEvents(nil)
		payload, _ := enc.Encode(kvevents.Batch{Timestamp: 1.7e9, Events: tr.Append(nil, evs)})
		batch, _ := kvevents.Decode(payload)
		for _, e := range batch.Events {
			switch e := e.(type) {
			case kvevents.BlockStored:
				fmt.Printf("stored %d blocks on %s (parent %v, %d tokens)\n", len(e.BlockHashes), e.Medium, e.ParentBlockHash != nil, len(e.TokenIDs))
			case kvevents.BlockRemoved:
				fmt.Printf("removed %d block from %s\n", len(e.BlockHashes), e.Medium)
			}
		}
	}
	step(1, 2, 3, 4, 5, 6, 7, 8) // two blocks on the GPU (2 units each: it is full)
	fmt.Println("--")
	step(9, 10, 11, 12) // a new block: the least recently used, the first request's last (released first), moves to the CPU
	// Output:
	// stored 2 blocks on GPU (parent false, 8 tokens)
	// --
	// stored 1 blocks on CPU (parent true, 4 tokens)
	// removed 1 block from GPU
	// stored 1 blocks on GPU (parent false, 4 tokens)
}

// A router follows two servers' events in one Index and asks, for a
// prompt's block hashes, where most of it is cached: a block on the GPU
// is worth more than one the server must first load from its CPU.
func ExampleIndex_Score() {
	var ix kvevents.Index
	prompt := []uint64{11, 12, 13}
	ix.Apply("server-a", kvevents.Batch{Events: []kvevents.Event{
		kvevents.BlockStored{BlockHashes: prompt, Medium: kvevents.MediumCPU},
	}})
	ix.Apply("server-b", kvevents.Batch{Events: []kvevents.Event{
		kvevents.BlockStored{BlockHashes: prompt[:2], Medium: kvevents.MediumGPU},
	}})
	for _, s := range ix.Score(nil, prompt, kvevents.Weights{kvevents.MediumGPU: 1, kvevents.MediumCPU: 0.5}) {
		fmt.Printf("%s: %d blocks, worth %.1f\n", s.Server, s.Blocks, s.Value)
	}
	// Output:
	// server-b: 2 blocks, worth 2.0
	// server-a: 3 blocks, worth 1.5
}
