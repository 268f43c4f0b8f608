package kvcache_test

import (
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/layout"
)

// TestSharesOnConversationTrace replays the Mooncake conversation trace
// (TRACES.md) as two tenants: the conversations whose second block id is
// a multiple of 10 (about a tenth of the requests) are a quiet tenant's,
// the rest a noisy one's (every prompt starts with the trace's common
// block 0, which each tenant caches under its own namespace). The cache
// has 16-token blocks (one unit each) on a GPU and a CPU too small for
// both tenants' conversations. It reports the prompt tokens each tenant
// reuses without shares, and with a reservation of a fraction of the CPU
// for the quiet tenant; the quiet tenant must reuse at least as much
// with its reservation.
//
// KVTIER_SHARES_TRACE_REQUESTS sets how many requests to replay (default
// 2000 of the trace's 12,031, 400 under -short; 0 for all).
func TestSharesOnConversationTrace(t *testing.T) {
	limit := 2000
	if testing.Short() || oracleRace {
		limit = 400 // a measurement: short under -short and the race detector
	}
	if v := os.Getenv("KVTIER_SHARES_TRACE_REQUESTS"); v != "" {
		var err error
		limit, err = strconv.Atoi(v)
		require.NoError(t, err)
	}
	prompts, ids := conversationTrace(t, limit)
	tenant := make([]string, len(prompts))
	quietRequests := 0
	for i, id := range ids {
		tenant[i] = "noisy"
		if len(id) > 1 && id[1]%10 == 0 {
			tenant[i] = "quiet"
			quietRequests++
		}
	}
	l, err := layout.New(layout.SeedModel(), layout.AllLayers, 16)
	require.NoError(t, err)
	gpu, cpu := int64(getenvInt(t, "KVTIER_SHARES_GPU", 8000)), int64(getenvInt(t, "KVTIER_SHARES_CPU", 32000))
	type result struct{ reused, tokens map[string]int64 }
	replay := func(reserve float64) result {
		tiers := kvcache.GPUAndCPU(kvcache.Capacity{Units: gpu}, kvcache.Capacity{Units: cpu})
		if reserve > 0 {
			tiers[1].Shares = []kvcache.Share{{Namespace: "quiet", Reserve: reserve}}
		}
		c, err := kvcache.New(kvcache.Config{Layout: l, Tiers: tiers, MaxBlocks: 1 << 22})
		require.NoError(t, err)
		r := result{reused: map[string]int64{}, tokens: map[string]int64{}}
		for i, prompt := range prompts {
			p, err := c.Acquire(kvcache.Request{Tokens: prompt, Namespace: tenant[i]})
			require.NoError(t, err)
			r.reused[tenant[i]] += int64(p.ReusedTokens)
			r.tokens[tenant[i]] += int64(len(prompt))
			require.NoError(t, c.Commit(p.Seq, len(prompt)))
			require.NoError(t, c.Release(p.Seq))
		}
		return r
	}
	base := replay(0)
	for _, reserve := range []float64{0.1, 0.2, 0.4} {
		with := replay(reserve)
		t.Logf("%d requests (%d quiet), GPU %d and CPU %d blocks; quiet reserves %.0f%% of the CPU: quiet reuses %.2f%% of its prompt tokens (without shares %.2f%%), noisy %.2f%% (%.2f%%)",
			len(prompts), quietRequests, gpu, cpu, 100*reserve,
			100*float64(with.reused["quiet"])/float64(with.tokens["quiet"]), 100*float64(base.reused["quiet"])/float64(base.tokens["quiet"]),
			100*float64(with.reused["noisy"])/float64(with.tokens["noisy"]), 100*float64(base.reused["noisy"])/float64(base.tokens["noisy"]))
		require.GreaterOrEqual(t, with.reused["quiet"], base.reused["quiet"], "a reservation of %v lowered the quiet tenant's reuse", reserve)
	}
}

func getenvInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err)
	return n
}
