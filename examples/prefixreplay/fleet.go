package main

// The fleet mode (-servers N) answers: with N servers behind a round-robin
// router (request i goes to server i%N), how much more prefix reuse do
// they get when they share a Redis tier than when each has only its own
// GPU and CPU? Both configurations replay the same requests in the same
// order:
//
//   - local: each server is a kvcache.Cache over a GPU and a CPU tier (LRU),
//     whose bytes a tierstore.Engine moves between two memory tiers;
//   - shared-redis: the same, plus a third tier on a redisstore.Store that
//     every server shares, written through (a committed block is published
//     at once), and a tierstore.Lookup before each Acquire that adopts the
//     longest prefix Redis holds.
//
// Every server is a real server loop over real bytes (1 KiB per block):
// Lookup, Acquire, WaitReady, compute what the plan and the failed loads
// say (write bytes derived from the block's chain hash), check the bytes
// of every block it did not compute, Commit, Release. After each request
// the server waits for its transfers (the write-through publish included)
// before the next request is routed: on the trace, requests arrive about
// 300 ms apart, far longer than a publish of a few KiB to Redis takes.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/kvtier/kvtier/internal/jsonlines"
	"github.com/kvtier/kvtier/internal/parallel"
	"github.com/kvtier/kvtier/internal/progress"
	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/layout"
	"github.com/kvtier/kvtier/tierstore"
	"github.com/kvtier/kvtier/tierstore/redisstore"
	"github.com/redis/go-redis/v9"
)

// The configurations of the fleet mode.
const (
	configLocal  = "local"
	configShared = "shared-redis"
	// configPrivate gives each server a Redis tier of its own (its own
	// key prefix): the same capacity as shared-redis without the
	// sharing, the control that tells the two apart.
	configPrivate = "private-redis"
)

// redisTier is the tier of the shared store, below the GPU and the CPU.
const redisTier kvcache.Tier = 3

// Timeouts of one request's calls: the membership query, and the wait for
// its loads (the engine bounds each Store call by 5 s already).
const (
	lookupTimeout = time.Second
	readyTimeout  = 30 * time.Second
	drainTimeout  = 30 * time.Second
)

// redisKeyTTL makes Redis forget the run's keys on its own if the run dies
// before deleting them; it is far longer than a run.
const redisKeyTTL = time.Hour

// fleetSetup is what every server of a configuration shares.
type fleetSetup struct {
	config                 string
	servers                int
	gpuUnits, cpuUnits     int64
	redisUnits             int64 // 0: no shared tier
	redisAddr, redisPrefix string
	private                bool // each server its own prefix: redisPrefix-p<id>
	seed                   uint64
	layout                 *layout.Layout // one unit per block
	fingerprint            uint64
}

// fleetRow is one row of the fleet report: one server of a configuration,
// or their total (Server "total"). The exported fields are the JSON row.
type fleetRow struct {
	Config   string `json:"config"`
	Server   string `json:"server"`
	Requests int    `json:"requests"`
	// PromptTokens counts the requests' input tokens; ReusedTokens those
	// of blocks the server did not compute (found on its GPU, loaded from
	// its CPU or from Redis), the last block of a request at its real
	// length, as in the token hit ratio; PrefixTokens those before a
	// request's first computed block.
	PromptTokens     int64   `json:"prompt_tokens"`
	ReusedTokens     int64   `json:"reused_tokens"`
	TokenHitRatio    float64 `json:"token_hit_ratio"`
	PrefixTokens     int64   `json:"prefix_tokens"`
	PrefixHitRatio   float64 `json:"prefix_hit_ratio"`
	MaxTokenHitRatio float64 `json:"max_token_hit_ratio"`
	// ComputedTokens = PromptTokens - ReusedTokens: what the servers
	// computed. RecomputedTokens is the part of it that had been cached
	// once: Stats.RecomputedTokens (blocks whose unit was dropped) plus
	// the blocks whose load failed (WaitReady's ranges).
	ComputedTokens   int64 `json:"computed_tokens"`
	RecomputedTokens int64 `json:"recomputed_tokens"`
	// CPULoads and RedisLoads count units loaded to the GPU from the CPU
	// tier and from Redis (TierStats.Hits of tiers 2 and 3); AdoptedUnits
	// the units Lookup adopted from Redis (TierStats.Adopted).
	CPULoads     uint64 `json:"cpu_loads"`
	RedisLoads   uint64 `json:"redis_loads"`
	AdoptedUnits uint64 `json:"adopted_units"`
	// FailedLoads counts units whose transfer to the GPU failed (the GPU's
	// TierStats.Failed), MissingLoads and CorruptLoads those of failed
	// loads from Redis that it reported missing or corrupt.
	FailedLoads  uint64 `json:"failed_loads"`
	MissingLoads uint64 `json:"missing_loads"`
	CorruptLoads uint64 `json:"corrupt_loads"`
	// ByteMismatches counts blocks the server did not compute whose bytes
	// were not the block's after WaitReady: served wrong. Must be 0.
	ByteMismatches int `json:"byte_mismatches"`
	// LookupErrors counts failed membership queries, StoreErrors failed
	// Store calls of the engine (loads and writes).
	LookupErrors int    `json:"lookup_errors"`
	StoreErrors  uint64 `json:"store_errors"`
	// TooLarge counts requests with more blocks than the GPU holds: all
	// miss, the cache unchanged.
	TooLarge int `json:"too_large"`

	elapsed time.Duration
}

// add adds o's counts to r.
func (r *fleetRow) add(o fleetRow) {
	r.Requests += o.Requests
	r.PromptTokens += o.PromptTokens
	r.ReusedTokens += o.ReusedTokens
	r.PrefixTokens += o.PrefixTokens
	r.ComputedTokens += o.ComputedTokens
	r.RecomputedTokens += o.RecomputedTokens
	r.CPULoads += o.CPULoads
	r.RedisLoads += o.RedisLoads
	r.AdoptedUnits += o.AdoptedUnits
	r.FailedLoads += o.FailedLoads
	r.MissingLoads += o.MissingLoads
	r.CorruptLoads += o.CorruptLoads
	r.ByteMismatches += o.ByteMismatches
	r.LookupErrors += o.LookupErrors
	r.StoreErrors += o.StoreErrors
	r.TooLarge += o.TooLarge
	r.elapsed = max(r.elapsed, o.elapsed)
}

// finish sets the ratios.
func (r *fleetRow) finish(maxRatio float64) {
	r.TokenHitRatio = ratio(r.ReusedTokens, r.PromptTokens)
	r.PrefixHitRatio = ratio(r.PrefixTokens, r.PromptTokens)
	r.MaxTokenHitRatio = maxRatio
}

// fleetServer is one server: its cache, its memory tiers, its engine and,
// in the shared configuration, its own client of the shared Redis.
type fleetServer struct {
	cache  *kvcache.Cache
	engine *tierstore.Engine
	mem    *kvcache.MemoryStore
	store  *redisstore.Store // nil: local
	row    fleetRow
	redo   int64 // tokens of failed loads, recomputed

	keys     []kvcache.UnitKey
	table    []int32
	want     []byte
	computed []bool
}

func newFleetServer(s fleetSetup, id int) (*fleetServer, error) {
	tiers := []kvcache.TierConfig{
		{Name: "GPU", Capacity: kvcache.Capacity{Units: s.gpuUnits}},
		{Name: "CPU", Capacity: kvcache.Capacity{Units: s.cpuUnits}},
	}
	mem, err := kvcache.NewMemoryStore(s.layout, tiers)
	if err != nil {
		return nil, err
	}
	srv := &fleetServer{mem: mem, row: fleetRow{Config: s.config, Server: strconv.Itoa(id)}}
	stores := map[kvcache.Tier]tierstore.Store{}
	if s.redisUnits > 0 {
		prefix := s.redisPrefix
		if s.private {
			prefix = privatePrefix(s.redisPrefix, id)
		}
		srv.store, err = redisstore.Open(redisstore.Options{Addrs: []string{s.redisAddr}, Prefix: prefix,
			Fingerprint: s.fingerprint, TTL: redisKeyTTL})
		if err != nil {
			return nil, err
		}
		stores[redisTier] = srv.store
		tiers = append(tiers, kvcache.TierConfig{Name: "redis", Capacity: kvcache.Capacity{Units: s.redisUnits}, WriteThrough: true})
	}
	srv.engine, err = tierstore.NewEngine(tierstore.EngineConfig{Memory: mem, Stores: stores})
	if err != nil {
		srv.close()
		return nil, err
	}
	srv.cache, err = kvcache.New(kvcache.Config{Layout: s.layout, Tiers: tiers, Engine: srv.engine, HashSeed: s.seed})
	if err != nil {
		srv.close()
		return nil, err
	}
	srv.want = make([]byte, s.layout.BlockBytes())
	return srv, nil
}

// close stops the engine (after the last transfer) and the Redis client.
func (s *fleetServer) close() {
	if s.engine != nil {
		s.engine.Close()
	}
	if s.store != nil {
		_ = s.store.Close()
	}
}

// blockContent writes into dst what any server computes for the block
// with chain hash h: bytes that differ between blocks and within one.
func blockContent(dst []byte, h uint64) {
	for o := range dst {
		dst[o] = byte(h>>(8*(o%8))) ^ byte(o/8*7)
	}
}

// serve runs request r, whose prompt is tokens, as a server would (see
// the file's comment), and counts it.
func (s *fleetServer) serve(r request, tokens []uint32) error {
	ctx := context.Background()
	c := s.cache
	req := kvcache.Request{Tokens: tokens}
	n := len(r.HashIDs)
	s.row.Requests++
	s.row.PromptTokens += int64(r.InputLength)
	if s.store != nil {
		lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
		if _, err := tierstore.Lookup(lctx, s.store, c, req, redisTier); err != nil {
			// The request is served anyway, from the other tiers.
			s.row.LookupErrors++
		}
		cancel()
	}
	plan, err := c.Acquire(req)
	if errors.Is(err, kvcache.ErrNoSpace) {
		// Units in flight are not evictable: wait for them, retry.
		if err := s.drain(); err != nil {
			return err
		}
		plan, err = c.Acquire(req)
	}
	if errors.Is(err, kvcache.ErrNoSpace) {
		s.row.TooLarge++
		s.row.ComputedTokens += int64(r.InputLength)
		return nil
	}
	if err != nil {
		return err
	}
	s.computed = append(s.computed[:0], make([]bool, n)...)
	mark := func(rg kvcache.TokenRange) int {
		newly := 0
		for i := rg.Start / traceBlockTokens; i < (rg.End+traceBlockTokens-1)/traceBlockTokens; i++ {
			if !s.computed[i] {
				s.computed[i] = true
				newly++
			}
		}
		return newly
	}
	for _, rg := range plan.Compute {
		mark(rg)
	}
	// Nothing is written before the sequence is ready: a fresh slot may
	// still be read by its victim's move down.
	wctx, cancel := context.WithTimeout(ctx, readyTimeout)
	redo, err := c.WaitReady(wctx, plan.Seq, -1)
	cancel()
	if err != nil {
		return err
	}
	for _, rg := range redo {
		s.redo += int64(mark(rg)) * traceBlockTokens
	}
	if s.keys, err = c.UnitKeys(s.keys[:0], req); err != nil {
		return err
	}
	if s.table, err = c.BlockTable(s.table[:0], plan.Seq, 0); err != nil {
		return err
	}
	pool := c.SlicePool(0)
	prefix := true
	for i := range n {
		blockContent(s.want, s.keys[i].Hash)
		buf := s.mem.Bytes(kvcache.GPU, pool, s.table[i])
		tokens := int64(traceBlockTokens)
		if i == n-1 {
			tokens = int64(r.lastBlockTokens())
		}
		if s.computed[i] {
			prefix = false
			copy(buf, s.want)
			s.row.ComputedTokens += tokens
			continue
		}
		if !bytes.Equal(buf, s.want) {
			s.row.ByteMismatches++
		}
		s.row.ReusedTokens += tokens
		if prefix {
			s.row.PrefixTokens += tokens
		}
	}
	if err := c.Commit(plan.Seq, plan.Tokens); err != nil {
		return err
	}
	if err := c.Release(plan.Seq); err != nil {
		return err
	}
	// The request is done, its blocks published: the next one arrives.
	return s.drain()
}

// drain waits until the server has no transfer in flight.
func (s *fleetServer) drain() error {
	deadline := time.Now().Add(drainTimeout)
	for {
		if _, err := s.cache.Poll(); err != nil {
			return err
		}
		if s.cache.Stats().Transfers == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("transfers still in flight after %v", drainTimeout)
		}
		select {
		case <-s.cache.Completed():
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// finish fills the row's counts that the cache and the engine keep.
func (s *fleetServer) finish() {
	st := s.cache.Stats()
	s.row.RecomputedTokens = st.RecomputedTokens + s.redo
	s.row.CPULoads = st.Tier(kvcache.CPU).Hits
	s.row.RedisLoads = st.Tier(redisTier).Hits
	s.row.AdoptedUnits = st.Tier(redisTier).Adopted
	s.row.FailedLoads = st.Tier(kvcache.GPU).Failed
	s.row.MissingLoads = st.Tier(redisTier).Missing
	s.row.CorruptLoads = st.Tier(redisTier).Corrupt
	_, s.row.StoreErrors = s.engine.StoreCalls()
}

// replayFleet replays reqs through the servers of setup, request i on
// server i%servers, and returns one row per server and their total.
func replayFleet(reqs []request, setup fleetSetup, maxRatio float64) ([]fleetRow, error) {
	start := time.Now()
	servers := make([]*fleetServer, setup.servers)
	defer func() {
		for _, s := range servers {
			if s != nil {
				s.close()
			}
		}
	}()
	for i := range servers {
		s, err := newFleetServer(setup, i)
		if err != nil {
			return nil, err
		}
		servers[i] = s
	}
	var tokens []uint32
	for i, r := range reqs {
		tokens = promptTokens(tokens, r, setup.seed)
		if err := servers[i%len(servers)].serve(r, tokens); err != nil {
			return nil, fmt.Errorf("request %d on server %d: %w", i, i%len(servers), err)
		}
	}
	total := fleetRow{Config: setup.config, Server: "total"}
	rows := make([]fleetRow, 0, len(servers)+1)
	elapsed := time.Since(start)
	for _, s := range servers {
		s.finish()
		s.row.elapsed = elapsed
		s.row.finish(maxRatio)
		total.add(s.row)
		rows = append(rows, s.row)
	}
	total.finish(maxRatio)
	return append(rows, total), nil
}

// redisClient returns a plain client of the Redis at addr, for the run's
// housekeeping (PING, deleting its keys).
func redisClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 2 * time.Second, MaxRetries: -1})
}

// privatePrefix is the key prefix of server id in the private-redis
// configuration.
func privatePrefix(shared string, id int) string { return shared + "-p" + strconv.Itoa(id) }

// deleteKeys deletes every key of the run (prefix:*) with SCAN and DEL,
// never FLUSHDB: the server may be shared. It returns how many it deleted.
func deleteKeys(ctx context.Context, c *redis.Client, prefix string) (int, error) {
	deleted := 0
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, prefix+":*", 1000).Result()
		if err != nil {
			return deleted, err
		}
		if len(keys) > 0 {
			n, err := c.Del(ctx, keys...).Result()
			if err != nil {
				return deleted, err
			}
			deleted += int(n)
		}
		if cursor = next; cursor == 0 {
			return deleted, nil
		}
	}
}

// fleetReport is what the fleet mode prints.
type fleetReport struct {
	trace             string
	requests, total   int
	bound             bound
	servers           int
	gpu, cpu, redis   int64 // units per server
	gpuTokens         int64 // as the flags give them (0: unlimited)
	cpuTokens         int64
	redisTokens       int64
	unitBytes         int64
	redisAddr, prefix string
	prefixes          []string // every key prefix of the run
	keysDeleted       int
	rows              []fleetRow
	configs           []string
	elapsed           time.Duration
	parallel          int
}

// runFleet runs the fleet mode: the local configuration and, when a Redis
// address is known, the shared-redis one.
func runFleet(o options, reqs []request, total int, stdout, stderr io.Writer) error {
	b := unlimitedBound(reqs)
	unlimited := int64(b.blocks) * traceBlockTokens
	resolve := func(t int64) int64 {
		if t == 0 {
			t = unlimited
		}
		return t / traceBlockTokens
	}
	l, err := layout.New(tokenModel(), layout.AllLayers, traceBlockTokens)
	if err != nil {
		return err
	}
	base := fleetSetup{
		servers: o.servers, gpuUnits: resolve(o.gpuTokens), cpuUnits: resolve(o.cpuTokens),
		seed: o.seed, layout: l, fingerprint: tierstore.Fingerprint("prefixreplay/"+tokenModel().Name, l, o.seed),
	}
	rep := fleetReport{trace: o.trace, requests: len(reqs), total: total, bound: b, servers: o.servers,
		gpu: base.gpuUnits, cpu: base.cpuUnits, unitBytes: l.BlockBytes(),
		gpuTokens: o.gpuTokens, cpuTokens: o.cpuTokens, redisTokens: o.redisToks}
	local := base
	local.config = configLocal
	setups := []fleetSetup{local}
	var client *redis.Client
	cleaned := false
	if o.redisAddr == "" {
		fmt.Fprintln(stderr, "prefixreplay: no Redis (-redis empty and KVTIER_REDIS_ADDR unset): skipping the shared-redis configuration; "+
			"start one with: scripts/redis.sh start /tmp/pr-redis && . /tmp/pr-redis/env (stop it with scripts/redis.sh stop /tmp/pr-redis)")
	} else {
		client = redisClient(o.redisAddr)
		defer client.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		err := client.Ping(ctx).Err()
		cancel()
		if err != nil {
			return fmt.Errorf("redis at %s: %w", o.redisAddr, err)
		}
		var nonce [6]byte
		_, _ = rand.Read(nonce[:])
		shared := base
		shared.config = configShared
		shared.redisUnits = resolve(o.redisToks)
		shared.redisAddr = o.redisAddr
		shared.redisPrefix = "kvt-prefixreplay-" + hex.EncodeToString(nonce[:])
		private := shared
		private.config, private.private = configPrivate, true
		setups = append(setups, shared, private)
		rep.redis, rep.redisAddr, rep.prefix = shared.redisUnits, o.redisAddr, shared.redisPrefix
		prefixes := []string{shared.redisPrefix}
		for id := range o.servers {
			prefixes = append(prefixes, privatePrefix(shared.redisPrefix, id))
		}
		rep.prefixes = prefixes
		// Whatever fails, the run's keys go.
		defer func() {
			if cleaned {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for _, p := range prefixes {
				if _, err := deleteKeys(ctx, client, p); err != nil {
					fmt.Fprintf(stderr, "prefixreplay: deleting the run's keys %s:* from %s: %v\n", p, o.redisAddr, err)
				}
			}
		}()
	}
	par := o.parallel
	if par < 1 {
		par = min(len(setups), 2)
	}
	maxRatio := ratio(b.tokenHits, b.tokens)
	start := time.Now()
	prog := progress.New(stderr, "prefixreplay", len(setups))
	results, err := parallel.Map(setups, par, func(s fleetSetup) ([]fleetRow, error) {
		rows, err := replayFleet(reqs, s, maxRatio)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.config, err)
		}
		prog.Done(fmt.Sprintf("%s, %d servers", s.config, s.servers))
		return rows, nil
	})
	if err != nil {
		return err
	}
	rep.elapsed = time.Since(start)
	rep.parallel = min(par, len(setups))
	for i, rows := range results {
		rep.rows = append(rep.rows, rows...)
		rep.configs = append(rep.configs, setups[i].config)
	}
	if client != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, p := range rep.prefixes {
			n, err := deleteKeys(ctx, client, p)
			if err != nil {
				return fmt.Errorf("deleting the run's keys %s:* from %s: %w", p, o.redisAddr, err)
			}
			rep.keysDeleted += n
		}
		cleaned = true
	}
	if o.json {
		return jsonlines.Write(stdout, rep.rows)
	}
	return rep.writeText(stdout)
}
