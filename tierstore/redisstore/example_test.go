package redisstore_test

import (
	"context"
	"fmt"

	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/layout"
	"github.com/kvtier/kvtier/tierstore"
	"github.com/kvtier/kvtier/tierstore/redisstore"
)

// ExampleOpen puts a Redis server shared by several inference servers
// below a cache's GPU and CPU, as its third tier: committed blocks are
// written through to it, and before each request the server asks it for
// the prompt's blocks (tierstore.Lookup), so that a prefix another server
// computed is loaded, not recomputed. It needs a Redis server at the
// address given, so it is compiled but not run by go test; the package's
// tests run the same calls against the server scripts/redis.sh starts.
func ExampleOpen() {
	// A toy model (2 layers, 4 KiB per 16-token block), so that the
	// memory tiers below allocate a few MiB: NewMemoryStore allocates
	// every tier it is given now.
	m := layout.Model{Name: "toy", Layers: 2, QueryHeads: 8, KVHeads: 2, HeadDim: 16, ElemBytes: 2}
	l, err := layout.New(m, layout.PagedLayer, 16)
	if err != nil {
		panic(err)
	}
	const seed = 42 // the hash seed every server of the deployment shares
	tiers := kvcache.GPUAndCPU(kvcache.Capacity{Units: 2 * 256}, kvcache.Capacity{Units: 2 * 1024})
	mem, err := kvcache.NewMemoryStore(l, tiers) // the GPU and CPU bytes, in Go memory
	if err != nil {
		panic(err)
	}
	shared, err := redisstore.Open(redisstore.Options{
		Addrs:       []string{"127.0.0.1:6379"},
		Fingerprint: tierstore.Fingerprint("toy@rev1", l, seed), // the same on every server
	})
	if err != nil {
		panic(err)
	}
	defer shared.Close()
	// Open does not connect: Ping checks the server and the credentials
	// now, rather than as failed transfers later.
	if err := shared.Ping(context.Background()); err != nil {
		panic(err)
	}
	engine, err := tierstore.NewEngine(tierstore.EngineConfig{Memory: mem, Stores: map[kvcache.Tier]tierstore.Store{3: shared}})
	if err != nil {
		panic(err)
	}
	defer engine.Close()
	tiers = append(tiers, kvcache.TierConfig{Name: "redis", Capacity: kvcache.Capacity{Units: 1 << 20}, WriteThrough: true})
	c, err := kvcache.New(kvcache.Config{Layout: l, Tiers: tiers, Engine: engine, HashSeed: seed})
	if err != nil {
		panic(err)
	}

	req := kvcache.Request{Tokens: make([]uint32, 4096)}
	// Off the scheduling lock: the prompt's blocks the store holds are
	// adopted, known to the cache as units of tier 3.
	adopted, err := tierstore.Lookup(context.Background(), shared, c, req, 3)
	if err != nil {
		fmt.Println("lookup:", err) // the request is computed as if nothing were shared
	}
	plan, err := c.Acquire(req) // loads what the lookup found, computes the rest
	if err != nil {
		panic(err)
	}
	fmt.Println(adopted, plan.ReusedTokens)
}
