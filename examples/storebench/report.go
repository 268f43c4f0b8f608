package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
)

func writeJSON(w io.Writer, r result) {
	b, _ := json.Marshal(r)
	fmt.Fprintf(w, "%s\n", b)
}

// cellKey names a row of the table.
type cellKey struct {
	name   string
	size   int
	batch  int
	engine string
}

// agg is one operation of a row over one or several runs: the median of
// each metric on its own, and the range of GB/s.
type agg struct {
	gbps, lo, hi, p50, p99 float64
	runs                   int
}

type row struct {
	cellKey
	store, load *agg
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// aggregate groups results into rows, in the order of (unit size, batch)
// and then of first appearance.
func aggregate(results []result) []row {
	type ops struct{ gbps, p50, p99 []float64 }
	var order []cellKey
	by := map[cellKey]map[string]*ops{}
	for _, r := range results {
		k := cellKey{r.Store, r.UnitBytes, r.Batch, r.Engine}
		if by[k] == nil {
			by[k] = map[string]*ops{}
			order = append(order, k)
		}
		o := by[k][r.Op]
		if o == nil {
			o = &ops{}
			by[k][r.Op] = o
		}
		o.gbps = append(o.gbps, r.GBps)
		o.p50 = append(o.p50, r.P50Ms)
		o.p99 = append(o.p99, r.P99Ms)
	}
	slices.SortStableFunc(order, func(a, b cellKey) int {
		return cmp.Or(cmp.Compare(a.size, b.size), cmp.Compare(a.batch, b.batch))
	})
	rows := make([]row, len(order))
	for i, k := range order {
		rows[i].cellKey = k
		for op, o := range by[k] {
			a := &agg{gbps: median(o.gbps), lo: slices.Min(o.gbps), hi: slices.Max(o.gbps), p50: median(o.p50), p99: median(o.p99), runs: len(o.gbps)}
			if op == "store" {
				rows[i].store = a
			} else {
				rows[i].load = a
			}
		}
	}
	return rows
}

func sizeName(n int) string {
	switch {
	case n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

func writeHeader(w io.Writer, cfg config, b *bench) {
	fmt.Fprintf(w, "storebench: %s %s/%s, GOMAXPROCS %d (%d CPUs); ", runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), runtime.NumCPU())
	if cfg.iters > 0 {
		fmt.Fprintf(w, "%d batches per cell and operation", cfg.iters)
	} else {
		fmt.Fprintf(w, "each cell and operation for %v and at least %d batches", cfg.duration, cfg.minIters)
	}
	var toks []string
	for _, s := range cfg.sizes {
		toks = append(toks, fmt.Sprintf("%d tokens per %s unit", b.tokensFor(s), sizeName(s)))
	}
	fmt.Fprintf(w, "; headers of %s.\n\n", strings.Join(toks, ", "))
	if b.tmp != "" {
		fmt.Fprintf(w, "disk: %s (sync %v). ", b.tmp, cfg.sync)
	}
	if b.enabled("redis") {
		fmt.Fprintf(w, "redis: %s. ", cfg.redis)
	}
	if b.enabled("cluster") {
		fmt.Fprintf(w, "cluster: %s. ", cfg.cluster)
	}
	if len(cfg.engine) > 0 {
		fmt.Fprintf(w, "engine: transfers of %d units, MaxBatch %d, Parallel %d.", cfg.engineUnits, cfg.maxBatch, cfg.parallel)
	}
	fmt.Fprint(w, "\n\n")
}

// writeTable writes the rows of results as a markdown table; with several
// runs, GB/s is the median and its range.
func writeTable(w io.Writer, results []result, runs int) {
	rows := aggregate(results)
	copyOf := func(k cellKey) *row {
		for i, r := range rows {
			if r.name == "copy" && r.size == k.size && r.batch == k.batch && r.engine == "" {
				return &rows[i]
			}
		}
		return nil
	}
	fmt.Fprintln(w, "| unit | batch | store | store GB/s | load GB/s | store p50 / p99 ms | load p50 / p99 ms | copy ÷ store | copy ÷ load |")
	fmt.Fprintln(w, "|---|---:|---|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		batch := fmt.Sprint(r.batch)
		if r.engine != "" {
			batch = fmt.Sprintf("%d (%s)", r.batch, r.engine)
		}
		c := copyOf(r.cellKey)
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", sizeName(r.size), batch, r.name,
			gbps(r.store, runs), gbps(r.load, runs), lat(r.store), lat(r.load),
			ratio(c, r.store, func(c *row) *agg { return c.store }), ratio(c, r.load, func(c *row) *agg { return c.load }))
	}
	fmt.Fprintln(w)
}

func gbps(a *agg, runs int) string {
	if a == nil {
		return "—"
	}
	if runs > 1 && a.runs > 1 {
		return fmt.Sprintf("%.2f (%.2f–%.2f)", a.gbps, a.lo, a.hi)
	}
	return fmt.Sprintf("%.2f", a.gbps)
}

func lat(a *agg) string {
	if a == nil {
		return "—"
	}
	return fmt.Sprintf("%s / %s", msStr(a.p50), msStr(a.p99))
}

func msStr(v float64) string {
	if v < 1 {
		return fmt.Sprintf("%.3f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func ratio(c *row, a *agg, op func(*row) *agg) string {
	if c == nil || a == nil || op(c) == nil || a.gbps <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f×", op(c).gbps/a.gbps)
}

// writeNotes writes what the table implies about the page cache and the
// engine, and the stores that were skipped.
func writeNotes(w io.Writer, results []result, b *bench) {
	rows := aggregate(results)
	find := func(store string, size, batch int, engine string) *row {
		for i, r := range rows {
			if r.cellKey == (cellKey{store, size, batch, engine}) {
				return &rows[i]
			}
		}
		return nil
	}
	// loadRatios returns the range of num's load GB/s over den's.
	loadRatios := func(num, den func(r row) *row) (lo, hi float64, n int) {
		for _, r := range rows {
			a, d := num(r), den(r)
			if a == nil || d == nil || a.load == nil || d.load == nil || d.load.gbps <= 0 {
				continue
			}
			x := a.load.gbps / d.load.gbps
			if n == 0 || x < lo {
				lo = x
			}
			if n == 0 || x > hi {
				hi = x
			}
			n++
		}
		return lo, hi, n
	}
	self := func(store string) func(r row) *row {
		return func(r row) *row {
			if r.name != store || r.engine != "" {
				return nil
			}
			return find(store, r.size, r.batch, "")
		}
	}
	other := func(store, of string) func(r row) *row {
		return func(r row) *row {
			if r.name != of || r.engine != "" {
				return nil
			}
			return find(store, r.size, r.batch, "")
		}
	}
	memLo, memHi, nMem := loadRatios(self("disk"), other("mem", "disk"))
	coldLo, coldHi, nCold := loadRatios(self("disk"), other("disk-cold", "disk"))
	switch {
	case nCold > 0:
		verdict := "they come from the page cache (a copy out of the kernel plus Decode), not from the device"
		if coldLo < 2 {
			verdict = "the page cache does not make them much faster than reads that reach the device"
		}
		fmt.Fprintf(w, "- disk loads read files the store has just written: they ran at %.2f–%.2f× the GB/s of disk-cold loads (files flushed and dropped from the page cache first) and %.2f–%.2f× MemStore's: %s.\n",
			coldLo, coldHi, memLo, memHi, verdict)
	case nMem > 0:
		fmt.Fprintf(w, "- disk loads read files the store has just written, from the page cache (memory speed, not the device's): they ran at %.2f–%.2f× MemStore's GB/s (no disk-cold measurement to compare with the device).\n", memLo, memHi)
	}
	for _, r := range rows {
		if r.engine == "" || !strings.HasPrefix(r.name, "engine:") {
			continue
		}
		direct := find(strings.TrimPrefix(r.name, "engine:"), r.size, r.batch, "")
		if direct == nil || direct.store == nil || direct.load == nil || r.store == nil || r.load == nil {
			continue
		}
		fmt.Fprintf(w, "- %s, %s units: a transfer of %d through the Engine (calls of %s) moved %.2f× (store) and %.2f× (load) the GB/s of one call of %d.\n",
			r.name, sizeName(r.size), r.batch, r.engine, r.store.gbps/direct.store.gbps, r.load.gbps/direct.load.gbps, r.batch)
	}
	if b != nil {
		for _, s := range b.skipped {
			fmt.Fprintf(w, "- %s\n", s)
		}
	}
	fmt.Fprintln(w)
}

// medianTable reads the JSON lines of several runs and writes the table
// of their medians.
func medianTable(w io.Writer, files []string) error {
	if len(files) == 0 {
		return fmt.Errorf("-median needs the JSON lines files of the runs")
	}
	var results []result
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(f)
		for line := 1; sc.Scan(); line++ {
			if strings.TrimSpace(sc.Text()) == "" {
				continue
			}
			var r result
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				f.Close()
				return fmt.Errorf("%s:%d: %w", name, line, err)
			}
			results = append(results, r)
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "storebench: medians of %d runs (%s); GB/s with its range over the runs.\n\n", len(files), strings.Join(files, ", "))
	writeTable(w, results, len(files))
	writeNotes(w, results, nil)
	return nil
}
