package kvcache_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier/costmodel"
	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/layout"
	"github.com/kvtier/kvtier/radix"
)

// The oracle: a tiny transformer whose KV lives only in the cache's GPU
// slots, served through kvcache as a server would, against the same model
// recomputing every request from token 0 with no cache at all. Every logits
// vector and every K/V vector a sequence pins must be bit-identical; one
// wrong byte served (a stale slot, a failed load taken for a good one, a
// block shared before it was written) changes the bits.

// oracleConfig is one cache the oracle runs against.
type oracleConfig struct {
	name    string
	kind    layout.Kind
	windows []int
	policy  func() kvcache.PolicyFactory
	// gpu and cpu are tier capacities in token blocks (every pool).
	gpu, cpu int
	async    bool
	// layerWise waits layer by layer (async only); failPct fails that
	// percentage of transfers.
	layerWise bool
	failPct   int
	// failAll, when set and true, fails every transfer.
	failAll *atomic.Bool
	// cla is the model's cross-layer sharing (0 or 1: none).
	cla int
	// mla, when positive, makes the model multi-head latent attention
	// with that many latent dimensions (4 of them rotary).
	mla int
	// recompute is Config.Recompute, and link the CPU tier's link.
	recompute *costmodel.Recompute
	link      costmodel.Link
	// blockKeys is Config.BlockKeys, partial Config.PartialReuse.
	blockKeys, partial bool
	// sparse serves every request as a sparse sequence whose model has
	// block-sparse attention in layers 0, 2 and 3 (see
	// oracle_sparse_test.go).
	sparse bool
}

func oracleConfigs() []oracleConfig {
	lru := kvcache.LRUPolicy
	fifo := kvcache.FIFOPolicy
	s3 := func() kvcache.PolicyFactory { return kvcache.S3FIFOPolicy(eviction.S3FIFOConfig{}) }
	arc := func() kvcache.PolicyFactory { return kvcache.ARCPolicy(eviction.ARCConfig{}) }
	tinylfu := func() kvcache.PolicyFactory { return kvcache.WTinyLFUPolicy(eviction.WTinyLFUConfig{}) }
	win := []int{0, 20, 0, 12}
	return []oracleConfig{
		{name: "paged-lru", kind: layout.PagedLayer, policy: lru, gpu: 40, cpu: 40},
		{name: "paged-fifo-nocpu", kind: layout.PagedLayer, policy: fifo, gpu: 40},
		{name: "all-layers-s3fifo", kind: layout.AllLayers, policy: s3, gpu: 40, cpu: 30},
		{name: "bsa-lru", kind: layout.BSA, policy: lru, gpu: 40, cpu: 40},
		{name: "paged-windows-lru", kind: layout.PagedLayer, windows: win, policy: lru, gpu: 40, cpu: 40},
		{name: "all-layers-windows-fifo", kind: layout.AllLayers, windows: win, policy: fifo, gpu: 40, cpu: 40},
		// Windowed units drop as soon as they leave the window: a
		// Truncate that moves the window back recomputes them.
		{name: "paged-windows-fifo-nocpu", kind: layout.PagedLayer, windows: win, policy: fifo, gpu: 24},
		{name: "paged-async", kind: layout.PagedLayer, policy: lru, gpu: 40, cpu: 40, async: true, failPct: 15},
		{name: "paged-async-layerwise", kind: layout.PagedLayer, policy: lru, gpu: 40, cpu: 40, async: true, layerWise: true, failPct: 15},
		{name: "paged-windows-arc-async", kind: layout.PagedLayer, windows: win, policy: arc, gpu: 40, cpu: 30, async: true, failPct: 15},
		{name: "bsa-windows-async", kind: layout.BSA, windows: win, policy: s3, gpu: 40, cpu: 40, async: true, failPct: 15},
		{name: "paged-cla-prioritized", kind: layout.PagedLayer, cla: 2, policy: kvcache.PrioritizedLRUPolicy, gpu: 40, cpu: 40},
		// Units of layer 0 cost more to recompute than to load over the
		// link, those of layer 3 less: some victims move down, others
		// are dropped.
		{name: "paged-retention-cost", kind: layout.PagedLayer, policy: kvcache.RetentionPolicy, gpu: 40, cpu: 40,
			recompute: &costmodel.Recompute{Beta: 2e-6, PositionWeight: costmodel.Flat}, link: costmodel.Link{BytesPerSecond: 1e9}},
		{name: "bsa-mla-windows-async", kind: layout.BSA, mla: 12, windows: win, policy: lru, gpu: 40, cpu: 40, async: true, failPct: 15},
		{name: "paged-mla-cla-fifo", kind: layout.PagedLayer, mla: 12, cla: 2, policy: fifo, gpu: 40, cpu: 30},
		{name: "all-layers-windows-async-layerwise", kind: layout.AllLayers, windows: win, policy: lru, gpu: 40, cpu: 30, async: true, layerWise: true, failPct: 15},
		// One policy key per block and pool (Config.BlockKeys).
		{name: "paged-lru-blockkeys", kind: layout.PagedLayer, policy: lru, gpu: 40, cpu: 40, blockKeys: true},
		{name: "all-layers-wtinylfu-blockkeys", kind: layout.AllLayers, policy: tinylfu, gpu: 40, cpu: 30, blockKeys: true},
		// Partial-block reuse: a prompt's first uncached block copies the
		// tokens a cached block agrees with (Config.PartialReuse), with
		// copies that fail, and from sources that were dropped.
		{name: "paged-lru-partial", kind: layout.PagedLayer, policy: lru, gpu: 40, cpu: 40, partial: true},
		{name: "paged-windows-async-partial", kind: layout.PagedLayer, windows: win, policy: lru, gpu: 40, cpu: 30, async: true, failPct: 15, partial: true},
		{name: "all-layers-fifo-nocpu-partial-blockkeys", kind: layout.AllLayers, policy: fifo, gpu: 30, partial: true, blockKeys: true},
		{name: "paged-windows-s3fifo-blockkeys", kind: layout.PagedLayer, windows: win, policy: s3, gpu: 40, cpu: 30, blockKeys: true},
		{name: "bsa-mla-cla-fifo-blockkeys", kind: layout.BSA, mla: 12, cla: 2, policy: fifo, gpu: 40, cpu: 30, blockKeys: true},
		{name: "paged-async-layerwise-blockkeys", kind: layout.PagedLayer, policy: lru, gpu: 40, cpu: 40, async: true, layerWise: true, failPct: 15, blockKeys: true},
		{name: "bsa-windows-async-s3fifo-blockkeys", kind: layout.BSA, windows: win, policy: s3, gpu: 40, cpu: 40, async: true, failPct: 15, blockKeys: true},
		// Sparse sequences on a GPU of a few sequences' blocks and a
		// small CPU tier: SparseAccess onboards units and restores
		// dropped ones. With sliding windows, the prompt is appended a
		// block at a time (each access keeps the window of the step's
		// first token) and a restore names the older tokens it runs
		// through the layers below (Selection.Queries).
		{name: "bsa-sparse-lru", kind: layout.BSA, policy: lru, gpu: 12, cpu: 12, sparse: true},
		{name: "paged-sparse-windows-async", kind: layout.PagedLayer, windows: win, policy: lru, gpu: 12, cpu: 12, async: true, failPct: 15, sparse: true},
	}
}

const (
	oracleBlock  = 8
	oracleLayers = 4
	oracleVocab  = 61
)

// oracleModel is the tiny model of every oracle run: 4 layers, GQA with 4
// query and 2 KV heads of dimension 8, float32.
func oracleModel(windows []int, cla, mla int) (*tinyModel, layout.Model) {
	if windows == nil {
		windows = make([]int, oracleLayers)
	}
	m := newTinyModel(7, oracleLayers, 4, 2, 8, oracleVocab, windows)
	m.cla = max(1, cla)
	m.block = oracleBlock
	lm := layout.Model{Name: "oracle", Layers: oracleLayers, QueryHeads: 4, KVHeads: 2, HeadDim: 8, ElemBytes: 4, CLAFactor: cla}
	if mla > 0 {
		m.withMLA(11, mla)
		lm.MLALatentDims, lm.MLARopeDims = mla-4, 4
	}
	for _, w := range windows {
		if w > 0 {
			lm.Windows = windows
		}
	}
	return m, lm
}

// oracleLayout returns the model of cfg and its layout.
func oracleLayout(t testing.TB, cfg oracleConfig) (*tinyModel, *layout.Layout) {
	t.Helper()
	m, lm := oracleModel(cfg.windows, cfg.cla, cfg.mla)
	lay, err := layout.New(lm, cfg.kind, oracleBlock)
	if err != nil {
		t.Fatal(err)
	}
	return m, lay
}

// newOracle builds the cache of cfg with its memory and the server over it.
// The returned function closes the engine, if any.
func newOracle(t testing.TB, cfg oracleConfig, seed uint64, mover func(*kvcache.MemoryStore) kvcache.Mover) (*oracleServer, func()) {
	t.Helper()
	m, lay := oracleLayout(t, cfg)
	units := int64(lay.UnitsPerBlock())
	tiers := kvcache.GPUAndCPU(kvcache.Capacity{Units: int64(cfg.gpu) * units}, kvcache.Capacity{Units: int64(cfg.cpu) * units})
	for i := range tiers {
		tiers[i].Policy = cfg.policy()
	}
	if len(tiers) > 1 {
		tiers[1].Link = cfg.link
	}
	mem, err := kvcache.NewMemoryStore(lay, tiers)
	if err != nil {
		t.Fatal(err)
	}
	kc := kvcache.Config{Layout: lay, Tiers: tiers, Recompute: cfg.recompute, BlockKeys: cfg.blockKeys, PartialReuse: cfg.partial}
	closeFn := func() {}
	if cfg.async {
		var n atomic.Uint64
		async, err := kvcache.NewAsyncMemoryStore(mem, kvcache.AsyncOptions{
			Workers: 3,
			Latency: 20 * time.Microsecond,
			Jitter:  50 * time.Microsecond, // transfers finish out of order
			Fail: func([]kvcache.Copy) error {
				if cfg.failAll != nil && cfg.failAll.Load() {
					return errors.New("oracle: injected transfer failure")
				}
				if cfg.failPct > 0 && int((n.Add(1)*0x9E3779B97F4A7C15+seed)>>33%100) < cfg.failPct {
					return errors.New("oracle: injected transfer failure")
				}
				return nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		kc.Engine = async
		closeFn = async.Close
	} else if mover != nil {
		kc.Mover = mover(mem)
	} else {
		kc.Mover = mem
	}
	c, err := kvcache.New(kc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := newOracleServer(c, mem, m, cfg.async)
	if err != nil {
		t.Fatal(err)
	}
	s.layerWise = cfg.layerWise
	if cfg.sparse {
		s.sparse = true
		m.sparse = []bool{true, false, true, true}
	}
	return s, closeFn
}

// oracleWorkload draws n requests: prompts over a few shared system
// prompts, follow-up turns of earlier conversations (prompt + answer + a new
// turn), repeats, and every way of serving a request the server has.
type oracleWorkload struct {
	rng     *rand.Rand
	systems [][]uint32
	history [][]uint32
}

func newOracleWorkload(seed uint64) *oracleWorkload {
	// The system prompts are the same in every workload, so that the
	// workloads of concurrent workers share prefixes.
	w := &oracleWorkload{rng: rand.New(rand.NewPCG(1, 99))}
	for range 3 {
		w.systems = append(w.systems, w.tokens(12+w.rng.IntN(30)))
	}
	w.rng = rand.New(rand.NewPCG(seed, 99))
	return w
}

func (w *oracleWorkload) tokens(n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(w.rng.IntN(oracleVocab))
	}
	return out
}

func (w *oracleWorkload) next() oracleReq {
	r := w.rng
	var prompt []uint32
	switch k := r.IntN(10); {
	case k < 4 || len(w.history) == 0:
		prompt = append(append(prompt, w.systems[r.IntN(len(w.systems))]...), w.tokens(1+r.IntN(40))...)
	case k < 8:
		prompt = append(append(prompt, w.history[r.IntN(len(w.history))]...), w.tokens(1+r.IntN(12))...)
	default:
		prompt = append(prompt, w.history[r.IntN(len(w.history))]...) // a repeat, maybe block-aligned
	}
	if len(prompt) > 150 {
		prompt = prompt[len(prompt)-150:]
	}
	req := oracleReq{prompt: prompt, gen: 1 + r.IntN(12)}
	switch k := r.IntN(20); {
	case k < 3:
		req.chunk = 1 + r.IntN(24)
	case k < 6:
		req.draft = 1 + r.IntN(6)
		// The verifier rejects nothing, some drafts, more than the
		// drafts, or (as a server that rolls a request back would)
		// half the sequence, deep into the prompt's shared blocks, or
		// back to the block boundary before the middle (-1).
		switch r.IntN(5) {
		case 1:
			req.reject = 1 + r.IntN(req.draft)
		case 2:
			req.reject = req.draft + 1 + r.IntN(8)
		case 3:
			req.reject = (len(prompt) + req.draft) / 2
		case 4:
			req.reject = -1
		}
	case k < 8:
		req.fork, req.forkGen = true, r.IntN(10)
	case k < 9:
		req.garbage = true
	case k < 11:
		req.maxLoad = oracleBlock * (1 + r.IntN(3))
	case k < 12:
		req.prefetch = true
	}
	req.computeLast = r.IntN(4) == 0
	if r.IntN(3) == 0 {
		req.priorities = &kvcache.Priorities{Default: r.IntN(100),
			Ranges: []kvcache.PriorityRange{{Start: 0, End: max(1, len(prompt)/2), Priority: r.IntN(100)}}}
	}
	if r.IntN(5) == 0 {
		req.lora = []string{"a", "bb"}[r.IntN(2)]
	}
	if r.IntN(5) == 0 && len(prompt) > 1 {
		// A multimodal item, one of two, whose placeholder sits at a
		// position of the prompt.
		req.extra = []radix.ExtraKey{{Pos: r.IntN(len(prompt)), Value: uint64(1 + r.IntN(2))}}
	}
	return req
}

func (w *oracleWorkload) remember(tokens []uint32) {
	if len(tokens) > 0 {
		w.history = append(w.history, tokens)
		if len(w.history) > 30 {
			w.history = w.history[1:]
		}
	}
}

// oracleRequests is how many requests each configuration serves: a short
// run by default (shorter with -short or the race detector),
// KVTIER_ORACLE_REQUESTS for a long one (CI).
func oracleRequests(t testing.TB) int {
	if v := os.Getenv("KVTIER_ORACLE_REQUESTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("KVTIER_ORACLE_REQUESTS=%q: want a positive integer", v)
		}
		return n
	}
	if testing.Short() || oracleRace {
		return 24
	}
	return 40
}

// runOracle serves n requests of the workload of seed and fails at the first
// request whose outputs differ from the no-cache run.
func runOracle(t *testing.T, s *oracleServer, seed uint64, n int) (served, skipped int) {
	t.Helper()
	r := newOracleRun(t, seed)
	r.serve(s, n)
	return r.served, r.skipped
}

// oracleRun is the workload of one seed, served a few requests at a time by
// whichever server the test names.
type oracleRun struct {
	t                     *testing.T
	w                     *oracleWorkload
	rng                   *rand.Rand
	next, served, skipped int
}

func newOracleRun(t *testing.T, seed uint64) *oracleRun {
	return &oracleRun{t: t, w: newOracleWorkload(seed), rng: rand.New(rand.NewPCG(seed, 7))}
}

// serve serves the workload's next k requests on s and fails the test at
// the first whose outputs differ from the no-cache run.
func (r *oracleRun) serve(s *oracleServer, k int) {
	r.t.Helper()
	for range k {
		req := r.w.next()
		out, err := s.serve(req, r.rng)
		switch {
		case errors.Is(err, errSkipped):
			r.skipped++
		case err != nil:
			r.t.Fatalf("request %d (%d prompt tokens, %+v): %v", r.next, len(req.prompt), summary(req), err)
		default:
			r.served++
			r.w.remember(out)
		}
		r.next++
	}
}

func summary(r oracleReq) string {
	return fmt.Sprintf("gen=%d chunk=%d draft=%d reject=%d fork=%v garbage=%v maxLoad=%d prefetch=%v computeLast=%v lora=%q extra=%v",
		r.gen, r.chunk, r.draft, r.reject, r.fork, r.garbage, r.maxLoad, r.prefetch, r.computeLast, r.lora, r.extra)
}

// TestModelOracle serves the workload on every configuration: every logits
// vector and every pinned K/V vector equal to the no-cache run's.
func TestModelOracle(t *testing.T) {
	n := oracleRequests(t)
	var cov oracleCovered
	t.Cleanup(func() { cov.check(t) })
	for _, cfg := range oracleConfigs() {
		t.Run(cfg.name, func(t *testing.T) {
			t.Parallel()
			var calls, keeps, onboards, restores, failed int64
			for seed := uint64(1); seed <= 2; seed++ {
				s, done := newOracle(t, cfg, seed, nil)
				t.Logf("seed %d", seed)
				served, skipped := runOracle(t, s, seed, n)
				done()
				if served < n/2 {
					t.Fatalf("seed %d: only %d of %d requests served (%d skipped for space)", seed, served, n, skipped)
				}
				if s.mismatches.Load() != 0 {
					t.Fatalf("seed %d: %d mismatches", seed, s.mismatches.Load())
				}
				t.Logf("seed %d: %d requests served, %d skipped, %d logits and %d K/V vectors identical",
					seed, served, skipped, s.logitsSeen.Load(), s.kvSeen.Load())
				cov.add(cfg, s)
				calls += s.sparseCalls.Load()
				keeps += s.sparseKeeps.Load()
				onboards += s.sparseOnboards.Load()
				restores += s.sparseRestores.Load()
				failed += s.sparseFailed.Load()
			}
			if cfg.sparse {
				t.Logf("%d SparseAccess calls (%d with Keep): %d units onboarded (%d rewritten as Readiness reported a failed load in their block), %d restored from dropped",
					calls, keeps, onboards, failed, restores)
				// (Restores with Keep calls are required over the whole
				// run: a short one meets few in a configuration.)
				if calls == 0 || onboards == 0 || restores == 0 || (cfg.failPct > 0 && failed == 0) {
					t.Fatalf("%d SparseAccess calls (%d with Keep) onboarded %d units (%d rewritten after a failed load) and restored %d: the sparse path was not exercised",
						calls, keeps, onboards, failed, restores)
				}
				if cfg.failPct == 0 && failed > 0 {
					t.Fatalf("no transfer was made to fail, and Readiness asked to recompute %d onboarded units", failed)
				}
			}
		})
	}
}

// oracleCovered sums, over the configurations of TestModelOracle, what the
// cache did (its Stats) and the paths the workload took (oracleCoverage).
type oracleCovered struct {
	mu sync.Mutex
	// recomputed counts the tokens recomputed under each policy (by
	// configuration name prefix), onboards the units onboarded.
	recomputedLRU, recomputedFIFO int64
	onboards                      uint64
	// truncRecompute counts the Truncates with tokens to recompute,
	// which the workload meets only now and then (a unit of a block the
	// window moves back over was dropped): reported, not required;
	// TestOracleTruncateCopyFails makes one.
	truncRecompute int64
	// paths counts each path the workload must take.
	paths map[string]int64
}

func (o *oracleCovered) add(cfg oracleConfig, s *oracleServer) {
	st := s.c.Stats()
	c := &s.covered
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.paths == nil {
		o.paths = make(map[string]int64)
	}
	switch {
	case strings.Contains(cfg.name, "lru"):
		o.recomputedLRU += st.RecomputedTokens
	case strings.Contains(cfg.name, "fifo") && !strings.Contains(cfg.name, "s3fifo"):
		o.recomputedFIFO += st.RecomputedTokens
	}
	o.onboards += st.Onboards
	o.truncRecompute += c.truncRecompute.Load()
	if cfg.partial {
		o.paths["Acquire copying part of a cached block"] += st.PartialTokens
	} else if st.PartialTokens != 0 {
		panic(fmt.Sprintf("%s: %d partial tokens without PartialReuse", cfg.name, st.PartialTokens))
	}
	for name, v := range map[string]*atomic.Int64{
		"Truncate rejecting nothing": &c.truncNone, "Truncate of drafts only": &c.truncDrafts,
		"Truncate past the drafts": &c.truncPastDrafts, "Truncate into the prompt": &c.truncIntoPrompt,
		"Truncate to a block boundary": &c.truncBoundary, "Truncate copying the partial block": &c.truncCopy,
		"Prefetch that onboarded":                 &c.prefetched,
		"Acquire whose onboard MaxLoadTokens cut": &c.maxLoadCut, "failed prefill ended by Abort": &c.garbageAbort,
		"failed prefill ended by Release": &c.garbageRelease, "restore through SparseAccess with Keep": &s.sparseKeeps,
	} {
		o.paths[name] += v.Load()
	}
}

// check fails t unless every path was taken: drops and recomputes under
// LRU and FIFO, onboards, and each kind of oracleCoverage.
func (o *oracleCovered) check(t *testing.T) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if t.Failed() {
		return
	}
	t.Logf("recomputed %d tokens under LRU, %d under FIFO; %d units onboarded; %d Truncates with tokens to recompute; paths %v",
		o.recomputedLRU, o.recomputedFIFO, o.onboards, o.truncRecompute, o.paths)
	if o.recomputedLRU == 0 || o.recomputedFIFO == 0 || o.onboards == 0 {
		t.Errorf("the workload recomputed %d tokens under LRU and %d under FIFO, and onboarded %d units: a path was not exercised",
			o.recomputedLRU, o.recomputedFIFO, o.onboards)
	}
	for name, v := range o.paths {
		if v == 0 {
			t.Errorf("no %s in the whole run", name)
		}
	}
}

// TestOracleTruncateCopyFails is an asynchronous Truncate whose
// copy-on-write copy fails under sliding windows: the server recomputes the
// partial block from its first token, so the tables must give the window of
// that token, not only of the next token to write. (They gave only the
// latter: layer 1 (window 20) lacked block 1 and layer 3 (window 12) block 2.)
func TestOracleTruncateCopyFails(t *testing.T) {
	var fail atomic.Bool
	cfg := oracleConfig{name: "truncate", kind: layout.PagedLayer, windows: []int{0, 20, 0, 12},
		policy: kvcache.LRUPolicy, gpu: 40, cpu: 40, async: true, failAll: &fail}
	s, done := newOracle(t, cfg, 1, nil)
	defer done()
	w := newOracleWorkload(3)
	prompt := w.tokens(44)
	plan, err := s.c.Acquire(kvcache.Request{Tokens: prompt})
	if err != nil {
		t.Fatal(err)
	}
	q := s.newSeq(plan.Seq, prompt)
	if err := q.compute(plan.Compute, 0); err != nil {
		t.Fatal(err)
	}
	logits, err := q.lastLogits()
	if err != nil {
		t.Fatal(err)
	}
	for range 10 { // decode to 54 tokens: the windows move past blocks 1 and 2
		if logits, err = q.decode(argmax(logits)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.c.Commit(q.id, len(q.tokens)); err != nil {
		t.Fatal(err)
	}
	fail.Store(true)
	// Block 4 (tokens 32..39) has a child in the tree: the cut at 35 copies it.
	plan, err = s.c.Truncate(q.id, 19)
	if err != nil {
		t.Fatal(err)
	}
	q.cut(35)
	if plan.Loading == 0 || len(plan.Compute) != 0 {
		t.Fatalf("Truncate planned %+v: want the partial block copied, nothing computed", plan)
	}
	rec, err := q.wait(-1)
	if err != nil {
		t.Fatal(err)
	}
	if want := []kvcache.TokenRange{{Start: 32, End: 35}}; !slices.Equal(rec, want) {
		t.Fatalf("the failed copy asks to recompute %v, want %v", rec, want)
	}
	fail.Store(false)
	if err := q.refresh(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ layer, block int }{{1, 1}, {3, 2}} {
		sl, err := s.lay.SliceOf(c.layer, -1)
		if err != nil {
			sl = c.layer
		}
		if q.tables[sl][c.block] < 0 {
			t.Errorf("layer %d: block %d, which recomputing token 32 reads, has no slot: %v", c.layer, c.block, q.tables[sl])
		}
	}
	if err := q.compute(rec, 0); err != nil {
		t.Fatal(err)
	}
	if logits, err = q.lastLogits(); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if logits, err = q.decode(argmax(logits)); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.checkKV(); err != nil {
		t.Fatal(err)
	}
}

// corruptingMover flips one bit in the destination of every nth copy that
// brings a unit to the GPU from a lower tier, after copying it (with once,
// of the nth only).
type corruptingMover struct {
	mem      *kvcache.MemoryStore
	n, seen  int
	once     bool
	corrupts int
}

func (m *corruptingMover) Copy(batch []kvcache.Copy) error {
	if err := m.mem.Copy(batch); err != nil {
		return err
	}
	for _, cp := range batch {
		if cp.To != kvcache.GPU || cp.From == kvcache.GPU {
			continue
		}
		if m.seen++; m.seen%m.n == 0 && (!m.once || m.seen == m.n) {
			buf := m.mem.Bytes(cp.To, cp.Pool, cp.ToSlot)
			buf[(m.seen*131)%len(buf)] ^= 1 << (m.seen % 8)
			m.corrupts++
		}
	}
	return nil
}

// TestOracleCatchesCorruption is the oracle's sensitivity check: with one
// bit flipped in every 7th unit loaded back to the GPU, the served outputs
// differ from the no-cache run.
func TestOracleCatchesCorruption(t *testing.T) {
	ran := 0
	defer func() {
		if ran != 3 {
			t.Errorf("%d configurations ran, want 3 (renamed?)", ran)
		}
	}()
	for _, cfg := range oracleConfigs() {
		// Paged with LRU, MLA (a latent vector per token) with CLA, and
		// sparse sequences under BSA (whose every load is a
		// SparseAccess's onboard): all with a CPU tier and a
		// synchronous Mover.
		if cfg.name != "paged-lru" && cfg.name != "paged-mla-cla-fifo" && cfg.name != "bsa-sparse-lru" {
			continue
		}
		ran++
		t.Run(cfg.name, func(t *testing.T) {
			var mover *corruptingMover
			s, done := newOracle(t, cfg, 1, func(mem *kvcache.MemoryStore) kvcache.Mover {
				mover = &corruptingMover{mem: mem, n: 7}
				return mover
			})
			defer done()
			s.tolerate = true
			runOracle(t, s, 1, 60)
			if mover.corrupts == 0 {
				t.Fatal("no unit was loaded back to the GPU: the workload does not exercise the check")
			}
			if s.mismatches.Load() == 0 {
				t.Fatalf("%d corrupted loads, and every output matched the no-cache run: the oracle misses corruption", mover.corrupts)
			}
			t.Logf("%d corrupted loads: %d mismatches in %d logits and %d K/V vectors", mover.corrupts, s.mismatches.Load(), s.logitsSeen.Load(), s.kvSeen.Load())
		})
	}
}

// TestOracleConcurrent serves four workloads at once on one cache, one
// goroutine each (a server's request handlers), with the checks of
// TestModelOracle: every output of every goroutine equals the no-cache run.
func TestOracleConcurrent(t *testing.T) {
	n := oracleRequests(t) / 2
	for _, cfg := range oracleConfigs() {
		if cfg.name != "paged-lru" && cfg.name != "paged-async-layerwise" && cfg.name != "all-layers-windows-fifo" && cfg.name != "paged-async-layerwise-blockkeys" {
			continue
		}
		t.Run(cfg.name, func(t *testing.T) {
			cfg.gpu, cfg.cpu = 3*cfg.gpu, 2*cfg.cpu
			s, done := newOracle(t, cfg, 5, nil)
			defer done()
			const workers = 4
			errs := make(chan error, workers)
			var served atomic.Int64
			for g := range workers {
				go func() {
					seed := uint64(100 + g)
					w := newOracleWorkload(seed)
					rng := rand.New(rand.NewPCG(seed, 7))
					for i := range n {
						req := w.next()
						out, err := s.serve(req, rng)
						if errors.Is(err, errSkipped) {
							continue
						}
						if err != nil {
							errs <- fmt.Errorf("worker %d, request %d (%s): %w", g, i, summary(req), err)
							return
						}
						served.Add(1)
						w.remember(out)
					}
					errs <- nil
				}()
			}
			for range workers {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			if got := served.Load(); got < int64(workers*n/2) {
				t.Fatalf("only %d of %d requests served", got, workers*n)
			}
			t.Logf("%d requests served, %d logits and %d K/V vectors identical", served.Load(), s.logitsSeen.Load(), s.kvSeen.Load())
		})
	}
}
