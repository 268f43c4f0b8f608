// Command soak runs a kvcache for a long time on prompts that never repeat
// and reports, every so many requests, how big its metadata and the heap
// are: a cache that serves forever must not grow forever. Each request is a
// whole prefill: Acquire, Commit, Release, metadata only (no bytes move).
//
// Under every shipped policy the tree holds, besides the blocks with bytes,
// the dropped blocks above them; the prioritized LRU with priority-100
// tails (plru-tail) is the worst case: each prompt's last block stays
// cached while the rest of it is dropped, so without a budget the tree
// keeps a prompt's depth of dropped blocks per cached tail. The budget
// (kvcache.Config.MaxBlocks) bounds it.
//
//	go run ./examples/soak                       # 200,000 requests per policy, JSON lines
//	go run ./examples/soak -requests 40000 -every 5000 -policies plru-tail -max-blocks -1
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"

	"github.com/kvtier/kvtier/costmodel"
	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/internal/flagparse"
	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/layout"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "soak:", err)
		}
		os.Exit(2)
	}
}

// policyNames are the policies -policies accepts, in the order they run.
var policyNames = []string{"lru", "fifo", "plru", "plru-tail", "s3fifo", "retention"}

// config is what the flags set.
type config struct {
	requests, every int
	promptTokens    int
	blockTokens     int
	gpuBlocks       int
	maxBlocks       int
	policies        []string
}

// line is one JSON line of output.
type line struct {
	Policy         string `json:"policy"`
	Requests       int    `json:"requests"`
	TreeBlocks     int    `json:"tree_blocks"`
	HollowBlocks   int    `json:"hollow_blocks"`
	PrunedBlocks   uint64 `json:"pruned_blocks"`
	MetadataBytes  int64  `json:"metadata_bytes"`
	HeapInuseBytes uint64 `json:"heap_inuse_bytes"`
}

func parse(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	fs.IntVar(&c.requests, "requests", 200000, "requests per policy")
	fs.IntVar(&c.every, "every", 20000, "print a line every this many requests")
	fs.IntVar(&c.promptTokens, "prompt", 2048, "tokens per prompt (every prompt is new)")
	fs.IntVar(&c.blockTokens, "block", 16, "tokens per block")
	fs.IntVar(&c.gpuBlocks, "gpu-blocks", 2048, "GPU capacity in token blocks")
	fs.IntVar(&c.maxBlocks, "max-blocks", 0, "kvcache.Config.MaxBlocks: 0 for the default budget, -1 for none")
	policies := fs.String("policies", "lru,fifo,plru,plru-tail,s3fifo,retention", "comma-separated policies")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	for _, v := range []struct {
		name string
		v    int
	}{{"-requests", c.requests}, {"-every", c.every}, {"-prompt", c.promptTokens}, {"-gpu-blocks", c.gpuBlocks}} {
		if v.v <= 0 {
			return c, fmt.Errorf("%s %d must be positive", v.name, v.v)
		}
	}
	if c.maxBlocks < -1 {
		return c, fmt.Errorf("-max-blocks %d: want 0 (default), -1 (none) or a positive budget", c.maxBlocks)
	}
	var err error
	c.policies, err = flagparse.Names(*policies, policyNames)
	return c, err
}

func run(args []string, stdout, stderr io.Writer) error {
	c, err := parse(args, stderr)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	for _, p := range c.policies {
		if err := soak(c, p, func(l line) error { return enc.Encode(l) }); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	return nil
}

// soak runs c.requests prompts under policy and reports a line every
// c.every requests.
func soak(c config, policy string, report func(line) error) error {
	model := layout.Model{Name: "soak", Layers: 4, QueryHeads: 8, KVHeads: 2, HeadDim: 64, ElemBytes: 2}
	l, err := layout.New(model, layout.PagedLayer, c.blockTokens)
	if err != nil {
		return err
	}
	factory, tails, err := policyFactory(policy)
	if err != nil {
		return err
	}
	maxBlocks := c.maxBlocks
	if maxBlocks == -1 {
		maxBlocks = math.MaxInt
	}
	units := int64(c.gpuBlocks) * int64(l.UnitsPerBlock())
	cache, err := kvcache.New(kvcache.Config{Layout: l,
		Tiers:     []kvcache.TierConfig{{Name: "GPU", Capacity: kvcache.Capacity{Units: units}, Policy: factory}},
		Recompute: &retentionCost, MaxBlocks: maxBlocks, Clock: &eviction.ManualClock{}})
	if err != nil {
		return err
	}
	prompt := make([]uint32, c.promptTokens)
	req := kvcache.Request{Tokens: prompt}
	if tails {
		last := (c.promptTokens - 1) / c.blockTokens * c.blockTokens
		req.Priorities = &kvcache.Priorities{Default: eviction.DefaultPriority,
			Ranges: []kvcache.PriorityRange{{Start: last, End: c.promptTokens, Priority: eviction.MaxPriority}}}
	}
	var ms runtime.MemStats
	for i := 1; i <= c.requests; i++ {
		// A prompt that never repeats: its first token is the request's
		// number, the rest differ from every other prompt's through it.
		for j := range prompt {
			prompt[j] = uint32(i)*2654435761 + uint32(j)
		}
		p, err := cache.Acquire(req)
		if err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
		if err := cache.Commit(p.Seq, p.Tokens); err != nil {
			return err
		}
		if err := cache.Release(p.Seq); err != nil {
			return err
		}
		if i%c.every != 0 {
			continue
		}
		runtime.GC()
		runtime.ReadMemStats(&ms)
		st := cache.Stats()
		if err := report(line{Policy: policy, Requests: i, TreeBlocks: st.Blocks, HollowBlocks: st.HollowBlocks,
			PrunedBlocks: st.PrunedBlocks, MetadataBytes: st.MetadataBytes, HeapInuseBytes: ms.HeapInuse}); err != nil {
			return err
		}
	}
	runtime.KeepAlive(cache)
	return nil
}

// retentionCost prices units for the retention policy (the cache's
// Config.Recompute).
var retentionCost = costmodel.Recompute{Alpha: 1e-6, Beta: 1e-3, LayerWeight: costmodel.Flat, PositionWeight: costmodel.Flat}

// policyFactory returns the GPU policy of name and whether its prompts keep
// their last block with priority 100.
func policyFactory(name string) (kvcache.PolicyFactory, bool, error) {
	switch name {
	case "lru":
		return kvcache.LRUPolicy(), false, nil
	case "fifo":
		return kvcache.FIFOPolicy(), false, nil
	case "plru":
		return kvcache.PrioritizedLRUPolicy(), false, nil
	case "plru-tail":
		return kvcache.PrioritizedLRUPolicy(), true, nil
	case "s3fifo":
		return kvcache.S3FIFOPolicy(eviction.S3FIFOConfig{}), false, nil
	case "retention":
		return kvcache.RetentionPolicy(), false, nil
	}
	return nil, false, fmt.Errorf("unknown policy %q", name)
}
