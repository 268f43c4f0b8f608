package tierstore_test

import (
	"context"
	"fmt"

	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/layout"
	"github.com/kvtier/kvtier/tierstore"
)

// Two servers share a store as their third tier: the first computes a
// prompt and publishes it (write-through), the second finds it with Lookup
// and loads it instead of computing it.
func Example() {
	l, _ := layout.New(layout.Model{Name: "tiny", Layers: 2, QueryHeads: 4, KVHeads: 2, HeadDim: 2, ElemBytes: 1}, layout.PagedLayer, 4)
	const seed = 1
	shared := tierstore.NewMemStore(tierstore.Fingerprint("tiny@v1", l, seed)) // a Redis in production
	newServer := func() *kvcache.Cache {
		tiers := []kvcache.TierConfig{{Capacity: kvcache.Capacity{Units: 16}}, {Capacity: kvcache.Capacity{Units: 16}},
			{Name: "shared", Capacity: kvcache.Capacity{Units: 1024}, WriteThrough: true}}
		mem, _ := kvcache.NewMemoryStore(l, tiers[:2]) // the server's GPU and CPU memory
		engine, _ := tierstore.NewEngine(tierstore.EngineConfig{Memory: mem, Stores: map[kvcache.Tier]tierstore.Store{3: shared}})
		c, _ := kvcache.New(kvcache.Config{Layout: l, Tiers: tiers, Engine: engine, HashSeed: seed})
		return c
	}
	ctx := context.Background()
	req := kvcache.Request{Tokens: []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}}

	a := newServer()
	plan, _ := a.Acquire(req)
	// ... the server computes plan.Compute into its block tables ...
	_ = a.Commit(plan.Seq, len(req.Tokens))
	_ = a.Release(plan.Seq)
	for a.Stats().Transfers > 0 { // the write-through copies, off the lock
		<-a.Completed()
		_, _ = a.Poll()
	}

	b := newServer()
	n, _ := tierstore.Lookup(ctx, shared, b, req, 3)
	plan, _ = b.Acquire(req)
	redo, _ := b.WaitReady(ctx, plan.Seq, -1)
	fmt.Println("blocks found:", n, "units stored:", shared.Len())
	fmt.Println("reused tokens:", plan.ReusedTokens, "to recompute:", len(redo))
	// Output:
	// blocks found: 4 units stored: 8
	// reused tokens: 16 to recompute: 0
}
