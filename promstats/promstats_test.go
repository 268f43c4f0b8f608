package promstats_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/layout"
	"github.com/kvtier/kvtier/promstats"
)

// newCache returns a GPU and a CPU of 8 units (4 blocks of 4 tokens, 2
// layers) after a workload that hits on the GPU, offloads to the CPU and
// onboards from it, with one sequence left live.
func newCache(t *testing.T) *kvcache.Cache {
	t.Helper()
	l, err := layout.New(layout.Model{Name: "tiny", Layers: 2, QueryHeads: 4, KVHeads: 2, HeadDim: 2, ElemBytes: 1}, layout.PagedLayer, 4)
	require.NoError(t, err)
	tiers := kvcache.GPUAndCPU(kvcache.Capacity{Units: 8}, kvcache.Capacity{Units: 8})
	tiers[1].Shares = []kvcache.Share{{Namespace: "t", Reserve: 0.25, Cap: 0.5}}
	c, err := kvcache.New(kvcache.Config{Layout: l, Tiers: tiers, EventBuffer: 4})
	require.NoError(t, err)
	tokens := func(first uint32, n int) []uint32 {
		out := make([]uint32, n)
		for i := range out {
			out[i] = first + uint32(i)
		}
		return out
	}
	serve := func(prompt []uint32, release bool) kvcache.Plan {
		plan, err := c.Acquire(kvcache.Request{Tokens: prompt})
		require.NoError(t, err)
		require.NoError(t, c.Commit(plan.Seq, plan.Tokens))
		if release {
			require.NoError(t, c.Release(plan.Seq))
		}
		return plan
	}
	serve(tokens(1, 8), true)                                   // a: 2 blocks on the GPU
	assert.Equal(t, 8, serve(tokens(1, 12), true).ReusedTokens) // b: hits a's blocks
	serve(tokens(100, 16), true)                                // c: fills the GPU, a and b go to the CPU
	assert.Positive(t, serve(tokens(1, 8), true).Onboarded)     // a again: from the CPU
	serve(tokens(200, 4), false)                                // a live sequence, pinning a block
	for i := range 4 {                                          // namespace t's blocks, pushed to the CPU
		plan, err := c.Acquire(kvcache.Request{Tokens: tokens(uint32(300+10*i), 4), Namespace: "t"})
		require.NoError(t, err)
		require.NoError(t, c.Commit(plan.Seq, plan.Tokens))
		require.NoError(t, c.Release(plan.Seq))
	}
	st := c.Stats()
	require.Positive(t, st.Offloads)
	require.Positive(t, st.Tier(kvcache.CPU).Hits)
	require.Positive(t, st.Tier(kvcache.GPU).Pinned)
	require.Positive(t, st.Tier(kvcache.CPU).Shares[0].Used)
	return c
}

// expected returns the value of every metric for st, by family name and
// tier ("" for the cache-wide ones), written out from the field names.
func expected(st kvcache.Stats) map[string]map[string]float64 {
	f := func(v any) float64 {
		switch v := v.(type) {
		case uint64:
			return float64(v)
		case int64:
			return float64(v)
		case int:
			return float64(v)
		}
		panic("type")
	}
	want := map[string]map[string]float64{}
	put := func(name, tier string, v any) {
		if want[name] == nil {
			want[name] = map[string]float64{}
		}
		want[name][tier] = f(v)
	}
	for _, ts := range st.Tiers {
		n := ts.Name
		put("kvtier_tier_hits_total", n, ts.Hits)
		put("kvtier_tier_misses_total", n, ts.Misses)
		put("kvtier_tier_evictions_total", n, ts.Evictions)
		put("kvtier_tier_drops_total", n, ts.Drops)
		put("kvtier_tier_moved_in_total", n, ts.MovedIn)
		put("kvtier_tier_moved_in_bytes_total", n, ts.MovedInBytes)
		put("kvtier_tier_failed_total", n, ts.Failed)
		put("kvtier_tier_lost_total", n, ts.Lost)
		put("kvtier_tier_missing_total", n, ts.Missing)
		put("kvtier_tier_corrupt_total", n, ts.Corrupt)
		put("kvtier_tier_adopted_total", n, ts.Adopted)
		put("kvtier_tier_backups_written_total", n, ts.BackupsWritten)
		put("kvtier_tier_backups", n, ts.Backups)
		put("kvtier_tier_capacity_slots", n, ts.Capacity)
		put("kvtier_tier_free_slots", n, ts.Free)
		put("kvtier_tier_pinned_slots", n, ts.Pinned)
		put("kvtier_tier_cached_slots", n, ts.Cached)
		put("kvtier_tier_capacity_bytes", n, ts.CapacityBytes)
		put("kvtier_tier_free_bytes", n, ts.FreeBytes)
		put("kvtier_tier_pinned_bytes", n, ts.PinnedBytes)
		put("kvtier_tier_cached_bytes", n, ts.CachedBytes)
		for _, sh := range ts.Shares {
			k := n + "/" + sh.Namespace
			put("kvtier_share_used_slots", k, sh.Used)
			put("kvtier_share_reserved_slots", k, sh.Reserved)
			put("kvtier_share_cap_slots", k, sh.Cap)
			put("kvtier_share_evictions_total", k, sh.Evictions)
			put("kvtier_share_drops_at_cap_total", k, sh.DropsAtCap)
		}
	}
	put("kvtier_offloads_total", "", st.Offloads)
	put("kvtier_onboards_total", "", st.Onboards)
	put("kvtier_copies_total", "", st.Copies)
	put("kvtier_moved_bytes_total", "", st.BytesMoved)
	put("kvtier_recomputed_tokens_total", "", st.RecomputedTokens)
	put("kvtier_blocks_stored_total", "", st.Stored)
	put("kvtier_blocks_removed_total", "", st.Removed)
	put("kvtier_blocks_pruned_total", "", st.PrunedBlocks)
	put("kvtier_blocks", "", st.Blocks)
	put("kvtier_hollow_blocks", "", st.HollowBlocks)
	put("kvtier_block_records", "", st.BlockRecords)
	put("kvtier_metadata_bytes", "", st.MetadataBytes)
	put("kvtier_sequences", "", st.Sequences)
	put("kvtier_sequences_aborted_total", "", st.Aborted)
	put("kvtier_transfers_in_flight", "", st.Transfers)
	put("kvtier_events_buffered", "", st.EventsBuffered)
	put("kvtier_events_dropped_total", "", st.EventsDropped)
	put("kvtier_sink_panics_total", "", st.SinkPanics)
	return want
}

// gather registers col in a fresh registry and returns its families by name.
func gather(t *testing.T, col prometheus.Collector) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(col))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// value returns the sample's value, whatever its type.
func value(m *dto.Metric) float64 {
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

func label(m *dto.Metric, name string) (string, bool) {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue(), true
		}
	}
	return "", false
}

func TestCollectMatchesStats(t *testing.T) {
	c := newCache(t)
	want := expected(c.Stats())
	got := gather(t, promstats.NewCollector(c, promstats.Options{}))
	require.ElementsMatch(t, keys(want), keys(got), "one family per quantity")
	for name, mf := range got {
		vals := map[string]float64{}
		for _, m := range mf.Metric {
			tier, ok := label(m, promstats.TierLabel)
			assert.Equal(t, strings.HasPrefix(name, "kvtier_tier_") || strings.HasPrefix(name, "kvtier_share_"), ok, "%s: tier label", name)
			ns, ok := label(m, promstats.NamespaceLabel)
			assert.Equal(t, strings.HasPrefix(name, "kvtier_share_"), ok, "%s: namespace label", name)
			if ok {
				tier += "/" + ns
			}
			vals[tier] = value(m)
		}
		assert.Equal(t, want[name], vals, name)
		assert.Len(t, mf.Metric, len(want[name]), name)
	}
	// The workload moved the counters the test is about.
	assert.Positive(t, want["kvtier_tier_hits_total"]["GPU"])
	assert.Positive(t, want["kvtier_tier_hits_total"]["CPU"])
	assert.Positive(t, want["kvtier_offloads_total"][""])
	assert.Positive(t, want["kvtier_sequences"][""])
}

func TestLint(t *testing.T) {
	c := newCache(t)
	problems, err := testutil.CollectAndLint(promstats.NewCollector(c, promstats.Options{}))
	require.NoError(t, err)
	assert.Empty(t, problems)
}

func TestNames(t *testing.T) {
	snake := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	got := gather(t, promstats.NewCollector(newCache(t), promstats.Options{}))
	for name, mf := range got {
		assert.Regexp(t, snake, name)
		assert.True(t, strings.HasPrefix(name, promstats.DefaultNamespace+"_"), name)
		assert.NotEmpty(t, mf.GetHelp(), name)
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			assert.True(t, strings.HasSuffix(name, "_total"), "counter %s", name)
		case dto.MetricType_GAUGE:
			assert.False(t, strings.HasSuffix(name, "_total"), "gauge %s", name)
		default:
			t.Errorf("%s: type %v", name, mf.GetType())
		}
	}
}

// TestDoc checks that doc.go lists every metric, with its type, and no other.
func TestDoc(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	listed := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^//\t(kvtier_[a-z_]+) +(counter|gauge) `).FindAllStringSubmatch(string(doc), -1) {
		listed[m[1]] = m[2]
	}
	got := gather(t, promstats.NewCollector(newCache(t), promstats.Options{}))
	types := map[string]string{}
	for name, mf := range got {
		types[name] = strings.ToLower(mf.GetType().String())
	}
	assert.Equal(t, types, listed)
}

func TestOptions(t *testing.T) {
	c := newCache(t)
	col := promstats.NewCollector(c, promstats.Options{Namespace: "srv", ConstLabels: prometheus.Labels{"model": "tiny"}})
	tiers := c.Tiers()
	assert.Equal(t, 21*tiers+5+18, testutil.CollectAndCount(col)) // 5 for the CPU's one share
	for name, mf := range gather(t, col) {
		assert.True(t, strings.HasPrefix(name, "srv_"), name)
		for _, m := range mf.Metric {
			v, ok := label(m, "model")
			assert.True(t, ok && v == "tiny", name)
		}
	}
	assert.Equal(t, float64(c.Stats().Offloads), testutil.ToFloat64(onlyFamily(col, "srv_offloads_total")))

	reg := prometheus.NewRegistry()
	assert.Error(t, reg.Register(promstats.NewCollector(c, promstats.Options{ConstLabels: prometheus.Labels{"tier": "x"}})))
	assert.Error(t, reg.Register(promstats.NewCollector(c, promstats.Options{ConstLabels: prometheus.Labels{"namespace": "x"}})))
}

// TestStatsPerScrape checks that each scrape reports the cache as it is.
func TestStatsPerScrape(t *testing.T) {
	c := newCache(t)
	col := promstats.NewCollector(c, promstats.Options{})
	before := testutil.ToFloat64(onlyFamily(col, "kvtier_sequences"))
	plan, err := c.Acquire(kvcache.Request{Tokens: []uint32{7, 7, 7, 7}})
	require.NoError(t, err)
	assert.Equal(t, before+1, testutil.ToFloat64(onlyFamily(col, "kvtier_sequences")))
	require.NoError(t, c.Release(plan.Seq))
	assert.Equal(t, before, testutil.ToFloat64(onlyFamily(col, "kvtier_sequences")))
}

// onlyFamily returns a collector that reports only the family name of col.
func onlyFamily(col prometheus.Collector, name string) prometheus.Collector {
	return filtered{col, name}
}

type filtered struct {
	prometheus.Collector
	name string
}

func (f filtered) Collect(ch chan<- prometheus.Metric) {
	all := make(chan prometheus.Metric)
	go func() { f.Collector.Collect(all); close(all) }()
	for m := range all {
		if strings.Contains(m.Desc().String(), `fqName: "`+f.name+`"`) {
			ch <- m
		}
	}
}

func keys[M ~map[string]V, V any](m M) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
