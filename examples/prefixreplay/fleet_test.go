package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// redisAddr returns the Redis the fleet tests share, skipping the test
// when KVTIER_REDIS_ADDR is not set (and failing it in CI, where .ci/run
// starts Redis).
func redisAddr(t *testing.T) string {
	t.Helper()
	addr := os.Getenv("KVTIER_REDIS_ADDR")
	if addr == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("KVTIER_REDIS_ADDR is not set: in CI, .ci/run starts Redis with scripts/redis.sh")
		}
		t.Skip("KVTIER_REDIS_ADDR is not set: start Redis with scripts/redis.sh start DIR and source DIR/env")
	}
	return addr
}

// fleetArgs is the short fleet run of the tests: the first 300 Mooncake
// requests, a GPU that holds the longest of them.
func fleetArgs(extra ...string) []string {
	return append([]string{"-trace", mooncakeTrace, "-servers", "2", "-limit", "300", "-gpu-tokens", "200K", "-cpu-tokens", "100K"}, extra...)
}

func parseFleetRows(t *testing.T, out []byte) []fleetRow {
	t.Helper()
	var rows []fleetRow
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r fleetRow
		require.NoError(t, json.Unmarshal([]byte(line), &r), line)
		rows = append(rows, r)
	}
	return rows
}

// Two servers behind a round-robin router reuse strictly more when they
// share a Redis tier, every byte loaded is the block's, and with an
// unlimited Redis the fleet reuses exactly what one unlimited cache would.
func TestFleetSharedRedisReusesMore(t *testing.T) {
	reqs := loadMooncake(t)[:300]
	addr := redisAddr(t)
	var out, errOut bytes.Buffer
	require.NoError(t, runTo(fleetArgs("-redis", addr, "-json"), &out, &errOut))
	rows := parseFleetRows(t, out.Bytes())
	require.Len(t, rows, 9, "two servers and their total, per configuration")
	b := unlimitedBound(reqs)
	totals := map[string]fleetRow{}
	for i, r := range rows {
		assert.Equal(t, []string{configLocal, configShared, configPrivate}[i/3], r.Config)
		assert.Equal(t, []string{"0", "1", "total"}[i%3], r.Server)
		assert.Zero(t, r.ByteMismatches, "%s %s: bytes served wrong", r.Config, r.Server)
		assert.Zero(t, r.FailedLoads+r.MissingLoads+r.CorruptLoads, "%s %s: failed loads", r.Config, r.Server)
		assert.Zero(t, r.TooLarge, "%s %s", r.Config, r.Server)
		assert.Equal(t, r.PromptTokens, r.ReusedTokens+r.ComputedTokens, "%s %s", r.Config, r.Server)
		assert.LessOrEqual(t, r.ReusedTokens, b.tokenHits, "%s %s: above the unlimited bound", r.Config, r.Server)
		if r.Server == "total" {
			totals[r.Config] = r
		}
	}
	local, shared := totals[configLocal], totals[configShared]
	assert.Equal(t, 300, local.Requests)
	assert.Equal(t, b.tokens, local.PromptTokens)
	assert.Equal(t, b.tokens, shared.PromptTokens)
	assert.Greater(t, shared.ReusedTokens, local.ReusedTokens, "the shared tier must add reuse")
	private := totals[configPrivate]
	assert.Less(t, private.AdoptedUnits, shared.AdoptedUnits, "a private tier adopts only what its own server wrote")
	assert.GreaterOrEqual(t, private.ReusedTokens, local.ReusedTokens, "a private tier adds capacity")
	assert.Greater(t, shared.ReusedTokens, private.ReusedTokens, "sharing adds reuse beyond capacity")
	assert.Zero(t, local.RedisLoads+local.AdoptedUnits)
	assert.Positive(t, shared.AdoptedUnits, "a server adopted what the other published")
	assert.Positive(t, shared.RedisLoads)
	if shared.LookupErrors == 0 && shared.StoreErrors == 0 {
		// Every committed block is published before the next request and
		// Redis forgets nothing: what any earlier request computed is found.
		assert.Equal(t, b.tokenHits, shared.ReusedTokens, "shared fleet vs unlimited single cache")
	}

	// The text report, and the run's keys are gone afterwards.
	out.Reset()
	require.NoError(t, runTo(fleetArgs("-redis", addr), &out, &errOut))
	s := out.String()
	assert.Regexp(t, `(?m)^\s+shared-redis\s+total\s+300\s`, s)
	assert.Contains(t, s, "shared-redis reuses ")
	m := regexp.MustCompile(`keys (kvt-prefixreplay-[0-9a-f]+):\*`).FindStringSubmatch(s)
	require.NotNil(t, m, s)
	assert.Regexp(t, `redis: [1-9][0-9]* keys of the run deleted`, s)
	c := redisClient(addr)
	defer c.Close()
	var left []string
	iter := c.Scan(context.Background(), 0, m[1]+":*", 1000).Iterator()
	for iter.Next(context.Background()) {
		left = append(left, iter.Val())
	}
	require.NoError(t, iter.Err())
	assert.Empty(t, left, "keys of the run left in Redis")
	// Standard error holds the progress lines of the two runs, nothing else.
	assert.Regexp(t, `^(prefixreplay: [a-z-]+, 2 servers done \([1-3]/3, [0-9hms]+\)\n){6}$`, errOut.String())
}

// Without Redis the shared configuration is skipped with a note saying
// how to start one; the local one still runs.
func TestFleetWithoutRedis(t *testing.T) {
	path := writeTrace(t, synthTrace(6, 200))
	var out, errOut bytes.Buffer
	require.NoError(t, runTo([]string{"-trace", path, "-servers", "2", "-redis", "", "-gpu-tokens", "8K", "-cpu-tokens", "8K", "-json"}, &out, &errOut))
	rows := parseFleetRows(t, out.Bytes())
	require.Len(t, rows, 3)
	for _, r := range rows {
		assert.Equal(t, configLocal, r.Config)
		assert.Zero(t, r.ByteMismatches)
	}
	assert.Equal(t, 200, rows[2].Requests)
	assert.Positive(t, rows[2].ReusedTokens)
	assert.Positive(t, rows[2].CPULoads, "blocks evicted to the CPU come back")
	assert.Contains(t, errOut.String(), "skipping the shared-redis configuration")
	assert.Contains(t, errOut.String(), "scripts/redis.sh start")

	out.Reset()
	require.NoError(t, runTo([]string{"-trace", path, "-servers", "2", "-redis", ""}, &out, &bytes.Buffer{}))
	assert.Contains(t, out.String(), "shared-redis: skipped")
	assert.Regexp(t, `(?m)^\s+local\s+total\s+200\s`, out.String())
}

// A Redis given but not answering is an error, not a silent skip.
func TestFleetRedisDown(t *testing.T) {
	path := writeTrace(t, synthTrace(7, 20))
	err := runTo([]string{"-trace", path, "-servers", "2", "-redis", "127.0.0.1:1"}, &bytes.Buffer{}, &bytes.Buffer{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "redis at 127.0.0.1:1")
}

func TestFleetBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-servers", "-1"},
		{"-servers", "2", "-policy", "fifo"},
		{"-servers", "2", "-capacity-tokens", "3M"},
		{"-servers", "2", "-svg", "x.svg"},
		{"-servers", "2", "-gpu-tokens", "100"},
		{"-gpu-tokens", "1M"},
		{"-redis", "127.0.0.1:6379"},
	} {
		err := run(args, &bytes.Buffer{})
		assert.ErrorIs(t, err, errUsage, "%q", args)
	}
}
