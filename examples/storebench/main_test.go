package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// tiny returns settings that run in a second or two: 64 KiB units,
// batches of 1 and 4, three timed batches per cell.
func tiny(t *testing.T) config {
	cfg := defaults()
	cfg.sizes, cfg.batches = []int{64 << 10}, []int{1, 4}
	cfg.iters = 3
	cfg.dir = t.TempDir()
	cfg.stores = []string{"copy", "mem", "disk"}
	if canEvict {
		cfg.stores = append(cfg.stores, "disk-cold")
	}
	cfg.engine = []string{"disk"}
	cfg.engineUnits, cfg.maxBatch, cfg.parallel = 8, 2, 2
	cfg.redis, cfg.cluster, cfg.tlsAddr = "", "", ""
	return cfg
}

// withRedis adds the standalone Redis of $KVTIER_REDIS_ADDR to cfg, or
// skips the test (fails it under CI=true) when there is none.
func withRedis(t *testing.T, cfg *config) {
	addr := os.Getenv("KVTIER_REDIS_ADDR")
	if addr == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("KVTIER_REDIS_ADDR is empty under CI=true: start Redis with scripts/redis.sh")
		}
		t.Skip("KVTIER_REDIS_ADDR is empty: start Redis with scripts/redis.sh start DIR && . DIR/env")
	}
	cfg.redis = addr
	cfg.stores = append(cfg.stores, "redis")
	cfg.engine = append(cfg.engine, "redis")
	cfg.prefix = fmt.Sprintf("kvtier-storebench-test-%d", time.Now().UnixNano())
	// The TLS server too, when scripts/redis.sh started it (always in CI).
	if cfg.tlsAddr = os.Getenv("KVTIER_REDIS_TLS_ADDR"); cfg.tlsAddr != "" {
		cfg.stores = append(cfg.stores, "redis-tls")
		cfg.engine = append(cfg.engine, "redis-tls")
	} else if os.Getenv("CI") == "true" {
		t.Fatal("KVTIER_REDIS_TLS_ADDR is empty under CI=true: scripts/redis.sh starts a TLS server")
	}
}

func decode(t *testing.T, out []byte) []result {
	var rs []result
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var r result
		require.NoError(t, dec.Decode(&r))
		rs = append(rs, r)
	}
	return rs
}

// check asserts that results hold a store and a load (only a load for
// disk-cold) with positive GB/s for every store and batch, and the
// engine's transfers.
func check(t *testing.T, cfg config, rs []result) {
	t.Helper()
	type key struct {
		store string
		batch int
		op    string
	}
	got := map[key]result{}
	for _, r := range rs {
		require.Equal(t, 64<<10, r.UnitBytes)
		got[key{r.Store, r.Batch, r.Op}] = r
	}
	want := 0
	expect := func(k key) {
		want++
		r, ok := got[k]
		require.True(t, ok, "no result for %+v", k)
		require.Positive(t, r.GBps, "%+v", k)
		require.Positive(t, r.P50Ms, "%+v", k)
		require.GreaterOrEqual(t, r.P99Ms, r.P50Ms, "%+v", k)
		require.Equal(t, cfg.iters, r.Batches, "%+v", k)
	}
	for _, s := range cfg.stores {
		for _, b := range cfg.batches {
			if s != "disk-cold" {
				expect(key{s, b, "store"})
			}
			expect(key{s, b, "load"})
		}
	}
	for _, s := range cfg.engine {
		expect(key{"engine:" + s, cfg.engineUnits, "store"})
		expect(key{"engine:" + s, cfg.engineUnits, "load"})
		require.Equal(t, "2×2", got[key{"engine:" + s, cfg.engineUnits, "load"}].Engine)
	}
	require.Len(t, rs, want)
}

func TestDiskAndMemory(t *testing.T) {
	cfg := tiny(t)
	cfg.json = true
	var out, msg bytes.Buffer
	require.NoError(t, run(context.Background(), &out, &msg, cfg))
	check(t, cfg, decode(t, out.Bytes()))
	left, err := os.ReadDir(cfg.dir)
	require.NoError(t, err)
	require.Empty(t, left, "the temporary directory is removed")
}

func TestTable(t *testing.T) {
	cfg := tiny(t)
	cfg.iters = 2
	var out, msg bytes.Buffer
	require.NoError(t, run(context.Background(), &out, &msg, cfg))
	s := out.String()
	require.Contains(t, s, "| unit | batch | store | store GB/s | load GB/s |")
	for _, row := range []string{"| 64 KiB | 1 | copy | ", "| 64 KiB | 4 | mem | ", "| 64 KiB | 4 | disk | ", "| 64 KiB | 8 (2×2) | engine:disk | "} {
		require.Contains(t, s, row)
	}
	require.Contains(t, s, "- disk loads read files the store has just written")
	require.Contains(t, s, "| 64 KiB | 1 | copy | ", "copy's own ratio")
	require.Contains(t, s, "1.0× | 1.0× |")
	// The skipped stores are said so.
	cfg.stores = []string{"copy", "redis"}
	cfg.engine = nil
	out.Reset()
	msg.Reset()
	require.NoError(t, run(context.Background(), &out, &msg, cfg))
	require.Contains(t, msg.String(), "redis: skipped")
	require.Contains(t, out.String(), "- redis: skipped")
}

func TestRedis(t *testing.T) {
	cfg := tiny(t)
	withRedis(t, &cfg)
	cfg.json = true
	var out, msg bytes.Buffer
	require.NoError(t, run(context.Background(), &out, &msg, cfg))
	check(t, cfg, decode(t, out.Bytes()))
	require.Contains(t, msg.String(), "redis: removed ")
	c := redis.NewClient(&redis.Options{Addr: cfg.redis})
	defer c.Close()
	keys, _, err := c.Scan(context.Background(), 0, cfg.prefix+":*", 10000).Result()
	require.NoError(t, err)
	require.Empty(t, keys, "the keys written are removed")
	if cfg.tlsAddr != "" {
		require.Contains(t, msg.String(), "redis-tls: removed ")
		tc, err := cfg.tlsConfig()
		require.NoError(t, err)
		c := redis.NewClient(&redis.Options{Addr: cfg.tlsAddr, TLSConfig: tc})
		defer c.Close()
		keys, _, err := c.Scan(context.Background(), 0, cfg.prefix+":*", 10000).Result()
		require.NoError(t, err)
		require.Empty(t, keys, "the keys written over TLS are removed")
	}
}

func TestMedian(t *testing.T) {
	cfg := tiny(t)
	cfg.json = true
	cfg.engine = nil
	var files []string
	for i := range 3 {
		var out, msg bytes.Buffer
		require.NoError(t, run(context.Background(), &out, &msg, cfg))
		f := filepath.Join(t.TempDir(), fmt.Sprintf("run%d.jsonl", i))
		require.NoError(t, os.WriteFile(f, out.Bytes(), 0o600))
		files = append(files, f)
	}
	var out bytes.Buffer
	require.NoError(t, medianTable(&out, files))
	s := out.String()
	require.Contains(t, s, "medians of 3 runs")
	require.Contains(t, s, "| 64 KiB | 4 | disk | ")
	require.Equal(t, len(cfg.stores)*len(cfg.batches), strings.Count(s, "\n| 64 KiB"), s)
}

func TestParseSizes(t *testing.T) {
	got, err := parseSizes("1MiB, 2M,64KiB,4096")
	require.NoError(t, err)
	require.Equal(t, []int{1 << 20, 2 << 20, 64 << 10, 4096}, got)
	_, err = parseSizes("1GiB")
	require.Error(t, err)
	_, err = parseInts("1,0")
	require.Error(t, err)
}
