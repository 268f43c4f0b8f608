// Command redisclients measures go-redis v9 and rueidis moving large binary
// values (KV-cache blocks of 1-2 MiB) to and from Redis, with an in-process
// copy() of the same bytes as the baseline. It is a separate module so the
// main module does not depend on either client.
//
// For each client, value size and batch size it times pipelined batches of
// SETs and of GETs (of keys written before), optionally spread over -par
// concurrent goroutines (each pipelining its share of the batch on its own
// connection), and reports GB/s (10^9 bytes of values per second), p50/p99
// latency of a whole batch, heap bytes and allocations per batch, and client
// CPU time (user+system of this process) per GB.
//
// Modes:
//
//	copy            copy() of the batch's values into preallocated buffers
//	go-redis        Pipelined: Set(key, []byte) / Get(key).Bytes() (a new []byte per value)
//	go-redis/tobuf  Pipelined: GetToBuffer(key, buf) into preallocated buffers (GET only)
//	rueidis         DoMulti: B().Set().Key().Value(BinaryString(v)) / B().Get() + AsBytes()
//	rueidis/stream  DoMultiStream: GETs streamed into preallocated buffers
//	                (GET only; standalone only, rueidis does not pipeline a
//	                multi-slot DoMultiStream on a cluster)
//
// Run against servers started by scripts/redis.sh:
//
//	scripts/redis.sh start /tmp/kvtier-redis && . /tmp/kvtier-redis/env
//	cd bench/redisclients && go run . -addr $KVTIER_REDIS_ADDR
//	go run . -cluster $KVTIER_REDIS_CLUSTER_ADDRS
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/bits"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

type result struct {
	Target    string  `json:"target"` // standalone or cluster
	Mode      string  `json:"mode"`
	Op        string  `json:"op"`
	Size      int     `json:"size"`
	Batch     int     `json:"batch"`
	Par       int     `json:"par"`
	Batches   int     `json:"batches"`
	GBps      float64 `json:"gbps"`
	P50ms     float64 `json:"p50_ms"`
	P99ms     float64 `json:"p99_ms"`
	AllocMB   float64 `json:"alloc_mb_per_batch"`
	Allocs    float64 `json:"allocs_per_batch"`
	CPUmsPerG float64 `json:"cpu_ms_per_gb"`
}

// op moves one share of a batch: keys[i] <-> vals[i] (SET sends vals,
// GET fills or checks dst).
type op func(ctx context.Context, keys []string, vals, dst [][]byte) error

type mode struct {
	name string
	set  op // nil: mode has no SET
	get  op // nil: mode has no GET
}

func main() {
	addr := flag.String("addr", "", "standalone Redis host:port (empty: skip)")
	cluster := flag.String("cluster", "", "comma-separated Redis Cluster addresses (empty: skip)")
	sizesF := flag.String("sizes", "1048576,2097152", "value sizes in bytes")
	batchesF := flag.String("batches", "1,16,64", "batch sizes (values per pipelined batch)")
	parF := flag.String("par", "1,4", "goroutines a batch is spread over (skipped when > batch)")
	conns := flag.Int("conns", 4, "connections per server: go-redis PoolSize and PipelinePoolSize, rueidis 2^PipelineMultiplex (power of 2)")
	modesF := flag.String("modes", "copy,go-redis,go-redis/tobuf,rueidis,rueidis/stream", "modes to run")
	duration := flag.Duration("duration", 2*time.Second, "time per measurement (at least -min-iters batches)")
	minIters := flag.Int("min-iters", 10, "minimum batches per measurement")
	iters := flag.Int("iters", 0, "if > 0, exactly this many batches per measurement (overrides -duration)")
	jsonOut := flag.Bool("json", false, "print one JSON object per result instead of a table")
	median := flag.Bool("median", false, "read the -json outputs of several runs (files given as arguments) and print the medians as Markdown tables")
	flag.Parse()
	if *median {
		if err := printMedians(flag.Args()); err != nil {
			fatal(err)
		}
		return
	}

	sizes := ints(*sizesF)
	batches := ints(*batchesF)
	pars := ints(*parF)
	want := strings.Split(*modesF, ",")
	if *conns < 1 || *conns&(*conns-1) != 0 {
		fatal(fmt.Errorf("-conns must be a power of 2, got %d", *conns))
	}
	if *addr == "" && *cluster == "" {
		fatal(errors.New("give -addr and/or -cluster"))
	}
	maxBatch := slices.Max(batches)
	maxSize := slices.Max(sizes)

	// Random, incompressible values: one per key slot, reused by every size.
	src := make([]byte, maxBatch*maxSize)
	rng := rand.NewChaCha8([32]byte{1})
	_, _ = rng.Read(src)
	dstMem := make([]byte, maxBatch*(maxSize+2)) // +2: go-redis GetToBuffer fast path

	fmt.Fprintf(os.Stderr, "%s GOMAXPROCS=%d NumCPU=%d %s\n",
		runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU(), depVersions())

	var results []result
	emit := func(r result) {
		results = append(results, r)
		if *jsonOut {
			b, _ := json.Marshal(r)
			fmt.Println(string(b))
		} else {
			fmt.Fprintf(os.Stderr, "%-10s %-15s %-3s %7d x%-3d par %d: %6.2f GB/s p50 %8.2f ms p99 %8.2f ms %8.1f MB/batch %8.0f allocs/batch %6.0f cpu ms/GB (%d batches)\n",
				r.Target, r.Mode, r.Op, r.Size, r.Batch, r.Par, r.GBps, r.P50ms, r.P99ms, r.AllocMB, r.Allocs, r.CPUmsPerG, r.Batches)
		}
	}

	type target struct {
		name  string
		modes []mode
		close func()
	}
	var targets []target
	if *addr != "" {
		ms, closeAll := newModes([]string{*addr}, false, *conns)
		targets = append(targets, target{"standalone", ms, closeAll})
	}
	if *cluster != "" {
		ms, closeAll := newModes(strings.Split(*cluster, ","), true, *conns)
		targets = append(targets, target{"cluster", ms, closeAll})
	}

	ctx := context.Background()
	for _, t := range targets {
		for _, size := range sizes {
			keys := make([]string, maxBatch)
			vals := make([][]byte, maxBatch)
			dst := make([][]byte, maxBatch)
			for i := range keys {
				keys[i] = fmt.Sprintf("kvtier:bench:%d:%d", size, i)
				vals[i] = src[i*maxSize : i*maxSize+size]
				dst[i] = dstMem[i*(maxSize+2) : i*(maxSize+2)+size+2]
			}
			for _, batch := range batches {
				for _, par := range pars {
					if par > batch {
						continue
					}
					for _, m := range t.modes {
						if !slices.Contains(want, m.name) {
							continue
						}
						for _, o := range []struct {
							name string
							fn   op
						}{{"SET", m.set}, {"GET", m.get}} {
							if o.fn == nil {
								continue
							}
							k, v, d := keys[:batch], vals[:batch], dst[:batch]
							run := func() error { return spread(ctx, o.fn, par, k, v, d) }
							if err := warmUp(ctx, t.modes, o.name, m.name, run, k, v, d); err != nil {
								fatal(fmt.Errorf("%s %s %s size %d batch %d par %d: %w", t.name, m.name, o.name, size, batch, par, err))
							}
							r, err := measure(run, *duration, *minIters, *iters)
							if err != nil {
								fatal(fmt.Errorf("%s %s %s size %d batch %d par %d: %w", t.name, m.name, o.name, size, batch, par, err))
							}
							r.Target, r.Mode, r.Op, r.Size, r.Batch, r.Par = t.name, m.name, o.name, size, batch, par
							r.GBps = float64(size*batch) * float64(r.Batches) / r.GBps / 1e9 // GBps held the total seconds
							r.CPUmsPerG = r.CPUmsPerG / (float64(size*batch) * float64(r.Batches) / 1e9)
							emit(r)
						}
					}
				}
			}
		}
		t.close()
	}
	if !*jsonOut {
		printTable(results)
	}
}

// warmUp runs one batch outside the timing and checks the data: for GET it
// first writes the keys (with the first mode that has SET) and clears dst.
func warmUp(ctx context.Context, modes []mode, opName, modeName string, run func() error, keys []string, vals, dst [][]byte) error {
	if modeName == "copy" {
		return run()
	}
	if opName == "GET" {
		for _, m := range modes {
			if m.set != nil && m.name != "copy" {
				if err := m.set(ctx, keys, vals, nil); err != nil {
					return err
				}
				break
			}
		}
		for _, d := range dst {
			clear(d)
		}
		if err := run(); err != nil {
			return err
		}
		if strings.HasSuffix(modeName, "/tobuf") || strings.HasSuffix(modeName, "/stream") {
			for i := range keys {
				if !bytes.Equal(dst[i][:len(vals[i])], vals[i]) {
					return fmt.Errorf("GET %s: wrong bytes in buffer", keys[i])
				}
			}
		} // the other modes check the bytes they get back in get itself
		return nil
	}
	return run()
}

// spread runs fn over keys split into par contiguous shares, concurrently.
func spread(ctx context.Context, fn op, par int, keys []string, vals, dst [][]byte) error {
	if par == 1 {
		return fn(ctx, keys, vals, dst)
	}
	errs := make([]error, par)
	var wg sync.WaitGroup
	n := len(keys)
	for p := range par {
		lo, hi := p*n/par, (p+1)*n/par
		wg.Go(func() { errs[p] = fn(ctx, keys[lo:hi], vals[lo:hi], dst[lo:hi]) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func measure(run func() error, d time.Duration, minIters, iters int) (result, error) {
	runtime.GC()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cpu0 := cpuTime()
	var lat []time.Duration
	start := time.Now()
	for {
		if iters > 0 && len(lat) >= iters {
			break
		}
		if iters <= 0 && len(lat) >= minIters && time.Since(start) >= d {
			break
		}
		t0 := time.Now()
		if err := run(); err != nil {
			return result{}, err
		}
		lat = append(lat, time.Since(t0))
	}
	total := time.Since(start)
	cpu := cpuTime() - cpu0
	runtime.ReadMemStats(&ms1)
	slices.Sort(lat)
	n := float64(len(lat))
	return result{
		Batches:   len(lat),
		GBps:      total.Seconds(), // turned into GB/s by the caller
		P50ms:     ms(lat[percentile(len(lat), 0.50)]),
		P99ms:     ms(lat[percentile(len(lat), 0.99)]),
		AllocMB:   float64(ms1.TotalAlloc-ms0.TotalAlloc) / n / 1e6,
		Allocs:    float64(ms1.Mallocs-ms0.Mallocs) / n,
		CPUmsPerG: cpu.Seconds() * 1e3, // divided by GB by the caller
	}, nil
}

// percentile is the nearest-rank percentile's index in a sorted slice of n.
func percentile(n int, p float64) int {
	i := int(float64(n)*p+0.999999) - 1
	return min(max(i, 0), n-1)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// newModes connects both clients to the servers and returns the modes.
func newModes(addrs []string, cluster bool, conns int) ([]mode, func()) {
	ctx := context.Background()
	var gr redis.UniversalClient
	if cluster {
		gr = redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:            addrs,
			PoolSize:         conns,
			PipelinePoolSize: conns,
			DisableIdentity:  true, // CLIENT SETINFO is Redis 7.2+; the server is 7.0
		})
	} else {
		gr = redis.NewClient(&redis.Options{
			Addr:             addrs[0],
			PoolSize:         conns,
			PipelinePoolSize: conns,
			DisableIdentity:  true,
		})
	}
	if err := gr.Ping(ctx).Err(); err != nil {
		fatal(fmt.Errorf("go-redis: %w", err))
	}
	ru, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: addrs,
		// No client-side caching: DoMulti does not use it, and without it
		// rueidis does not send CLIENT TRACKING on each connection.
		DisableCache: true,
		// Connections per server for pipelining: 2^PipelineMultiplex.
		// The default is 2 (4 connections) for a standalone client, 0 (1
		// per node) for a cluster client; set it the same for both.
		PipelineMultiplex: bits.TrailingZeros(uint(conns)),
		// MaxFlushDelay stays 0 (flush at once): it trades latency for
		// fewer syscalls on many small commands, not what 1 MiB values need.
	})
	if err != nil {
		fatal(fmt.Errorf("rueidis: %w", err))
	}

	modes := []mode{
		{
			name: "copy",
			set: func(_ context.Context, _ []string, vals, dst [][]byte) error {
				for i, v := range vals {
					copy(dst[i], v)
				}
				return nil
			},
			// GET: from the "store" (vals) into the destination buffers,
			// the same copy in the direction a GET moves bytes.
			get: func(_ context.Context, _ []string, vals, dst [][]byte) error {
				for i, v := range vals {
					copy(dst[i], v)
				}
				return nil
			},
		},
		{
			name: "go-redis",
			set: func(ctx context.Context, keys []string, vals, _ [][]byte) error {
				cmds, err := gr.Pipelined(ctx, func(p redis.Pipeliner) error {
					for i, k := range keys {
						p.Set(ctx, k, vals[i], 0)
					}
					return nil
				})
				return firstErr(err, cmds)
			},
			get: func(ctx context.Context, keys []string, vals, _ [][]byte) error {
				cmds, err := gr.Pipelined(ctx, func(p redis.Pipeliner) error {
					for _, k := range keys {
						p.Get(ctx, k)
					}
					return nil
				})
				if err := firstErr(err, cmds); err != nil {
					return err
				}
				for i, c := range cmds {
					b, err := c.(*redis.StringCmd).Bytes()
					if err != nil {
						return err
					}
					if err := check(keys[i], b, vals[i]); err != nil {
						return err
					}
				}
				return nil
			},
		},
		{
			name: "go-redis/tobuf",
			get: func(ctx context.Context, keys []string, vals, dst [][]byte) error {
				cmds, err := gr.Pipelined(ctx, func(p redis.Pipeliner) error {
					for i, k := range keys {
						p.GetToBuffer(ctx, k, dst[i])
					}
					return nil
				})
				if err := firstErr(err, cmds); err != nil {
					return err
				}
				for i, c := range cmds {
					if n := c.(*redis.ZeroCopyStringCmd).Val(); n != len(vals[i]) {
						return fmt.Errorf("GET %s: %d bytes, want %d", keys[i], n, len(vals[i]))
					}
				}
				return nil
			},
		},
		{
			name: "rueidis",
			set: func(ctx context.Context, keys []string, vals, _ [][]byte) error {
				cmds := make(rueidis.Commands, len(keys))
				for i, k := range keys {
					cmds[i] = ru.B().Set().Key(k).Value(rueidis.BinaryString(vals[i])).Build()
				}
				for _, r := range ru.DoMulti(ctx, cmds...) {
					if err := r.Error(); err != nil {
						return err
					}
				}
				return nil
			},
			get: func(ctx context.Context, keys []string, vals, _ [][]byte) error {
				cmds := make(rueidis.Commands, len(keys))
				for i, k := range keys {
					cmds[i] = ru.B().Get().Key(k).Build()
				}
				for i, r := range ru.DoMulti(ctx, cmds...) {
					b, err := r.AsBytes()
					if err != nil {
						return err
					}
					if err := check(keys[i], b, vals[i]); err != nil {
						return err
					}
				}
				return nil
			},
		},
	}
	if !cluster {
		modes = append(modes, mode{
			name: "rueidis/stream",
			get: func(ctx context.Context, keys []string, vals, dst [][]byte) error {
				cmds := make(rueidis.Commands, len(keys))
				for i, k := range keys {
					cmds[i] = ru.B().Get().Key(k).Build()
				}
				s := ru.DoMultiStream(ctx, cmds...)
				i := 0
				for ; s.HasNext(); i++ {
					w := bufWriter{buf: dst[i]}
					n, err := s.WriteTo(&w)
					if err != nil {
						return err
					}
					if int(n) != len(vals[i]) {
						return fmt.Errorf("GET %s: %d bytes, want %d", keys[i], n, len(vals[i]))
					}
				}
				if err := s.Error(); err != nil && err != io.EOF { // io.EOF: all read
					return err
				}
				if i != len(keys) {
					return fmt.Errorf("DoMultiStream: %d responses, want %d", i, len(keys))
				}
				return nil
			},
		})
	}
	return modes, func() { _ = gr.Close(); ru.Close() }
}

// bufWriter receives a streamed value into a preallocated buffer. Its
// ReadFrom lets io.Copy read from the connection's bufio.Reader straight into
// buf (bufio passes large reads through to the socket).
type bufWriter struct {
	buf []byte
	n   int
}

func (w *bufWriter) Write(p []byte) (int, error) {
	if len(p) > len(w.buf)-w.n {
		return 0, io.ErrShortBuffer
	}
	w.n += copy(w.buf[w.n:], p)
	return len(p), nil
}

func (w *bufWriter) ReadFrom(r io.Reader) (int64, error) {
	var total int64
	for {
		if w.n == len(w.buf) {
			// Full: anything more is an error, nothing more is EOF.
			var one [1]byte
			if n, err := r.Read(one[:]); n > 0 {
				return total, io.ErrShortBuffer
			} else if err == io.EOF {
				return total, nil
			} else if err != nil {
				return total, err
			}
			continue
		}
		n, err := r.Read(w.buf[w.n:])
		w.n += n
		total += int64(n)
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

func check(key string, got, want []byte) error {
	if len(got) != len(want) || got[0] != want[0] || got[len(got)-1] != want[len(want)-1] {
		return fmt.Errorf("GET %s: %d bytes, want %d (or wrong bytes)", key, len(got), len(want))
	}
	return nil
}

func firstErr(err error, cmds []redis.Cmder) error {
	if err != nil {
		return err
	}
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return err
		}
	}
	return nil
}

func printTable(rs []result) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tmode\top\tsize\tbatch\tpar\tGB/s\tp50 ms\tp99 ms\tMB alloc/batch\tallocs/batch\tCPU ms/GB\tbatches\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%.2f\t%.2f\t%.2f\t%.1f\t%.0f\t%.0f\t%d\t\n",
			r.Target, r.Mode, r.Op, r.Size, r.Batch, r.Par, r.GBps, r.P50ms, r.P99ms, r.AllocMB, r.Allocs, r.CPUmsPerG, r.Batches)
	}
	_ = tw.Flush()
}

// printMedians prints, per target, one Markdown table with the median over
// the runs of every metric (each metric's median taken on its own).
func printMedians(files []string) error {
	if len(files) == 0 {
		return errors.New("-median needs the -json output files as arguments")
	}
	type key struct {
		Target, Mode, Op string
		Size, Batch, Par int
	}
	var order []key
	runs := map[key][]result{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var r result
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			k := key{r.Target, r.Mode, r.Op, r.Size, r.Batch, r.Par}
			if _, ok := runs[k]; !ok {
				order = append(order, k)
			}
			runs[k] = append(runs[k], r)
		}
	}
	med := func(rs []result, f func(result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	// Group SETs before GETs within each (target, size, batch, par), modes
	// staying in run order.
	rank := func(k key) []int {
		t := slices.IndexFunc(order, func(o key) bool { return o.Target == k.Target })
		op := 1
		if k.Op == "SET" {
			op = 0
		}
		return []int{t, k.Size, k.Batch, k.Par, op}
	}
	slices.SortStableFunc(order, func(a, b key) int { return slices.Compare(rank(a), rank(b)) })
	target := ""
	for _, k := range order {
		rs := runs[k]
		if k.Target != target {
			target = k.Target
			fmt.Printf("\n%s (medians of %d runs)\n\n", target, len(rs))
			fmt.Println("| size | batch | par | op | mode | GB/s | GB/s min-max | p50 ms | p99 ms | MB alloc/batch | allocs/batch | client CPU ms/GB |")
			fmt.Println("|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|")
		}
		lo, hi := rs[0].GBps, rs[0].GBps
		for _, r := range rs {
			lo, hi = min(lo, r.GBps), max(hi, r.GBps)
		}
		fmt.Printf("| %d MiB | %d | %d | %s | %s | %.2f | %.2f-%.2f | %.1f | %.1f | %.1f | %.0f | %.0f |\n",
			k.Size>>20, k.Batch, k.Par, k.Op, k.Mode,
			med(rs, func(r result) float64 { return r.GBps }), lo, hi,
			med(rs, func(r result) float64 { return r.P50ms }),
			med(rs, func(r result) float64 { return r.P99ms }),
			med(rs, func(r result) float64 { return r.AllocMB }),
			med(rs, func(r result) float64 { return r.Allocs }),
			med(rs, func(r result) float64 { return r.CPUmsPerG }))
	}
	return nil
}

func ints(s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			fatal(fmt.Errorf("bad number %q in %q", f, s))
		}
		out = append(out, n)
	}
	return out
}

func depVersions() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var out []string
	for _, d := range bi.Deps {
		if d.Path == "github.com/redis/go-redis/v9" || d.Path == "github.com/redis/rueidis" {
			out = append(out, d.Path+"@"+d.Version)
		}
	}
	return strings.Join(out, " ")
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "redisclients:", err)
	os.Exit(1)
}
