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
	t.Logf("%d requests (%d quiet), GPU %d and CPU %d blocks; prompt tokens: quiet %d, noisy %d", len(prompts), quietRequests, gpu, cpu, base.tokens["quiet"], base.tokens["noisy"])
	t.Logf("no shares: quiet reuses %d tokens (%.2f%%), noisy %d (%.2f%%)", base.reused["quiet"], pct(base.reused["quiet"], base.tokens["quiet"]),
		base.reused["noisy"], pct(base.reused["noisy"], base.tokens["noisy"]))
	got := map[float64][2]int64{0: {base.reused["quiet"], base.reused["noisy"]}}
	for _, reserve := range []float64{0.1, 0.2, 0.4} {
		with := replay(reserve)
		t.Logf("quiet reserves %.0f%% of the CPU: quiet reuses %d tokens (%.2f%%), noisy %d (%.2f%%)", 100*reserve,
			with.reused["quiet"], pct(with.reused["quiet"], with.tokens["quiet"]), with.reused["noisy"], pct(with.reused["noisy"], with.tokens["noisy"]))
		require.GreaterOrEqual(t, with.reused["quiet"], base.reused["quiet"], "a reservation of %v lowered the quiet tenant's reuse", reserve)
		got[reserve] = [2]int64{with.reused["quiet"], with.reused["noisy"]}
	}
	if limit == 2000 && gpu == 8000 && cpu == 32000 {
		// The figures BENCHMARKS.md quotes (the replay is deterministic).
		require.Equal(t, publishedSharesTrace, got)
	}
}

// publishedSharesTrace is the reuse (quiet, noisy tokens) of
// TestSharesOnConversationTrace's default run by the quiet tenant's
// reservation, as BENCHMARKS.md gives it.
var publishedSharesTrace = map[float64][2]int64{
	0:   {115200, 1084112},
	0.1: {537392, 963888},
	0.2: {595456, 943616},
	0.4: {674816, 943616},
}

func pct(a, b int64) float64 { return 100 * float64(a) / float64(b) }

func getenvInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err)
	return n
}
