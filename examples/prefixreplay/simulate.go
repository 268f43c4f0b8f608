package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/kvtier/kvtier/costmodel"
	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/internal/parallel"
	"github.com/kvtier/kvtier/internal/progress"
	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/layout"
)

// tokenModel is the smallest valid model: the replay is metadata only (no
// Mover), so unit bytes never matter, only that one AllLayers unit is one
// 512-token block and GPU capacity counts blocks.
func tokenModel() layout.Model {
	return layout.Model{Name: "tokens-only", Layers: 1, QueryHeads: 1, KVHeads: 1, HeadDim: 1, ElemBytes: 1}
}

// setting is one simulated cache: a policy and a GPU capacity in tokens.
type setting struct {
	policy         string
	capacityTokens int64
	unlimited      bool // capacityTokens was sized to hold the whole trace
}

// result is one row of the report. The exported fields are the JSON row.
type result struct {
	Policy           string  `json:"policy"`
	CapacityTokens   int64   `json:"capacity_tokens"`
	Requests         int     `json:"requests"`
	Blocks           int     `json:"blocks"`
	BlockHits        int     `json:"block_hits"`
	BlockHitRatio    float64 `json:"block_hit_ratio"`
	TokenHitRatio    float64 `json:"token_hit_ratio"`
	MaxBlockHitRatio float64 `json:"max_block_hit_ratio"`

	tokens, tokenHits int64
	// prefixHits counts the hits before a request's first computed block:
	// what a cache that only reuses an unbroken prefix would get.
	prefixHits int
	// recomputedBlocks counts cached blocks whose unit had been dropped
	// (evicted while later blocks stayed) and had to be recomputed.
	recomputedBlocks int
	// tooLarge counts requests with more blocks than the GPU holds.
	tooLarge  int
	unlimited bool
	elapsed   time.Duration
}

// simOptions are the knobs every setting shares.
type simOptions struct {
	seed     uint64
	cost     costmodel.Recompute
	parallel int
	// prog, when not nil, gets a line as each setting finishes.
	prog *progress.Reporter
}

// simulate replays reqs through a kvcache of the given setting, one request
// at a time in file order: Acquire (match the longest cached prefix, pin the
// request's blocks, give the rest fresh slots), then Release.
//
// Every block goes in as a full 512-token block, the trace's partial last
// block too (the trace hashes it, and a full block is what the tree commits
// and later requests match); its tokens count at their real length in the
// token hit ratio. A request with more blocks than the GPU holds cannot be
// acquired (kvcache.ErrNoSpace): it is counted as all miss and leaves the
// cache unchanged, as a server that rejects it would.
func simulate(reqs []request, s setting, opt simOptions) (result, error) {
	start := time.Now()
	res := result{Policy: s.policy, CapacityTokens: s.capacityTokens, unlimited: s.unlimited}
	units := s.capacityTokens / traceBlockTokens
	if units < 1 {
		return res, fmt.Errorf("capacity %d tokens holds no %d-token block", s.capacityTokens, traceBlockTokens)
	}
	factory, err := policyFactory(s.policy)
	if err != nil {
		return res, err
	}
	l, err := layout.New(tokenModel(), layout.AllLayers, traceBlockTokens)
	if err != nil {
		return res, err
	}
	clock := &eviction.ManualClock{}
	cost := opt.cost
	c, err := kvcache.New(kvcache.Config{
		Layout:    l,
		Tiers:     []kvcache.TierConfig{{Name: "GPU", Capacity: kvcache.Capacity{Units: units}, Policy: factory}},
		Recompute: &cost,
		Clock:     clock,
		HashSeed:  opt.seed,
	})
	if err != nil {
		return res, err
	}
	var tokens []uint32
	for i, r := range reqs {
		n := len(r.HashIDs)
		res.Requests++
		res.Blocks += n
		res.tokens += int64(r.InputLength)
		// Retention reads time: the trace's arrival time, so a block's
		// inactivity is real seconds of the production hour.
		clock.Set(time.Duration(r.Timestamp) * time.Millisecond)
		tokens = promptTokens(tokens, r, opt.seed)
		plan, err := c.Acquire(kvcache.Request{Tokens: tokens})
		if errors.Is(err, kvcache.ErrNoSpace) {
			res.tooLarge++
			continue
		}
		if err != nil {
			return res, fmt.Errorf("request %d: %w", i, err)
		}
		hits, err := planHits(plan, n)
		if err != nil {
			return res, fmt.Errorf("request %d: %w", i, err)
		}
		res.BlockHits += hits
		res.tokenHits += int64(hits * traceBlockTokens)
		if lastBlockHit(plan, n) {
			res.tokenHits -= int64(traceBlockTokens - r.lastBlockTokens())
		}
		res.prefixHits += prefixHits(plan, n)
		res.recomputedBlocks += plan.RecomputeTokens / traceBlockTokens
		// The prefill ran: its blocks are written and shared.
		if err := c.Commit(plan.Seq, plan.Tokens); err != nil {
			return res, fmt.Errorf("request %d: %w", i, err)
		}
		if err := c.Release(plan.Seq); err != nil {
			return res, fmt.Errorf("request %d: %w", i, err)
		}
	}
	res.BlockHitRatio = ratio(int64(res.BlockHits), int64(res.Blocks))
	res.TokenHitRatio = ratio(res.tokenHits, res.tokens)
	res.elapsed = time.Since(start)
	return res, nil
}

// planHits returns the blocks of an n-block Acquire that were on the GPU.
// With one unit per block and no CPU tier, every block is either a GPU hit
// or computed (fresh or recomputed); the plan must say so, or the replay's
// accounting would be wrong.
func planHits(p kvcache.Plan, n int) (int, error) {
	if p.Hits+p.Computed != n || p.Onboarded != 0 || p.ReusedTokens != p.Hits*traceBlockTokens {
		return 0, fmt.Errorf("plan of %d blocks does not add up: %d hit, %d fresh, %d onboarded, %d reused tokens",
			n, p.Hits, p.Computed, p.Onboarded, p.ReusedTokens)
	}
	return p.Hits, nil
}

// lastBlockHit reports whether the last of n blocks needs no compute:
// Compute ranges are in order, so only the last one can reach it.
func lastBlockHit(p kvcache.Plan, n int) bool {
	return len(p.Compute) == 0 || p.Compute[len(p.Compute)-1].End <= (n-1)*traceBlockTokens
}

// prefixHits returns the blocks before the first computed one.
func prefixHits(p kvcache.Plan, n int) int {
	if len(p.Compute) == 0 {
		return n
	}
	return p.Compute[0].Start / traceBlockTokens
}

// ratio returns a/b, or 0 when b is 0.
func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// simulateAll runs every setting, opt.parallel at a time (0: GOMAXPROCS),
// and returns the results in the order of settings. Each setting has its
// own cache; reqs is only read.
func simulateAll(reqs []request, settings []setting, opt simOptions) ([]result, error) {
	return parallel.Map(settings, opt.parallel, func(st setting) (result, error) {
		r, err := simulate(reqs, st, opt)
		if err != nil {
			return result{}, fmt.Errorf("%s at %d tokens: %w", st.policy, st.capacityTokens, err)
		}
		capacity := formatTokens(st.capacityTokens)
		if st.unlimited {
			capacity = "unlimited"
		}
		opt.prog.Done(fmt.Sprintf("%s at %s tokens", st.policy, capacity))
		return r, nil
	})
}
