package main

import (
	"fmt"
	"math"
	"time"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/internal/parallel"
	"github.com/kvtier/kvtier/internal/progress"
	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/layout"
)

const gib = 1 << 30

// layoutFor builds the named layout of model m.
func layoutFor(name string, m layout.Model, cfg *config) (*layout.Layout, error) {
	switch name {
	case "paged":
		return layout.New(m, layout.PagedLayer, cfg.pageTokens)
	case "bsa":
		return layout.New(m, layout.BSA, cfg.blockTokens)
	}
	return nil, fmt.Errorf("%w: unknown layout %q", errUsage, name)
}

// job is one configuration: a layout, a GPU policy and a GPU capacity.
type job struct {
	layoutName string
	lay        *layout.Layout
	pol        policy
	sizeGiB    float64
}

// result is what one configuration measured over all its sequences.
// Only decode-step accesses count (prefill writes are not lookups).
type result struct {
	Layout            string  `json:"layout"`
	Policy            string  `json:"policy"`
	GPUGiB            float64 `json:"gpu_gib"`
	GPUUnits          int     `json:"gpu_units"`
	UnitMiB           float64 `json:"unit_mib"`
	Selector          string  `json:"selector"`
	SelectorP         float64 `json:"selector_p"`    // -sticky-p or -sink-p; 0 for uniform
	SinkPriority      int     `json:"sink_priority"` // prio-lru: the first block's priority; else 0
	Sequences         int     `json:"sequences"`
	Steps             int     `json:"steps_per_sequence"`
	Context           int     `json:"context_tokens"`
	TopK              int     `json:"topk"`
	Seed              uint64  `json:"seed"`
	HitRate           float64 `json:"hit_rate"`    // mean over sequences of hits/(hits+misses)
	HitRateSD         float64 `json:"hit_rate_sd"` // standard deviation of the per-sequence hit rates
	Accesses          int64   `json:"accesses"`
	Hits              int64   `json:"hits"`
	Misses            int64   `json:"misses"`
	Recomputed        int64   `json:"recomputed_units"` // misses with no CPU copy: 0 when the CPU holds the context
	UnitsPerStep      float64 `json:"units_per_step"`
	MaxUnitsPerStep   int     `json:"max_units_per_step"`
	WorstUnitsPerStep int64   `json:"worst_case_units_per_step"` // what top-k allows at the full context
	MissesPerStep     float64 `json:"misses_per_step"`
	MiBReadPerStep    float64 `json:"mib_read_per_step"`
	MiBOnboardPerStep float64 `json:"mib_onboarded_per_step"`
	MiBOffloadPerStep float64 `json:"mib_offloaded_per_step"`
	// stepUnits is the units touched at each decode step of every
	// sequence, for the tests' independent count.
	stepUnits []int
}

// capacities returns the CPU tier capacity: the whole context, so that
// every GPU victim is offloaded and every miss is an onboard.
func cpuCapacity(lay *layout.Layout, cfg *config) (kvcache.Capacity, error) {
	fp, err := lay.Footprint(int64(cfg.context))
	if err != nil {
		return kvcache.Capacity{}, err
	}
	return kvcache.Capacity{Bytes: fp.Bytes}, nil
}

// simulate runs every sequence of w through a fresh metadata-only cache
// configured by j and returns the measurements.
func simulate(j job, w *workload, cfg *config) (result, error) {
	unitBytes := j.lay.Pools()[0].UnitBytes
	gpu := kvcache.Capacity{Bytes: int64(math.Round(j.sizeGiB * gib))}
	cpu, err := cpuCapacity(j.lay, cfg)
	if err != nil {
		return result{}, err
	}
	slots, err := kvcache.PoolSlots(j.lay, gpu)
	if err != nil {
		return result{}, err
	}
	r := result{Layout: j.layoutName, Policy: j.pol.name, GPUGiB: j.sizeGiB, GPUUnits: slots[0],
		UnitMiB: float64(unitBytes) / (1 << 20), Selector: cfg.selector, SelectorP: selectorP(cfg), Sequences: cfg.sequences,
		Steps: cfg.steps, Context: cfg.context, TopK: cfg.topK, Seed: cfg.seed,
		WorstUnitsPerStep: worstUnits(j.lay, cfg)}
	if j.pol.priorities != nil {
		r.SinkPriority = cfg.sinkPriority
	}
	unitTokens := j.lay.TokensPerUnit()
	heads := make([][]int64, w.heads)
	sel := kvcache.Selection{Blocks: make([][]int, j.lay.Model().StoredHeads())}
	// Token i of a sequence is i: the sequences never share a block
	// anyway, each runs in its own cache.
	prompt := make([]uint32, cfg.prompt())
	for i := range prompt {
		prompt[i] = uint32(i)
	}
	var res kvcache.SparseResult
	rates := make([]float64, 0, cfg.sequences)
	var bytesRead, bytesOnboard, bytesOffload int64
	for s := range cfg.sequences {
		// Policies that read time see one tick per cache call: the
		// clock only orders events, its scale does not matter.
		clock := &eviction.ManualClock{}
		tiers := kvcache.GPUAndCPU(gpu, cpu)
		tiers[0].Policy = j.pol.factory
		c, err := kvcache.New(kvcache.Config{Layout: j.lay, Tiers: tiers, Recompute: j.pol.recompute, Clock: clock})
		if err != nil {
			return result{}, err
		}
		// The sparse Acquire tells the cache the prompt (so its blocks
		// get position weights against the whole prompt) and takes
		// nothing: the cache is empty, so Plan.Pending is every token.
		plan, err := c.Acquire(kvcache.Request{Tokens: prompt, Sparse: true, Priorities: j.pol.priorities})
		if err != nil {
			return result{}, err
		}
		id := plan.Seq
		// Prefill of the pending tokens, one unit-sized block at a time
		// as a server computes it: each Append pins only the block it
		// writes.
		for pos := len(prompt) - plan.Pending; pos < len(prompt); pos += unitTokens {
			end := min(pos+unitTokens, len(prompt))
			clock.Advance(time.Microsecond)
			if _, err := c.Append(id, prompt[pos:end]...); err != nil {
				return result{}, fmt.Errorf("prefill of sequence %d at token %d: %w", s, pos, err)
			}
		}
		var hits, misses int64
		for t := range cfg.steps {
			clock.Advance(time.Microsecond)
			if _, err := c.Append(id, uint32(w.tokensAt(t)-1)); err != nil {
				return result{}, fmt.Errorf("decode step %d of sequence %d: %w", t, s, err)
			}
			units := 0
			for l := range w.layers {
				heads = w.fillHeads(heads, s, t, l, unitTokens)
				if err := byKVHead(&sel, j.lay.Model(), l, heads); err != nil {
					return result{}, err
				}
				clock.Advance(time.Microsecond)
				if err := c.SparseAccess(id, sel, &res); err != nil {
					return result{}, fmt.Errorf("decode step %d layer %d of sequence %d: %w", t, l, s, err)
				}
				hits += int64(res.Hits)
				misses += int64(res.Onboarded + res.Computed)
				r.Recomputed += int64(res.Computed)
				units += len(res.Units)
				bytesRead += res.BytesRead
				bytesOnboard += res.BytesOnboarded
				bytesOffload += int64(res.Offloaded) * unitBytes
			}
			r.stepUnits = append(r.stepUnits, units)
			r.MaxUnitsPerStep = max(r.MaxUnitsPerStep, units)
		}
		if err := c.Release(id); err != nil {
			return result{}, err
		}
		r.Hits += hits
		r.Misses += misses
		rate := 0.0
		if hits+misses > 0 {
			rate = float64(hits) / float64(hits+misses)
		}
		rates = append(rates, rate)
	}
	steps := float64(cfg.sequences * cfg.steps)
	r.Accesses = r.Hits + r.Misses
	r.HitRate, r.HitRateSD = meanSD(rates)
	r.UnitsPerStep = float64(r.Accesses) / steps
	r.MissesPerStep = float64(r.Misses) / steps
	r.MiBReadPerStep = float64(bytesRead) / steps / (1 << 20)
	r.MiBOnboardPerStep = float64(bytesOnboard) / steps / (1 << 20)
	r.MiBOffloadPerStep = float64(bytesOffload) / steps / (1 << 20)
	return r, nil
}

// selectorP is the parameter of the selector in use.
func selectorP(cfg *config) float64 {
	switch cfg.selector {
	case "sticky":
		return cfg.stickyP
	case "sink":
		return cfg.sinkP
	}
	return 0
}

// meanSD returns the mean and the (population) standard deviation of xs.
func meanSD(xs []float64) (mean, sd float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	for _, x := range xs {
		sd += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(sd / float64(len(xs)))
}

// worstUnits is the most units one decode step can touch at the full
// context: every query head of every layer selecting topK blocks, their
// union as large as it can be. It is the bound the seed arithmetic quotes
// (3584 pages for the paged layout, 1120 blocks for BSA).
func worstUnits(lay *layout.Layout, cfg *config) int64 {
	m := lay.Model()
	blocks := int64((cfg.context + cfg.blockTokens - 1) / cfg.blockTokens)
	group := int64(m.QueryHeads / m.KVHeads)
	k := int64(cfg.topK)
	switch lay.Kind() {
	case layout.BSA:
		// Per KV head: the current block plus k-1 others per query head
		// of its group.
		per := min(blocks, 1+group*(k-1))
		return per * int64(m.KVHeads) * int64(m.Layers)
	default:
		per := min(blocks, 1+int64(m.QueryHeads)*(k-1))
		return per * int64(cfg.blockTokens/lay.TokensPerUnit()) * int64(m.Layers)
	}
}

// runAll simulates every job, cfg.parallel at a time, and returns the
// results in the order of jobs (so output does not depend on scheduling).
// prog gets a line as each job finishes.
func runAll(jobs []job, w *workload, cfg *config, prog *progress.Reporter) ([]result, error) {
	return parallel.Map(jobs, cfg.parallel, func(j job) (result, error) {
		r, err := simulate(j, w, cfg)
		if err != nil {
			return result{}, fmt.Errorf("%s/%s/%g GiB: %w", j.layoutName, j.pol.name, j.sizeGiB, err)
		}
		prog.Done(fmt.Sprintf("%s/%s/%g GiB", j.layoutName, j.pol.name, j.sizeGiB))
		return r, nil
	})
}

// byKVHead fills sel with layer's selection of heads (per query head, in
// units) grouped by the KV head each query head reads, reusing sel's
// slices: what one layer's kernel reads through each KV head.
func byKVHead(sel *kvcache.Selection, m layout.Model, layer int, heads [][]int64) error {
	sel.Layer = layer
	for h := range sel.Blocks {
		sel.Blocks[h] = sel.Blocks[h][:0]
	}
	for q, blocks := range heads {
		h, err := m.KVHeadOf(q)
		if err != nil {
			return err
		}
		for _, b := range blocks {
			sel.Blocks[h] = append(sel.Blocks[h], int(b))
		}
	}
	return nil
}
