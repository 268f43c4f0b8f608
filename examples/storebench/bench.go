package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/kvtier/kvtier/internal/progress"
	"github.com/kvtier/kvtier/internal/tlsfiles"
	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/layout"
	"github.com/kvtier/kvtier/radix"
	"github.com/kvtier/kvtier/tierstore"
	"github.com/kvtier/kvtier/tierstore/diskstore"
	"github.com/kvtier/kvtier/tierstore/redisstore"
	"github.com/redis/go-redis/v9"
)

// result is one measured cell and operation (a JSON line).
type result struct {
	Store     string `json:"store"`
	UnitBytes int    `json:"unit_bytes"`
	// Batch is the units per Store call, or per Engine transfer.
	Batch int `json:"batch"`
	// Op is "store" (Put) or "load" (Get).
	Op      string  `json:"op"`
	Batches int     `json:"batches"`
	GBps    float64 `json:"gb_per_s"`
	P50Ms   float64 `json:"p50_ms"`
	P99Ms   float64 `json:"p99_ms"`
	// Engine is "MaxBatch×Parallel" for a transfer through tierstore.Engine.
	Engine string `json:"engine,omitempty"`
}

// target is one store under measurement.
type target struct {
	name string
	put  func(ctx context.Context, keys []kvcache.UnitKey, vals [][]byte) error
	get  func(ctx context.Context, keys []kvcache.UnitKey, dst [][]byte) error
	// store is the tierstore.Store behind put and get (nil for copy).
	store tierstore.Store
	// loadOnly: put only writes the units (not timed).
	loadOnly bool
	// beforeGet runs, untimed, before every load.
	beforeGet func() error
}

// bench is one run.
type bench struct {
	ctx     context.Context
	cfg     config
	msg     io.Writer
	tmp     string // the disk store's temporary directory
	prefix  string // of every Redis key written
	skipped []string
	redis   map[string]redis.UniversalClient // by store, for the cleanup
	rng     *mrand.Rand
}

func newBench(ctx context.Context, cfg config, msg io.Writer) (*bench, error) {
	if cfg.engineUnits <= 0 || cfg.maxBatch <= 0 || cfg.parallel <= 0 || cfg.minIters <= 0 {
		return nil, fmt.Errorf("-engine-units %d, -max-batch %d, -parallel %d and -min-iters %d must be positive", cfg.engineUnits, cfg.maxBatch, cfg.parallel, cfg.minIters)
	}
	known := []string{"copy", "mem", "disk", "disk-cold", "redis", "cluster", "redis-tls"}
	for _, s := range cfg.stores {
		if !slices.Contains(known, s) {
			return nil, fmt.Errorf("unknown store %q (want some of %s)", s, strings.Join(known, ","))
		}
	}
	for _, s := range cfg.engine {
		if !slices.Contains(known[1:], s) || s == "disk-cold" {
			return nil, fmt.Errorf("unknown engine store %q (want some of mem,disk,redis,cluster,redis-tls)", s)
		}
	}
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	b := &bench{ctx: ctx, cfg: cfg, msg: msg, redis: map[string]redis.UniversalClient{}, rng: mrand.New(mrand.NewPCG(cfg.seed, 0x5eed)),
		prefix: cfg.prefix}
	if b.prefix == "" {
		b.prefix = "kvtier-storebench-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(nonce[:])
	}
	if b.wants("disk") || b.wants("disk-cold") || slices.Contains(cfg.engine, "disk") {
		tmp, err := os.MkdirTemp(cfg.dir, "storebench-")
		if err != nil {
			return nil, err
		}
		b.tmp = tmp
	}
	if b.wants("disk-cold") && !cfg.cold {
		b.skip("disk-cold: off (-cold=false)")
	} else if b.wants("disk-cold") && !canEvict {
		b.skip("disk-cold: evicting files from the page cache is implemented on linux/amd64 and linux/arm64 only")
	}
	if b.wants("redis") && cfg.redis == "" {
		b.skip("redis: skipped, no -redis and $KVTIER_REDIS_ADDR is empty")
	}
	if b.wants("cluster") && cfg.cluster == "" {
		b.skip("cluster: skipped, no -cluster and $KVTIER_REDIS_CLUSTER_ADDRS is empty")
	}
	if b.wants("redis-tls") && cfg.tlsAddr == "" {
		b.skip("redis-tls: skipped, no -redis-tls and $KVTIER_REDIS_TLS_ADDR is empty")
	}
	return b, nil
}

func (b *bench) wants(store string) bool { return slices.Contains(b.cfg.stores, store) }

func (b *bench) skip(m string) {
	b.skipped = append(b.skipped, m)
	fmt.Fprintln(b.msg, "storebench:", m)
}

// enabled reports whether store runs: wanted and not skipped.
func (b *bench) enabled(store string) bool {
	switch store {
	case "disk-cold":
		return b.wants(store) && b.cfg.cold && canEvict
	case "redis":
		return b.wants(store) && b.cfg.redis != ""
	case "cluster":
		return b.wants(store) && b.cfg.cluster != ""
	case "redis-tls":
		return b.wants(store) && b.cfg.tlsAddr != ""
	}
	return b.wants(store)
}

// close removes the Redis keys and the directory the run wrote.
func (b *bench) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, name := range []string{"redis", "cluster", "redis-tls"} {
		c := b.redis[name]
		if c == nil {
			continue
		}
		n, err := deletePrefix(ctx, c, b.prefix+":*")
		if err != nil {
			fmt.Fprintf(b.msg, "storebench: %s: removing the keys %s:*: %v\n", name, b.prefix, err)
		} else {
			fmt.Fprintf(b.msg, "storebench: %s: removed %d keys %s:*\n", name, n, b.prefix)
		}
		_ = c.Close()
	}
	if b.tmp != "" {
		if err := os.RemoveAll(b.tmp); err != nil {
			fmt.Fprintln(b.msg, "storebench:", err)
		}
	}
}

// tlsConfig returns the client configuration for the TLS server: its CA
// trusted, the client certificate shown.
func (c config) tlsConfig() (*tls.Config, error) {
	cfg, err := tlsfiles.Config(c.tlsCA, c.tlsCert, c.tlsKey)
	if err != nil {
		return nil, fmt.Errorf("redis-tls ($KVTIER_REDIS_TLS_CA, _CERT, _KEY): %w", err)
	}
	return cfg, nil
}

// deletePrefix removes the keys matching pattern, on every master of a
// cluster: SCAN and UNLINK, one key per command (a cluster refuses a
// command over keys of several slots).
func deletePrefix(ctx context.Context, c redis.UniversalClient, pattern string) (int, error) {
	del := func(ctx context.Context, c *redis.Client) (int, error) {
		n := 0
		var cursor uint64
		for {
			keys, next, err := c.Scan(ctx, cursor, pattern, 1000).Result()
			if err != nil {
				return n, err
			}
			if len(keys) > 0 {
				_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
					for _, k := range keys {
						p.Unlink(ctx, k)
					}
					return nil
				})
				if err != nil {
					return n, err
				}
				n += len(keys)
			}
			if cursor = next; cursor == 0 {
				return n, nil
			}
		}
	}
	switch c := c.(type) {
	case *redis.ClusterClient:
		var total atomic.Int64
		err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			n, err := del(ctx, m)
			total.Add(int64(n))
			return err
		})
		return int(total.Load()), err
	case *redis.Client:
		return del(ctx, c)
	}
	return 0, fmt.Errorf("unexpected client %T", c)
}

// tokensFor returns the tokens in the header of a unit of size bytes.
func (b *bench) tokensFor(size int) int {
	if b.cfg.tokens > 0 {
		return b.cfg.tokens
	}
	return min(max(size/4096, 16), 512)
}

// layoutFor returns a layout whose units are size bytes: a Llama-3-8B-like
// model (32 layers, 8 KV heads of 128 dims, bf16) cut per layer into
// blocks of size/4096 tokens.
func layoutFor(size int) (*layout.Layout, error) {
	m := layout.Model{Name: "storebench-8b", Layers: 32, QueryHeads: 32, KVHeads: 8, HeadDim: 128, ElemBytes: 2}
	if size%4096 != 0 {
		return nil, fmt.Errorf("unit of %d bytes: not a multiple of 4096 (one token of one layer)", size)
	}
	return layout.New(m, layout.PagedLayer, size/4096)
}

// makeKeys returns n keys of consecutive blocks of one sequence, one
// layer's unit each, with tokens tokens in each header.
func (b *bench) makeKeys(n, tokens int) []kvcache.UnitKey {
	keys := make([]kvcache.UnitKey, n)
	var parent uint64
	for i := range keys {
		toks := make([]uint32, tokens)
		for j := range toks {
			toks[j] = uint32(b.rng.IntN(128256)) // Llama-3's vocabulary
		}
		h := b.rng.Uint64()
		keys[i] = kvcache.UnitKey{Shared: true, Unit: kvcache.UnitID(i), Hash: h, Parent: parent, HasParent: i > 0,
			Depth: i + 1, Slice: i % 32, Keys: radix.Keys{Namespace: "storebench"}, Tokens: toks}
		parent = h
	}
	return keys
}

// buffers returns n buffers of size random (or zero) bytes.
func (b *bench) buffers(n, size int, random bool) [][]byte {
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, size)
		if random {
			for j := 0; j+8 <= size; j += 8 {
				binary.LittleEndian.PutUint64(bufs[i][j:], b.rng.Uint64())
			}
		}
	}
	return bufs
}

// runAll measures every cell, calling emit with each result, and writes a
// progress line to b.msg after each unit size and batch size (and after
// each unit size's engine transfers).
func (b *bench) runAll(emit func(result)) error {
	maxBatch := slices.Max(b.cfg.batches)
	phases := len(b.cfg.batches)
	if len(b.cfg.engine) > 0 {
		phases++
	}
	prog := progress.New(b.msg, "storebench", len(b.cfg.sizes)*phases)
	for _, size := range b.cfg.sizes {
		fp := uint64(size) * 0x9e3779b97f4a7c15
		if l, err := layoutFor(size); err == nil {
			fp = tierstore.Fingerprint("storebench-8b", l, b.cfg.seed)
		}
		tokens := b.tokensFor(size)
		keys := b.makeKeys(maxBatch, tokens)
		src := b.buffers(maxBatch, size, true)
		dst := b.buffers(maxBatch, size, false)
		targets, closeAll, err := b.open(size, fp, maxBatch)
		if err != nil {
			return err
		}
		for _, batch := range b.cfg.batches {
			for _, t := range targets {
				if err := b.cell(t, size, keys[:batch], src[:batch], dst[:batch], emit); err != nil {
					closeAll()
					return fmt.Errorf("%s, unit %d bytes, batch %d: %w", t.name, size, batch, err)
				}
			}
			prog.Done(fmt.Sprintf("unit %d bytes, batch %d", size, batch))
		}
		for _, name := range b.cfg.engine {
			i := slices.IndexFunc(targets, func(t target) bool { return t.name == name })
			if i < 0 {
				continue // skipped, or not among -stores
			}
			if err := b.engineCell(targets[i], size, tokens, emit); err != nil {
				closeAll()
				return fmt.Errorf("engine:%s, unit %d bytes: %w", name, size, err)
			}
		}
		if len(b.cfg.engine) > 0 {
			prog.Done(fmt.Sprintf("unit %d bytes, engine", size))
		}
		closeAll()
	}
	return nil
}

// open returns the targets for units of size bytes of deployment fp.
func (b *bench) open(size int, fp uint64, maxBatch int) ([]target, func(), error) {
	var (
		targets []target
		closers []func()
	)
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	add := func(name string, s tierstore.Store) {
		targets = append(targets, target{name: name, put: s.Put, get: s.Get, store: s})
	}
	for _, name := range []string{"copy", "mem", "disk", "disk-cold", "redis", "cluster", "redis-tls"} {
		if !b.enabled(name) {
			continue
		}
		switch name {
		case "copy":
			held := b.buffers(maxBatch, size, false)
			targets = append(targets, target{name: name,
				put: func(_ context.Context, keys []kvcache.UnitKey, vals [][]byte) error {
					for i := range keys {
						copy(held[i], vals[i])
					}
					return nil
				},
				get: func(_ context.Context, keys []kvcache.UnitKey, dst [][]byte) error {
					for i := range keys {
						copy(dst[i], held[i])
					}
					return nil
				}})
		case "mem":
			add(name, tierstore.NewMemStore(fp))
		case "disk":
			dir := filepath.Join(b.tmp, strconv.Itoa(size))
			s, err := diskstore.Open(diskstore.Options{Dir: dir, Fingerprint: fp, MaxBytes: 1 << 40, Sync: b.cfg.sync})
			if err != nil {
				closeAll()
				return nil, nil, err
			}
			closers = append(closers, func() { _ = s.Close() })
			add(name, s)
		case "disk-cold":
			dir := filepath.Join(b.tmp, strconv.Itoa(size)+"-cold")
			s, err := diskstore.Open(diskstore.Options{Dir: dir, Fingerprint: fp, MaxBytes: 1 << 40, Sync: b.cfg.sync})
			if err != nil {
				closeAll()
				return nil, nil, err
			}
			closers = append(closers, func() { _ = s.Close() })
			targets = append(targets, target{name: name, put: s.Put, get: s.Get, store: s, loadOnly: true,
				beforeGet: func() error { return evictDir(dir) }})
		case "redis", "cluster", "redis-tls":
			opts := redisstore.Options{Addrs: []string{b.cfg.redis}, Prefix: b.prefix, Fingerprint: fp, PoolSize: b.cfg.poolSize}
			switch name {
			case "cluster":
				opts.Addrs, opts.Cluster = splitList(b.cfg.cluster), true
			case "redis-tls":
				cfg, err := b.cfg.tlsConfig()
				if err != nil {
					closeAll()
					return nil, nil, err
				}
				opts.Addrs, opts.TLS = []string{b.cfg.tlsAddr}, cfg
			}
			s, err := redisstore.Open(opts)
			if err != nil {
				closeAll()
				return nil, nil, err
			}
			closers = append(closers, func() { _ = s.Close() })
			if b.redis[name] == nil {
				// A client of its own removes the keys at the end.
				b.redis[name] = redis.NewUniversalClient(&redis.UniversalOptions{Addrs: opts.Addrs, IsClusterMode: opts.Cluster, TLSConfig: opts.TLS})
			}
			ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
			_, err = s.Contains(ctx, []kvcache.UnitKey{{Shared: true}})
			cancel()
			if err != nil {
				closeAll()
				return nil, nil, fmt.Errorf("%s at %s: %w", name, strings.Join(opts.Addrs, ","), err)
			}
			add(name, s)
		}
	}
	return targets, closeAll, nil
}

// cell measures the stores and loads of batches of len(keys) units.
func (b *bench) cell(t target, size int, keys []kvcache.UnitKey, src, dst [][]byte, emit func(result)) error {
	batch := len(keys)
	if err := t.put(b.ctx, keys, src); err != nil {
		return fmt.Errorf("warm-up store: %w", err)
	}
	if !t.loadOnly {
		s, err := b.measure(nil, func() error { return t.put(b.ctx, keys, src) })
		if err != nil {
			return fmt.Errorf("store: %w", err)
		}
		emit(s.result(t.name, size, batch, "store"))
	}
	for _, d := range dst {
		clear(d)
	}
	if t.beforeGet != nil {
		if err := t.beforeGet(); err != nil {
			return err
		}
	}
	if err := t.get(b.ctx, keys, dst); err != nil {
		return fmt.Errorf("warm-up load: %w", err)
	}
	for i := range dst {
		if !bytes.Equal(dst[i], src[i]) {
			return fmt.Errorf("unit %d loaded other bytes than were stored", i)
		}
	}
	s, err := b.measure(t.beforeGet, func() error { return t.get(b.ctx, keys, dst) })
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	emit(s.result(t.name, size, batch, "load"))
	return nil
}

// engineCell measures transfers of engineUnits units between the CPU
// tier of a tierstore.Engine and t's store, both ways.
func (b *bench) engineCell(t target, size, tokens int, emit func(result)) error {
	l, err := layoutFor(size)
	if err != nil {
		return err
	}
	n := b.cfg.engineUnits
	mem, err := kvcache.NewMemoryStore(l, kvcache.GPUAndCPU(kvcache.Capacity{Units: 1}, kvcache.Capacity{Units: int64(n)}))
	if err != nil {
		return err
	}
	const below kvcache.Tier = 3
	e, err := tierstore.NewEngine(tierstore.EngineConfig{Memory: mem, Stores: map[kvcache.Tier]tierstore.Store{below: t.store},
		Workers: 1, MaxBatch: b.cfg.maxBatch, Parallel: b.cfg.parallel, Timeout: time.Minute})
	if err != nil {
		return err
	}
	defer e.Close()
	keys := b.makeKeys(n, tokens)
	want := b.buffers(n, size, true)
	down := make([]kvcache.Copy, n)
	up := make([]kvcache.Copy, n)
	for i := range n {
		copy(mem.Bytes(kvcache.CPU, 0, int32(i)), want[i])
		down[i] = kvcache.Copy{From: kvcache.CPU, FromSlot: int32(i), To: below, ToSlot: int32(i)}
		up[i] = kvcache.Copy{From: below, FromSlot: int32(i), To: kvcache.CPU, ToSlot: int32(i)}
	}
	done := make(chan error, 1)
	transfer := func(copies []kvcache.Copy) error {
		e.StartKeyed(copies, keys, func(err error) { done <- err })
		return <-done
	}
	name, eng := "engine:"+t.name, fmt.Sprintf("%d×%d", b.cfg.maxBatch, b.cfg.parallel)
	if err := transfer(down); err != nil {
		return fmt.Errorf("warm-up store: %w", err)
	}
	s, err := b.measure(nil, func() error { return transfer(down) })
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	r := s.result(name, size, n, "store")
	r.Engine = eng
	emit(r)
	for i := range n {
		clear(mem.Bytes(kvcache.CPU, 0, int32(i)))
	}
	if err := transfer(up); err != nil {
		return fmt.Errorf("warm-up load: %w", err)
	}
	for i := range n {
		if !bytes.Equal(mem.Bytes(kvcache.CPU, 0, int32(i)), want[i]) {
			return fmt.Errorf("unit %d loaded other bytes than were stored", i)
		}
	}
	s, err = b.measure(nil, func() error { return transfer(up) })
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	r = s.result(name, size, n, "load")
	r.Engine = eng
	emit(r)
	return nil
}

// samples are the timed batches of one measurement.
type samples []time.Duration

// measure times op: exactly cfg.iters times, or until cfg.duration has
// passed and op ran cfg.minIters times. before runs, untimed, before
// every op.
func (b *bench) measure(before, op func() error) (samples, error) {
	var s samples
	start := time.Now()
	for i := 0; ; i++ {
		if b.cfg.iters > 0 && i >= b.cfg.iters || b.cfg.iters <= 0 && i >= b.cfg.minIters && time.Since(start) >= b.cfg.duration {
			return s, nil
		}
		if err := b.ctx.Err(); err != nil {
			return nil, err
		}
		if before != nil {
			if err := before(); err != nil {
				return nil, err
			}
		}
		t0 := time.Now()
		if err := op(); err != nil {
			return nil, err
		}
		s = append(s, time.Since(t0))
	}
}

func (s samples) result(store string, size, batch int, op string) result {
	var total time.Duration
	for _, d := range s {
		total += d
	}
	sorted := slices.Clone(s)
	slices.Sort(sorted)
	return result{Store: store, UnitBytes: size, Batch: batch, Op: op, Batches: len(s),
		GBps:  float64(size) * float64(batch) * float64(len(s)) / total.Seconds() / 1e9,
		P50Ms: ms(percentile(sorted, 50)), P99Ms: ms(percentile(sorted, 99))}
}

// percentile returns the nearest-rank p-th percentile of sorted: with
// fewer than 100 samples the 99th is the largest.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// evictDir flushes every file under dir and drops it from the page cache.
func evictDir(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		return evictFile(path)
	})
}
