// Command storebench measures the stores below the CPU tier against the
// CPU tier itself: how fast units of KV cache are stored (Put) into and
// loaded (Get) back from a tierstore.Store, in GB/s and in latency per
// batch, beside an in-process copy() of the same bytes.
//
// Usage:
//
//	go run ./examples/storebench [flags]
//
// For every unit size (-sizes, default 1 MiB and 2 MiB) and batch size
// (-batches, default 1, 16 and 64 units per call) it measures, each for
// -duration (or exactly -iters batches):
//
//   - copy: copy() of the batch between two preallocated buffers, what
//     moving the units within the CPU tier costs (the baseline);
//   - mem: tierstore.MemStore, the stores' encoding (header + xxhash64)
//     and decoding without any I/O;
//   - disk: tierstore/diskstore in a temporary directory under -dir
//     (fsync on every Put with -sync). Its loads read the files it has
//     just written, so they come from the page cache at memory speed,
//     not from the device;
//   - disk-cold (Linux, -cold): loads only, after the store's files were
//     flushed and evicted from the page cache (fdatasync and
//     posix_fadvise DONTNEED, not timed): what a load costs when the
//     device is read (a virtual disk may still be cached by its host);
//   - redis: tierstore/redisstore on the server -redis (default
//     $KVTIER_REDIS_ADDR; skipped with a message when empty);
//   - cluster: the same on the Redis Cluster -cluster (default
//     $KVTIER_REDIS_CLUSTER_ADDRS; skipped when empty);
//   - redis-tls (not measured unless named in -stores): the same over
//     mutual TLS on the server -redis-tls (default $KVTIER_REDIS_TLS_ADDR),
//     trusting the CA in $KVTIER_REDIS_TLS_CA and showing the client
//     certificate $KVTIER_REDIS_TLS_CERT with its key $KVTIER_REDIS_TLS_KEY
//     (the files scripts/redis.sh makes).
//
// Then, for each store named by -engine, a transfer of -engine-units
// units from the CPU tier to the store and back through
// tierstore.Engine.StartKeyed, which cuts it into calls of -max-batch
// units of which -parallel run at once: the rows "engine:<store>".
//
// Units carry realistic keys: a chain of blocks whose headers hold
// -tokens tokens each (default: unit bytes / 4096, the tokens of one
// layer's unit of a Llama-3-8B-like model in bf16, clamped to 16..512).
// Values are random bytes. Every store overwrites the same keys on every
// batch; the first batch of each cell is a warm-up, checked byte for
// byte and not timed.
//
// Output is a markdown table (or JSON lines with -json); -median reads
// the JSON lines of several runs and prints the table of their medians.
// GB/s counts 10^9 bytes of unit payload (not the stores' headers) per
// second of time spent in the calls; p50 and p99 are per batch (with
// fewer than 100 batches, p99 is the slowest). The command removes the
// Redis keys it wrote (SCAN and UNLINK of its own prefix, never FLUSHDB)
// and its temporary directory.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// config holds the flags.
type config struct {
	sizes, batches []int
	duration       time.Duration
	minIters       int
	iters          int
	tokens         int
	stores         []string
	dir            string
	sync, cold     bool
	redis, cluster string
	// tlsAddr is the TLS server, tlsCA, tlsCert and tlsKey the PEM files
	// of its CA and of the client's certificate and key.
	tlsAddr, tlsCA, tlsCert, tlsKey string
	poolSize                        int
	engine                          []string
	engineUnits                     int
	maxBatch                        int
	parallel                        int
	json                            bool
	seed                            uint64
	// prefix starts the Redis keys; empty means one of the run's own.
	prefix string
}

func defaults() config {
	return config{
		sizes:       []int{1 << 20, 2 << 20},
		batches:     []int{1, 16, 64},
		duration:    time.Second,
		minIters:    3,
		stores:      []string{"copy", "mem", "disk", "disk-cold", "redis", "cluster"},
		dir:         os.TempDir(),
		cold:        true,
		redis:       os.Getenv("KVTIER_REDIS_ADDR"),
		cluster:     os.Getenv("KVTIER_REDIS_CLUSTER_ADDRS"),
		tlsAddr:     os.Getenv("KVTIER_REDIS_TLS_ADDR"),
		tlsCA:       os.Getenv("KVTIER_REDIS_TLS_CA"),
		tlsCert:     os.Getenv("KVTIER_REDIS_TLS_CERT"),
		tlsKey:      os.Getenv("KVTIER_REDIS_TLS_KEY"),
		engine:      []string{"redis", "disk"},
		engineUnits: 64,
		maxBatch:    16,
		parallel:    4,
		seed:        1,
	}
}

func main() {
	cfg := defaults()
	fs := flag.NewFlagSet("storebench", flag.ExitOnError)
	sizes := fs.String("sizes", "1MiB,2MiB", "unit sizes, comma separated (bytes, or with KiB/MiB)")
	batches := fs.String("batches", "1,16,64", "units per Store call, comma separated")
	fs.DurationVar(&cfg.duration, "duration", cfg.duration, "time per cell and operation (at least -min-iters batches)")
	fs.IntVar(&cfg.minIters, "min-iters", cfg.minIters, "fewest timed batches per cell and operation")
	fs.IntVar(&cfg.iters, "iters", 0, "exactly this many timed batches per cell and operation (overrides -duration)")
	fs.IntVar(&cfg.tokens, "tokens", 0, "tokens in every unit's header; 0 means unit bytes/4096 clamped to 16..512")
	stores := fs.String("stores", strings.Join(cfg.stores, ","), "stores to measure: copy,mem,disk,disk-cold,redis,cluster,redis-tls")
	fs.StringVar(&cfg.dir, "dir", cfg.dir, "directory under which the disk store's temporary directory is made")
	fs.BoolVar(&cfg.sync, "sync", false, "disk store: fsync every file (and its directory) on Put")
	fs.BoolVar(&cfg.cold, "cold", cfg.cold, "measure disk-cold (Linux): loads after evicting the files from the page cache")
	fs.StringVar(&cfg.redis, "redis", cfg.redis, "standalone Redis host:port (default $KVTIER_REDIS_ADDR); empty skips redis")
	fs.StringVar(&cfg.cluster, "cluster", cfg.cluster, "Redis Cluster nodes, comma separated (default $KVTIER_REDIS_CLUSTER_ADDRS); empty skips cluster")
	fs.StringVar(&cfg.tlsAddr, "redis-tls", cfg.tlsAddr, "Redis host:port speaking TLS (default $KVTIER_REDIS_TLS_ADDR; CA, client certificate and key from $KVTIER_REDIS_TLS_CA, _CERT, _KEY); empty skips redis-tls")
	fs.IntVar(&cfg.poolSize, "pool", 0, "Redis connections per server (redisstore.Options.PoolSize); 0 means the client's default")
	engine := fs.String("engine", strings.Join(cfg.engine, ","), "stores to measure through tierstore.Engine (empty: none)")
	fs.IntVar(&cfg.engineUnits, "engine-units", cfg.engineUnits, "units per Engine transfer")
	fs.IntVar(&cfg.maxBatch, "max-batch", cfg.maxBatch, "EngineConfig.MaxBatch")
	fs.IntVar(&cfg.parallel, "parallel", cfg.parallel, "EngineConfig.Parallel")
	fs.BoolVar(&cfg.json, "json", false, "print JSON lines (one per cell and operation) instead of the table")
	fs.Uint64Var(&cfg.seed, "seed", cfg.seed, "seed of the keys and values")
	median := fs.Bool("median", false, "read the JSON lines files named as arguments and print the table of their medians")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: go run ./examples/storebench [flags]\n       go run ./examples/storebench -median run1.jsonl run2.jsonl ...")
		fs.PrintDefaults()
	}
	_ = fs.Parse(os.Args[1:])
	if *median {
		if err := medianTable(os.Stdout, fs.Args()); err != nil {
			fmt.Fprintln(os.Stderr, "storebench:", err)
			os.Exit(1)
		}
		return
	}
	var err error
	if cfg.sizes, err = parseSizes(*sizes); err == nil {
		cfg.batches, err = parseInts(*batches)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "storebench:", err)
		os.Exit(2)
	}
	cfg.stores = splitList(*stores)
	cfg.engine = splitList(*engine)
	// An interrupt stops the measurements; the cleanup still runs.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout, os.Stderr, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "storebench:", err)
		os.Exit(1)
	}
}

func splitList(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bad count %q", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	return out, nil
}

func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		mult := 1
		num := f
		for _, u := range []struct {
			suffix string
			mult   int
		}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"K", 1 << 10}, {"M", 1 << 20}} {
			if strings.HasSuffix(f, u.suffix) {
				num, mult = strings.TrimSuffix(f, u.suffix), u.mult
				break
			}
		}
		n, err := strconv.Atoi(num)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bad size %q", f)
		}
		out = append(out, n*mult)
	}
	if len(out) == 0 {
		return nil, errors.New("empty list of sizes")
	}
	return out, nil
}

// run measures every cell of cfg and writes the report to w, messages
// (skipped stores, progress, cleanup) to msg.
func run(ctx context.Context, w, msg io.Writer, cfg config) error {
	b, err := newBench(ctx, cfg, msg)
	if err != nil {
		return err
	}
	defer b.close()
	var results []result
	emit := func(r result) {
		results = append(results, r)
		if cfg.json {
			writeJSON(w, r)
		}
	}
	if err := b.runAll(emit); err != nil {
		return err
	}
	if !cfg.json {
		writeHeader(w, cfg, b)
		writeTable(w, results, 1)
		writeNotes(w, results, b)
	}
	return nil
}
