package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mooncakeTrace is the shared trace, relative to this package's directory.
var mooncakeTrace = filepath.Join("..", "..", "..", "shared", "traces", "mooncake_conversation.jsonl")

// Without the trace at its default place (the test runs in this package's
// directory, where ../shared/traces does not exist), the program fails with
// an error that names the file and says how to get it; a trace named with
// -trace that is missing gets the plain error.
func TestMissingDefaultTrace(t *testing.T) {
	if _, err := os.Stat(defaultTrace); err == nil {
		t.Skipf("%s exists from this package's directory", defaultTrace)
	}
	var out bytes.Buffer
	err := runTo(nil, &out, io.Discard)
	require.ErrorIs(t, err, fs.ErrNotExist)
	assert.Contains(t, err.Error(), defaultTrace)
	assert.Contains(t, err.Error(), "TRACES.md")
	assert.Contains(t, err.Error(), "curl -fLo "+defaultTrace+" "+mooncakeTraceURL)
	assert.Empty(t, out.String())
	missing := filepath.Join(t.TempDir(), "missing.jsonl")
	err = runTo([]string{"-trace", missing}, &out, io.Discard)
	require.ErrorIs(t, err, fs.ErrNotExist)
	assert.Contains(t, err.Error(), missing)
	assert.NotContains(t, err.Error(), "TRACES.md")
}

// loadMooncake reads the shared trace, skipping the test when it is absent.
func loadMooncake(t *testing.T) []request {
	t.Helper()
	if _, err := os.Stat(mooncakeTrace); err != nil {
		t.Skipf("Mooncake trace not found at %s (the shared traces folder is absent)", mooncakeTrace)
	}
	reqs, err := readTraceFile(mooncakeTrace)
	require.NoError(t, err)
	return reqs
}

// synthTrace builds a conversation-shaped trace with chained ids: a few
// system prompts shared by everyone, conversations whose every turn resends
// the history and adds blocks. Ids are numbered by distinct prefix, as the
// Mooncake release numbers them.
func synthTrace(seed uint64, n int) []request {
	rng := rand.New(rand.NewPCG(seed, 0))
	ids := map[string]uint64{}
	chain := func(content []int) []uint64 {
		out := make([]uint64, len(content))
		var key strings.Builder
		for i, c := range content {
			fmt.Fprintf(&key, "%d,", c)
			id, ok := ids[key.String()]
			if !ok {
				id = uint64(len(ids))
				ids[key.String()] = id
			}
			out[i] = id
		}
		return out
	}
	next := 1000 // content symbols of new blocks; system prompts use 0..9
	var convs [][]int
	reqs := make([]request, 0, n)
	for range n {
		if len(convs) == 0 || rng.IntN(4) == 0 {
			sys := rng.IntN(3)
			convs = append(convs, slices.Repeat([]int{sys}, 1+sys)) // system prompt of 1..3 blocks
		}
		c := rng.IntN(len(convs))
		for range 1 + rng.IntN(3) {
			convs[c] = append(convs[c], next)
			next++
		}
		hashIDs := chain(convs[c])
		reqs = append(reqs, request{
			Timestamp:   int64(len(reqs)) * 100,
			InputLength: traceBlockTokens*(len(hashIDs)-1) + 1 + rng.IntN(traceBlockTokens),
			HashIDs:     hashIDs,
		})
	}
	return reqs
}

func unlimitedTokens(reqs []request) int64 {
	return int64(unlimitedBound(reqs).blocks) * traceBlockTokens
}

// With room for every block, kvcache's token-verified prefix tree must
// reuse exactly what the ids say is shared, under every policy: nothing is
// ever evicted.
func TestUnlimitedEqualsDirectCount(t *testing.T) {
	traces := map[string][]request{"synthetic": synthTrace(1, 150)}
	if _, err := os.Stat(mooncakeTrace); err == nil {
		traces["mooncake-first-120"] = loadMooncake(t)[:120]
	}
	for name, reqs := range traces {
		b := unlimitedBound(reqs)
		require.Positive(t, b.blockHits, name)
		var settings []setting
		for _, p := range policyNames {
			settings = append(settings, setting{policy: p, capacityTokens: unlimitedTokens(reqs)})
		}
		rows, err := simulateAll(reqs, settings, testOptions())
		require.NoError(t, err, name)
		for _, res := range rows {
			p := res.Policy
			assert.Equal(t, b.blocks, res.Blocks, "%s %s", name, p)
			assert.Equal(t, b.blockHits, res.BlockHits, "%s %s: block hits", name, p)
			assert.Equal(t, b.blockHits, res.prefixHits, "%s %s: prefix hits", name, p)
			assert.Equal(t, b.tokenHits, res.tokenHits, "%s %s: token hits", name, p)
			assert.Zero(t, res.recomputedBlocks, "%s %s", name, p)
		}
	}
}

// The direct count over the whole trace agrees with what package radix
// measured with its own tree (radix/mooncake_test.go): 105,710 of 288,500
// blocks.
func TestMooncakeDirectCountMatchesRadix(t *testing.T) {
	b := unlimitedBound(loadMooncake(t))
	assert.Equal(t, 12031, b.requests)
	assert.Equal(t, 288500, b.blocks)
	assert.Equal(t, 105710, b.blockHits)
}

func testOptions() simOptions {
	return simOptions{seed: 1, cost: retentionCost(1e-6, 0.03), parallel: 2}
}

// LRU keeps the inclusion property here: a larger GPU holds what a smaller
// one holds, so hits never fall as capacity grows, and stay under the
// unlimited count.
func TestLRUHitsGrowWithCapacity(t *testing.T) {
	reqs := synthTrace(2, 400)
	b := unlimitedBound(reqs)
	caps := []int64{2 << 10, 8 << 10, 32 << 10, 128 << 10, unlimitedTokens(reqs)}
	var settings []setting
	for _, c := range caps {
		settings = append(settings, setting{policy: "lru", capacityTokens: c})
	}
	rows, err := simulateAll(reqs, settings, testOptions())
	require.NoError(t, err)
	for i := 1; i < len(rows); i++ {
		assert.GreaterOrEqual(t, rows[i].BlockHits, rows[i-1].BlockHits, "capacity %d vs %d", caps[i], caps[i-1])
	}
	assert.Less(t, rows[0].BlockHits, rows[len(rows)-1].BlockHits, "a tiny cache must lose something")
	assert.Equal(t, b.blockHits, rows[len(rows)-1].BlockHits)
	for _, r := range rows {
		assert.LessOrEqual(t, r.prefixHits, r.BlockHits)
		assert.LessOrEqual(t, r.BlockHits, b.blockHits)
	}
}

// The trace has no priorities, so the prioritized LRU is LRU; and the
// synthesized tokens and hash seed change nothing.
func TestPLRUIsLRUAndSeedDoesNotMatter(t *testing.T) {
	reqs := synthTrace(3, 200)
	capTokens := int64(16 << 10)
	strip := func(r result) result { r.elapsed = 0; r.Policy = ""; return r }
	lru, err := simulate(reqs, setting{policy: "lru", capacityTokens: capTokens}, testOptions())
	require.NoError(t, err)
	plru, err := simulate(reqs, setting{policy: "plru", capacityTokens: capTokens}, testOptions())
	require.NoError(t, err)
	assert.Equal(t, strip(lru), strip(plru))
	for _, p := range []string{"fifo", "s3fifo", "retention"} {
		opt := testOptions()
		a, err := simulate(reqs, setting{policy: p, capacityTokens: capTokens}, opt)
		require.NoError(t, err)
		opt.seed = 99
		b, err := simulate(reqs, setting{policy: p, capacityTokens: capTokens}, opt)
		require.NoError(t, err)
		assert.Equal(t, strip(a), strip(b), p)
	}
}

// The last block counts at its real length in the token hit ratio, hit or
// not; a request larger than the GPU is all miss.
func TestTokenAccountingAndTooLarge(t *testing.T) {
	reqs := []request{
		{InputLength: 600, HashIDs: []uint64{1, 2}},        // 512 + 88
		{InputLength: 600, HashIDs: []uint64{1, 2}},        // all hit: 600 tokens
		{InputLength: 1100, HashIDs: []uint64{1, 3, 4}},    // block 1 hits: 512 tokens
		{InputLength: 2000, HashIDs: []uint64{9, 8, 7, 6}}, // 4 blocks: larger than the GPU
	}
	res, err := simulate(reqs, setting{policy: "lru", capacityTokens: 3 * traceBlockTokens}, testOptions())
	require.NoError(t, err)
	assert.Equal(t, 4, res.Requests)
	assert.Equal(t, 11, res.Blocks)
	assert.Equal(t, 3, res.BlockHits)
	assert.Equal(t, int64(600+512), res.tokenHits)
	assert.InDelta(t, float64(1112)/4300, res.TokenHitRatio, 1e-12)
	assert.InDelta(t, 3.0/11, res.BlockHitRatio, 1e-12)
	assert.Equal(t, 1, res.tooLarge)

	_, err = simulate(reqs, setting{policy: "lru", capacityTokens: 100}, testOptions())
	require.Error(t, err, "a GPU without one block")
}

func writeTrace(t *testing.T, reqs []request) string {
	t.Helper()
	var buf bytes.Buffer
	for _, r := range reqs {
		require.NoError(t, json.NewEncoder(&buf).Encode(r))
	}
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
	return path
}

// The JSON output has exactly the documented fields, one object per
// (policy, capacity), with ratios that agree with the counts.
func TestRunJSON(t *testing.T) {
	path := writeTrace(t, synthTrace(4, 300))
	svg := filepath.Join(t.TempDir(), "hits.svg")
	var out bytes.Buffer
	require.NoError(t, run([]string{"-trace", path, "-json", "-svg", svg, "-capacity-tokens", "4K,16K,unlimited", "-policy", "lru,s3fifo"}, &out))
	plot, err := os.ReadFile(svg)
	require.NoError(t, err)
	assert.True(t, bytes.HasPrefix(plot, []byte("<svg ")))
	assert.Equal(t, 3, bytes.Count(plot, []byte("<polyline")), "one line per policy and the unlimited bound")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 6)
	want := []string{"block_hit_ratio", "block_hits", "blocks", "capacity_tokens", "max_block_hit_ratio", "policy", "requests", "token_hit_ratio"}
	for i, line := range lines {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m))
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		require.Equal(t, want, keys, line)
		var r result
		require.NoError(t, json.Unmarshal([]byte(line), &r))
		assert.Equal(t, []string{"lru", "s3fifo"}[i/3], r.Policy)
		assert.Equal(t, 300, r.Requests)
		assert.InDelta(t, float64(r.BlockHits)/float64(r.Blocks), r.BlockHitRatio, 1e-12)
		assert.LessOrEqual(t, r.BlockHitRatio, r.MaxBlockHitRatio)
		if i%3 == 2 {
			assert.InDelta(t, r.MaxBlockHitRatio, r.BlockHitRatio, 1e-12, "unlimited reaches the maximum")
		}
	}
}

func TestRunText(t *testing.T) {
	path := writeTrace(t, synthTrace(5, 200))
	var out bytes.Buffer
	require.NoError(t, run([]string{"-trace", path, "-capacity-tokens", "3M,8K", "-policy", "fifo"}, &out))
	s := out.String()
	assert.Contains(t, s, "200 requests")
	assert.Contains(t, s, "Mooncake paper: about 40%")
	assert.Contains(t, s, "at 3M tokens fifo ")
	assert.Regexp(t, `(?m)^\s+fifo\s+8K\s+15\s`, s)
	assert.Contains(t, s, "time: ")
}

func TestBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"-policy", "lfu"},
		{"-capacity-tokens", "3X"},
		{"-capacity-tokens", "100"},
		{"-capacity-tokens", "-5M"},
		{"-capacity-tokens", "NaN"},
		{"-limit", "-1"},
		{"extra"},
	} {
		err := run(args, &bytes.Buffer{})
		assert.ErrorIs(t, err, errUsage, "%q", args)
	}
	for name, text := range map[string]string{
		"not json":     "{",
		"no ids":       `{"input_length": 5, "hash_ids": []}`,
		"too long":     `{"input_length": 1025, "hash_ids": [1, 2]}`,
		"too short":    `{"input_length": 512, "hash_ids": [1, 2]}`,
		"empty":        "\n\n",
		"bad id value": `{"input_length": 5, "hash_ids": [-1]}`,
	} {
		_, err := readTrace(strings.NewReader(text))
		assert.ErrorIs(t, err, errBadTrace, name)
	}
	err := run([]string{"-trace", filepath.Join(t.TempDir(), "missing.jsonl")}, &bytes.Buffer{})
	assert.True(t, errors.Is(err, os.ErrNotExist), "%v", err)
}

func TestParseTokens(t *testing.T) {
	for s, want := range map[string]int64{"3M": 3e6, "1.5m": 15e5, "512": 512, "2K": 2000, "1G": 1e9, "unlimited": 0} {
		got, err := parseTokens(s)
		require.NoError(t, err, s)
		assert.Equal(t, want, got, s)
	}
	assert.Equal(t, "3M", formatTokens(3e6))
	assert.Equal(t, "1500K", formatTokens(15e5))
	assert.Equal(t, "513", formatTokens(513))
}

// FuzzReadTrace: any input either fails with errBadTrace or gives requests
// whose last block holds 1 to 512 tokens.
func FuzzReadTrace(f *testing.F) {
	f.Add(`{"timestamp": 0, "input_length": 600, "hash_ids": [0, 1]}`)
	f.Add("{\"input_length\": 1, \"hash_ids\": [7]}\n\n{\"input_length\": 513, \"hash_ids\": [7, 8]}")
	f.Add(`{"input_length": 0, "hash_ids": [1]}`)
	f.Fuzz(func(t *testing.T, s string) {
		reqs, err := readTrace(strings.NewReader(s))
		if err != nil {
			require.ErrorIs(t, err, errBadTrace)
			return
		}
		for _, r := range reqs {
			require.NotEmpty(t, r.HashIDs)
			require.True(t, r.lastBlockTokens() >= 1 && r.lastBlockTokens() <= traceBlockTokens)
		}
	})
}
