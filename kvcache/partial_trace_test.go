package kvcache_test

import (
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/layout"
)

// TestPartialReuseOnConversationTrace replays the Mooncake conversation
// trace (TRACES.md), and a stream of prompts that share system prompts of
// lengths that are not whole blocks, through a cache of 16-token blocks
// large enough to keep everything, with and without Config.PartialReuse,
// and with and without Request.ComputeLast, and reports the prompt tokens
// reused. With nothing evicted, the tokens a partial copy gives are
// exactly the extra tokens reused; a copy gives at most 15 (the part of a
// 16-token block a full match leaves).
//
// The trace names 512-token blocks by id: each id's tokens are made from
// the id (its first token is the id, so different ids never agree), and a
// prompt is its blocks' tokens cut at input_length. Two prompts then part
// only where their ids do, at a multiple of 512 tokens and so of 16, and
// no prompt ends inside a block another one cached: partial reuse finds
// nothing to copy there, by the trace's construction. The system-prompt
// stream is the case it is for: prompts that part inside a block.
//
// KVTIER_PARTIAL_TRACE_REQUESTS sets how many requests to replay (default
// 1000 of the trace's 12,031; 0 for all).
func TestPartialReuseOnConversationTrace(t *testing.T) {
	limit, shared := 1000, 2000
	if testing.Short() || oracleRace {
		limit, shared = 200, 500 // a measurement: short under -short and the race detector
	}
	if v := os.Getenv("KVTIER_PARTIAL_TRACE_REQUESTS"); v != "" {
		var err error
		limit, err = strconv.Atoi(v)
		require.NoError(t, err)
	}
	prompts, _ := conversationTrace(t, limit)

	// Three system prompts of 50, 300 and 1000 tokens, each followed by a
	// question of 20 to 200 tokens; every tenth request repeats an earlier
	// one.
	rng := rand.New(rand.NewPCG(1, 2))
	var systems [][]uint32
	for i, n := range []int{50, 300, 1000} {
		sys := make([]uint32, n)
		for j := range sys {
			sys[j] = uint32(1000*i + j)
		}
		systems = append(systems, sys)
	}
	var sharedPrompts [][]uint32
	for i := range shared {
		if i%10 == 9 {
			sharedPrompts = append(sharedPrompts, sharedPrompts[rng.IntN(len(sharedPrompts))])
			continue
		}
		p := slices.Clone(systems[rng.IntN(len(systems))])
		for range 20 + rng.IntN(181) {
			p = append(p, 1<<20+uint32(rng.IntN(50000)))
		}
		sharedPrompts = append(sharedPrompts, p)
	}

	l, err := layout.New(layout.SeedModel(), layout.AllLayers, 16)
	require.NoError(t, err)
	type result struct{ reused, partial, tokens int64 }
	replay := func(prompts [][]uint32, partial, computeLast bool) result {
		c, err := kvcache.New(kvcache.Config{Layout: l, PartialReuse: partial,
			Tiers: kvcache.GPUAndCPU(kvcache.Capacity{Units: 1 << 24}, kvcache.Capacity{}), MaxBlocks: 1 << 24})
		require.NoError(t, err)
		var r result
		for _, prompt := range prompts {
			p, err := c.Acquire(kvcache.Request{Tokens: prompt, ComputeLast: computeLast})
			require.NoError(t, err)
			r.reused += int64(p.ReusedTokens)
			r.partial += int64(p.PartialTokens)
			r.tokens += int64(len(prompt))
			require.NoError(t, c.Commit(p.Seq, len(prompt)))
			require.NoError(t, c.Release(p.Seq))
		}
		require.Equal(t, r.partial, c.Stats().PartialTokens)
		return r
	}
	for _, w := range []struct {
		name    string
		prompts [][]uint32
	}{{"Mooncake conversation", prompts}, {"shared system prompts", sharedPrompts}} {
		for _, computeLast := range []bool{false, true} {
			off, on := replay(w.prompts, false, computeLast), replay(w.prompts, true, computeLast)
			t.Logf("%s, %d requests, %d prompt tokens, ComputeLast %v: reused %d tokens without partial reuse, %d with (+%d, %.3f%% of the prompt tokens; %.2f per request)",
				w.name, len(w.prompts), off.tokens, computeLast, off.reused, on.reused, on.partial,
				100*float64(on.partial)/float64(on.tokens), float64(on.partial)/float64(len(w.prompts)))
			require.Zero(t, off.partial)
			require.Equal(t, off.reused+on.partial, on.reused, "with nothing evicted, partial copies add exactly their tokens")
			if w.name == "shared system prompts" {
				require.Positive(t, on.partial)
			}
		}
	}
}
