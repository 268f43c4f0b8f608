package kvcache

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/kvtier/kvtier/costmodel"
	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/layout"
	"github.com/kvtier/kvtier/radix"
	"github.com/stretchr/testify/require"
)

// The model-based test drives a Cache with random operations, plays the
// server (it writes each computed token's KV into the slots the plans give,
// as bytes derived from the token's whole prefix, namespace, LoRA, slice and
// offset), and after every step checks the cache against a simple reference
// (per sequence: keys and tokens) and the cache's invariants:
//
//   - the internal accounting (checkInvariants): every slot free, pinned or
//     cached-evictable, counts adding up, pins equal to what sequences hold;
//   - every unit with bytes, on either tier, holds exactly the bytes of its
//     tokens (so bytes survive offload and onboard, and nothing overwrote a
//     live slot);
//   - a block is shared only by sequences with equal keys and prefixes;
//   - a unit pinned before and after an operation did not move;
//   - a failed operation (injected copy failure, no space, bad input)
//     changed nothing;
//   - the counters of Stats equal the sums of what the plans of successful
//     operations reported (nothing counted twice, nothing missed);
//   - a router that replays the events knows exactly the tree's blocks and
//     the tier of each of their units.

// errInjected is the failure of faultyMover.
var errInjected = errors.New("injected copy failure")

// faultyMover fails the next batch when armed: having copied nothing, or,
// with panics set, by panicking after its first copy (a Mover with a bug:
// its writes are unknown).
// Stores says that the harness plays the store behind every tier below
// the GPU (storeAdopted writes what Adopt registers), so that Adopt may
// register units there.
func (m *faultyMover) Stores(t Tier) bool { return t > GPU }

type faultyMover struct {
	inner   Mover
	armed   bool
	panics  bool
	batches int
	failed  int
}

func (f *faultyMover) Copy(b []Copy) error {
	f.batches++
	if f.armed {
		f.armed = false
		f.failed++
		if f.panics {
			_ = f.inner.Copy(b[:1])
			panic("injected mover bug")
		}
		return errInjected
	}
	return f.inner.Copy(b)
}

// mix is splitmix64's finalizer.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

func hashString(h uint64, s string) uint64 {
	h = mix(h ^ uint64(len(s)))
	for i := 0; i < len(s); i++ {
		h = mix(h ^ uint64(s[i]))
	}
	return h
}

// prefixHashes returns, for each token j, a hash of (keys, tokens[:j+1]).
func prefixHashes(k radix.Keys, tokens []uint32) []uint64 {
	h := hashString(hashString(0x1234, k.Namespace), k.LoRA)
	out := make([]uint64, len(tokens))
	for j, t := range tokens {
		h = mix(h ^ uint64(t) ^ 0xabcdef<<32)
		out[j] = h
	}
	return out
}

// expectedByte is the KV byte at offset o of a unit of slice sl whose token
// (inside the block) at that offset has prefix hash ph.
func expectedByte(ph uint64, sl int, o int64) byte {
	return byte(mix(ph ^ uint64(sl)<<40 ^ uint64(o)))
}

type modelConfig struct {
	name    string
	kind    layout.Kind
	windows []int
	gpu     Capacity
	cpu     Capacity
	// third, when not zero, is the capacity of a third tier, and more
	// those of further tiers below it.
	third Capacity
	more  []Capacity
	// decider is Config.Decider; plain hides every optional interface of
	// the policies (eviction.Transactional, PinnedInserter,
	// PinnedAccessIgnorer), as a user's policy may have none.
	decider Decider
	plain   bool
	policy  func() PolicyFactory
	// recompute is Config.Recompute; link the Link of every tier below
	// the GPU.
	recompute *costmodel.Recompute
	link      costmodel.Link
	// chaos, when positive, wraps every policy in a chaosPolicy that
	// breaks the contract in one call in chaos.
	chaos int
	// maxBlocks is Config.MaxBlocks.
	maxBlocks int
	// cpuPinnedLiar sets chaosWorld.cpuPinnedLiar (with chaos > 0).
	cpuPinnedLiar bool
	// writeThrough sets TierConfig.WriteThrough on tier 2 (the CPU), or
	// on the tier it names when it is above 2.
	writeThrough Tier
	// async runs the cache with a TransferEngine (manualEngine) instead
	// of a Mover: transfers complete in random order, some fail, and the
	// server waits for readiness before it reads or writes a unit.
	async bool
	// sliced gives the cache steps of 1 to 6 units (see slices.go), so
	// that most Acquires and Releases run as long operations.
	sliced bool
	// blockKeys is Config.BlockKeys; partial Config.PartialReuse (with no
	// recompute: predictAcquire predicts a partial copy without a cost).
	blockKeys, partial bool
	// shares gives the workload's namespaces shares of every tier below
	// the GPU (see modelShares).
	shares bool
}

// modelShares are the shares of tier i (0 the GPU) a model configuration
// with shares has: namespace "a" reserves part of each tier and is capped,
// "b" is capped on the GPU and the CPU and reserves most of the tiers
// below, "" (and the workload's other keys) shares the rest.
func modelShares(i int) []Share {
	switch i {
	case 0:
		return []Share{{Namespace: "a", Reserve: 0.25, Cap: 0.7}, {Namespace: "b", Cap: 0.6}}
	case 1:
		return []Share{{Namespace: "a", Reserve: 0.3, Cap: 0.6}, {Namespace: "b", Cap: 0.3}}
	}
	return []Share{{Namespace: "a", Reserve: 0.2, Cap: 0.5}, {Namespace: "b", Reserve: 0.5}}
}

func constFactory(f PolicyFactory) func() PolicyFactory { return func() PolicyFactory { return f } }

func modelConfigs() []modelConfig {
	return []modelConfig{
		{name: "paged-lru", kind: layout.PagedLayer, gpu: Capacity{Units: 30}, cpu: Capacity{Units: 20}},
		{name: "bsa-lru", kind: layout.BSA, gpu: Capacity{Units: 60}, cpu: Capacity{Units: 40}},
		{name: "paged-window", kind: layout.PagedLayer, windows: []int{6, 0}, gpu: Capacity{Units: 30}, cpu: Capacity{Units: 16}},
		{name: "alllayers-nocpu-fifo", kind: layout.AllLayers, gpu: Capacity{Units: 14}, policy: constFactory(FIFOPolicy())},
		{name: "paged-prioritized", kind: layout.PagedLayer, gpu: Capacity{Units: 30}, cpu: Capacity{Units: 20}, policy: constFactory(PrioritizedLRUPolicy())},
		{name: "bsa-s3fifo", kind: layout.BSA, windows: []int{0, 8}, gpu: Capacity{Units: 60}, cpu: Capacity{Units: 40},
			policy: constFactory(S3FIFOPolicy(eviction.S3FIFOConfig{}))},
		{name: "paged-retention", kind: layout.PagedLayer, gpu: Capacity{Units: 30}, cpu: Capacity{Units: 20},
			policy: constFactory(RetentionPolicy()), recompute: &costmodel.Recompute{Alpha: 1e-6, Beta: 1e-3}},
		{name: "bsa-cost", kind: layout.BSA, gpu: Capacity{Units: 60}, cpu: Capacity{Bytes: 40 * 16},
			recompute: &costmodel.Recompute{Beta: 2e-7}, link: costmodel.Link{BytesPerSecond: 1e9}},
		{name: "paged-fifo-budget", kind: layout.PagedLayer, gpu: Capacity{Units: 30}, cpu: Capacity{Units: 20},
			policy: constFactory(FIFOPolicy()), maxBlocks: 12},
		// Three tiers: the CPU's victims move down to a third tier, whose
		// victims are dropped; units load back from either.
		{name: "paged-3tier", kind: layout.PagedLayer, gpu: Capacity{Units: 30}, cpu: Capacity{Units: 10}, third: Capacity{Units: 16}},
		{name: "paged-3tier-arc", kind: layout.PagedLayer, windows: []int{0, 6}, gpu: Capacity{Units: 30}, cpu: Capacity{Units: 10},
			third: Capacity{Units: 16}, policy: constFactory(ARCPolicy(eviction.ARCConfig{}))},
		// Partial-block reuse, dense and with windows.
		{name: "paged-partial", kind: layout.PagedLayer, gpu: Capacity{Units: 30}, cpu: Capacity{Units: 20}, partial: true},
		{name: "bsa-windows-partial", kind: layout.BSA, windows: []int{0, 8}, gpu: Capacity{Units: 60}, cpu: Capacity{Units: 24}, partial: true},
		{name: "bsa-wtinylfu", kind: layout.BSA, windows: []int{0, 8}, gpu: Capacity{Units: 60}, cpu: Capacity{Units: 24},
			policy: constFactory(WTinyLFUPolicy(eviction.WTinyLFUConfig{WindowRatio: 0.1}))},
		{name: "bsa-3tier-cost", kind: layout.BSA, windows: []int{0, 8}, gpu: Capacity{Units: 60}, cpu: Capacity{Units: 16},
			third: Capacity{Units: 40}, policy: constFactory(S3FIFOPolicy(eviction.S3FIFOConfig{})),
			recompute: &costmodel.Recompute{Beta: 2e-7}, link: costmodel.Link{BytesPerSecond: 1e9}},
		// Policies with no optional interface (compensated call by call
		// on rollback), over three tiers.
		{name: "paged-3tier-plain", kind: layout.PagedLayer, gpu: Capacity{Units: 30}, cpu: Capacity{Units: 4},
			third: Capacity{Units: 8}, plain: true},
		// Four small tiers and a Decider that moves every victim it is
		// asked about (blocks lacking a unit too).
		{name: "bsa-4tier-always", kind: layout.BSA, windows: []int{6, 0}, gpu: Capacity{Units: 60}, cpu: Capacity{Units: 6},
			third: Capacity{Units: 8}, more: []Capacity{{Units: 10}}, decider: func(Victim) bool { return true }},
		// Write-through to the CPU: committed GPU units get backups
		// there, GPU evictions move to them for free.
		{name: "paged-writethrough", kind: layout.PagedLayer, gpu: Capacity{Units: 30}, cpu: Capacity{Units: 24}, writeThrough: CPU},
		{name: "bsa-3tier-writethrough", kind: layout.BSA, windows: []int{0, 8}, gpu: Capacity{Units: 60}, cpu: Capacity{Units: 20},
			third: Capacity{Units: 30}, writeThrough: CPU, policy: constFactory(S3FIFOPolicy(eviction.S3FIFOConfig{}))},
		// Write-through to the tier below the CPU (a store): units on
		// the GPU or the CPU keep a backup there.
		{name: "paged-3tier-writethrough-below", kind: layout.PagedLayer, gpu: Capacity{Units: 30}, cpu: Capacity{Units: 10},
			third: Capacity{Units: 24}, writeThrough: 3},
	}
}

// tiers returns the tiers of mc: the GPU, the CPU unless its capacity is
// zero, and a third tier when it has one, each with mc's policy.
func (mc modelConfig) tiers() []TierConfig {
	tiers := GPUAndCPU(mc.gpu, mc.cpu)
	if mc.third != (Capacity{}) {
		tiers = append(tiers, TierConfig{Name: "disk", Capacity: mc.third})
	}
	for i, more := range mc.more {
		tiers = append(tiers, TierConfig{Name: fmt.Sprintf("store%d", i+1), Capacity: more})
	}
	for i := range tiers {
		if mc.policy != nil {
			tiers[i].Policy = mc.policy()
		}
		if i > 0 {
			tiers[i].Link = mc.link
		}
		if mc.shares {
			tiers[i].Shares = modelShares(i)
		}
	}
	switch {
	case mc.writeThrough > CPU:
		tiers[mc.writeThrough-1].WriteThrough = true
	case mc.writeThrough != 0:
		tiers[1].WriteThrough = true
	}
	return tiers
}

type refSeq struct {
	keys    radix.Keys
	tokens  []uint32
	sparse  bool
	pending []uint32
	// unwritten holds the token ranges the cache told the server to
	// compute that its forward pass has not written yet: the harness plays
	// a server that writes late (chunked prefill, a step that has not run)
	// or never (a request dropped before its prefill).
	unwritten []TokenRange
	// committed is how many tokens the server declared written (Commit,
	// or implicitly Append and Fork).
	committed int
}

// written reports whether token j of q has been written.
func (q *refSeq) written(j int) bool {
	for _, r := range q.unwritten {
		if j >= r.Start && j < r.End {
			return false
		}
	}
	return j < len(q.tokens)
}

type harness struct {
	t      testing.TB
	c      *Cache
	store  *MemoryStore
	mover  *faultyMover
	lay    *layout.Layout
	choose func(n int) int
	ref    map[SeqID]*refSeq
	order  []SeqID
	bases  [][]uint32
	res    SparseResult
	clock  *eviction.ManualClock
	events []Event
	steps  int
	// routed is the tier of each unit of each known block, by block hash,
	// as a router replaying the events sees it.
	routed map[uint64][]Tier
	// media is each block's medium as BlockStored and BlockMoved said.
	media map[uint64]Tier
	plans ledger
	// counts of what happened, to show the test exercised each path
	counts map[string]int
	// chaos is the world of the chaos policies (nil without them);
	// poisoned is the ErrPolicy error that ended the run.
	chaos    *chaosWorld
	poisoned error
	// sinkPanics counts the panics the event sink raised.
	sinkPanics uint64
	// costArmed, under chaos with a cost model, lets its weight function
	// panic (once the cache is built: New probes it).
	costArmed bool
	// engine is the transfer engine of an asynchronous run (nil: a
	// Mover); failPct the percentage of its transfers that fail.
	engine  *manualEngine
	failPct int
	op      int
}

func newHarness(t testing.TB, mc modelConfig, choose func(int) int) *harness {
	m := layout.Model{Name: "tiny", Layers: 2, QueryHeads: 4, KVHeads: 2, HeadDim: 2, ElemBytes: 1, Windows: mc.windows}
	l, err := layout.New(m, mc.kind, 4)
	require.NoError(t, err)
	store, err := NewMemoryStore(l, mc.tiers())
	require.NoError(t, err)
	h := &harness{t: t, store: store, mover: &faultyMover{inner: store}, lay: l, choose: choose,
		ref: map[SeqID]*refSeq{}, counts: map[string]int{}, clock: &eviction.ManualClock{},
		routed: map[uint64][]Tier{}, media: map[uint64]Tier{}}
	cfg := Config{Layout: l, Tiers: mc.tiers(), Mover: h.mover, Recompute: mc.recompute, Decider: mc.decider,
		Clock: h.clock, MaxBlocks: mc.maxBlocks, BlockKeys: mc.blockKeys, PartialReuse: mc.partial, Events: func(e Event) {
			h.events = append(h.events, e)
			h.route(e)
			// A sink with a bug, now and then, after it recorded the
			// event: the cache must count it and go on delivering.
			if h.choose(64) == 0 {
				h.sinkPanics++
				panic("injected sink bug")
			}
		}}
	if mc.chaos > 0 && mc.recompute != nil {
		// The cost model decides what eviction does: a weight function
		// with a bug poisons the cache like a policy.
		rc := *mc.recompute
		weight := rc.LayerWeight
		if weight == nil {
			weight = costmodel.SeedLayerWeight
		}
		rc.LayerWeight = func(i, n int) float64 {
			if h.costArmed && h.choose(mc.chaos) == 0 {
				h.chaos.breaches["cost model panic"]++
				panic("injected cost model bug")
			}
			return weight(i, n)
		}
		cfg.Recompute = &rc
	}
	if mc.async {
		h.engine = &manualEngine{h: h}
		h.failPct = 10 + choose(21)
		cfg.Mover, cfg.Engine = nil, h.engine
	}
	if mc.plain {
		for i := range cfg.Tiers {
			f := cfg.Tiers[i].Policy
			if f == nil {
				f = LRUPolicy()
			}
			cfg.Tiers[i].Policy = func(info PoolInfo) (eviction.Policy[UnitID], error) {
				p, err := f(info)
				if err != nil {
					return nil, err
				}
				return plainPolicy{p}, nil
			}
		}
	}
	if mc.chaos > 0 {
		h.chaos = &chaosWorld{choose: choose, oneIn: mc.chaos, breaches: map[string]int{}, cpuPinnedLiar: mc.cpuPinnedLiar}
		for i := range cfg.Tiers {
			f := cfg.Tiers[i].Policy
			if f == nil {
				f = LRUPolicy()
			}
			cfg.Tiers[i].Policy = chaosFactory(h.chaos, f)
		}
	}
	h.c, err = New(cfg)
	require.NoError(t, err)
	if mc.sliced {
		h.c.sliceUnits = 1 + choose(6)
	}
	h.costArmed = true
	for range 4 {
		b := make([]uint32, 8+choose(18))
		for i := range b {
			b[i] = uint32(choose(3))
		}
		h.bases = append(h.bases, b)
	}
	return h
}

// route applies an event to the router's view (routed).
func (h *harness) route(e Event) {
	switch e.Kind {
	case BlockStored:
		_, known := h.routed[e.Hash]
		require.False(h.t, known, "step %d: block %x stored twice", h.steps, e.Hash)
		tiers := make([]Tier, h.lay.UnitsPerBlock())
		for i := range tiers {
			tiers[i] = e.To
		}
		h.routed[e.Hash] = tiers
		h.media[e.Hash] = e.To
	case BlockMoved:
		tiers, known := h.routed[e.Hash]
		require.True(h.t, known, "step %d: block moved event for unknown block %x", h.steps, e.Hash)
		require.Equal(h.t, h.media[e.Hash], e.From, "step %d: block %x moved from %s", h.steps, e.Hash, e.From)
		require.Equal(h.t, Medium(tiers), e.To, "step %d: block %x moved to %s, its units say %s", h.steps, e.Hash, e.To, Medium(tiers))
		require.NotEqual(h.t, e.From, e.To)
		h.media[e.Hash] = e.To
	case BlockRemoved:
		_, known := h.routed[e.Hash]
		require.True(h.t, known, "step %d: unknown block %x removed", h.steps, e.Hash)
		delete(h.routed, e.Hash)
		delete(h.media, e.Hash)
	case AllCleared:
		clear(h.routed)
		clear(h.media)
	default:
		tiers, known := h.routed[e.Hash]
		require.True(h.t, known, "step %d: %s event for unknown block %x", h.steps, e.Kind, e.Hash)
		require.Equal(h.t, e.From, tiers[e.Slice], "step %d: %s event of block %x slice %d", h.steps, e.Kind, e.Hash, e.Slice)
		require.Equal(h.t, h.c.SlicePool(e.Slice), e.Pool)
		tiers[e.Slice] = e.To
	}
}

// ledger sums what the plans of successful operations reported.
type ledger struct {
	lost                              uint64
	offloads, onboards, copies, drops uint64
	bytesMoved, recomputed            int64
	// hits and misses per tier (index t-1): a unit found on tier t is a
	// miss on every tier above it and a hit on t, one found nowhere a
	// miss on every tier.
	hits, misses [MaxTiers]uint64
	// movedIn is, per tier (index t-1), the bytes of the executed
	// copies down into it.
	movedIn [MaxTiers]int64
	// missing is, per tier (index t-1), the copies to the GPU from it
	// that the engine reported missing (the asynchronous mode).
	missing [MaxTiers]uint64
}

// lookup records one unit lookup that found the unit on tier found
// (Dropped: nowhere) in a cache of tiers tiers.
func (l *ledger) lookup(found Tier, tiers int) {
	for t := GPU; int(t) <= tiers; t++ {
		if t == found {
			l.hits[t-1]++
			return
		}
		l.misses[t-1]++
	}
}

// record adds plan p to the ledger; lookups says whether the operation
// counts its units as cache lookups (a dense Acquire).
func (h *harness) record(p Plan, lookups bool) {
	l := &h.plans
	l.offloads += uint64(p.Offloaded)
	l.onboards += uint64(p.Onboarded)
	l.copies += uint64(p.Copied)
	l.drops += uint64(p.Dropped)
	l.recomputed += int64(p.RecomputeTokens)
	for _, cp := range p.Executed {
		l.bytesMoved += h.lay.Pools()[cp.Pool].UnitBytes
		h.countCopy(cp)
	}
	if lookups {
		// An Acquire's copies to the GPU are its onboards, from the tier
		// each names, then the copies of a partial copy's block (the
		// block past the cached prefix, placed last), a miss everywhere.
		tiers := h.c.Tiers()
		for range p.Hits {
			l.lookup(GPU, tiers)
		}
		var toGPU []Copy
		for _, cp := range p.Executed {
			if cp.To == GPU {
				toGPU = append(toGPU, cp)
			}
		}
		require.GreaterOrEqual(h.t, len(toGPU), p.Copied, "step %d: copies", h.steps)
		onboards := toGPU[:len(toGPU)-p.Copied]
		for _, cp := range onboards {
			l.lookup(cp.From, tiers)
		}
		require.Equal(h.t, p.Onboarded, len(onboards), "step %d: onboards and their copies", h.steps)
		for range p.Copied {
			l.lookup(Dropped, tiers)
		}
		for range p.Computed {
			l.lookup(Dropped, tiers)
		}
	}
}

// countCopy counts the copies that use a tier below the CPU, so that the
// test shows it ran them.
func (h *harness) countCopy(cp Copy) {
	if cp.From != Dropped && cp.To == cp.From+1 {
		h.plans.movedIn[cp.To-1] += h.lay.Pools()[cp.Pool].UnitBytes
	}
	switch {
	case cp.To > CPU:
		h.counts["move down below the CPU"]++
	case cp.From > CPU && cp.To == GPU:
		h.counts["load from below the CPU"]++
	}
}

// plainPolicy hides every optional interface of the policy it wraps
// (eviction.Transactional, PinnedInserter, PinnedAccessIgnorer): a user's
// policy may have none.
type plainPolicy struct{ eviction.Policy[UnitID] }

// recordSparse adds a SparseAccess result of a sequence of n tokens to
// the ledger.
func (h *harness) recordSparse(r *SparseResult, n int) {
	l := &h.plans
	B := h.c.BlockTokens()
	recomputed := map[int]bool{}
	for _, u := range r.Units {
		if u.From == Dropped && !recomputed[u.Block] {
			recomputed[u.Block] = true
			l.recomputed += int64(min((u.Block+1)*B, n) - u.Block*B)
		}
	}
	l.offloads += uint64(r.Offloaded)
	l.onboards += uint64(r.Onboarded)
	l.drops += uint64(r.Dropped)
	for _, cp := range r.Executed {
		l.bytesMoved += h.lay.Pools()[cp.Pool].UnitBytes
		h.countCopy(cp)
	}
	for _, u := range r.Units {
		l.lookup(u.From, h.c.Tiers())
	}
}

// checkLedger compares Stats with the ledger and the router's view with
// the tree.
func (h *harness) checkLedger() {
	st, l := h.c.Stats(), h.plans
	require.Equal(h.t, l.offloads, st.Offloads, "step %d: offloads", h.steps)
	require.Equal(h.t, l.onboards, st.Onboards, "step %d: onboards", h.steps)
	require.Equal(h.t, l.copies, st.Copies, "step %d: copies", h.steps)
	var drops, lost, evictions, movedIn uint64
	for i, ts := range st.Tiers {
		drops += ts.Drops
		lost += ts.Lost
		evictions += ts.Evictions
		movedIn += ts.MovedIn
		require.Equal(h.t, l.hits[i], ts.Hits, "step %d: hits of %s", h.steps, ts.Name)
		require.Equal(h.t, l.missing[i], ts.Missing, "step %d: units missing from %s", h.steps, ts.Name)
		require.Equal(h.t, l.misses[i], ts.Misses, "step %d: misses of %s", h.steps, ts.Name)
		// The ledger sees the copies of the operations that list them
		// (a Prefetch reports counts only), and an eviction to a backup
		// copies nothing: it is a lower bound.
		require.LessOrEqual(h.t, l.movedIn[i], ts.MovedInBytes, "step %d: bytes moved into %s", h.steps, ts.Name)
		if pools := h.lay.Pools(); pools[0].UnitBytes == pools[len(pools)-1].UnitBytes {
			require.Equal(h.t, int64(ts.MovedIn)*pools[0].UnitBytes, ts.MovedInBytes, "step %d: bytes moved into %s", h.steps, ts.Name)
		}
		if i > 0 {
			require.Equal(h.t, st.Tiers[i-1].Misses, ts.Hits+ts.Misses, "step %d: %s sees the misses of the tier above", h.steps, ts.Name)
			require.Equal(h.t, st.Tiers[i-1].Evictions-st.Tiers[i-1].Drops, ts.MovedIn, "step %d: %s receives the moves of the tier above", h.steps, ts.Name)
		}
	}
	require.Equal(h.t, l.drops, drops, "step %d: drops", h.steps)
	require.Equal(h.t, l.lost, lost, "step %d: units lost to a Mover's panic", h.steps)
	require.Equal(h.t, l.offloads+l.drops, evictions, "step %d: evictions", h.steps)
	require.Equal(h.t, l.offloads, movedIn, "step %d: moves down", h.steps)
	require.Zero(h.t, st.Tiers[len(st.Tiers)-1].Evictions-st.Tiers[len(st.Tiers)-1].Drops, "step %d: the last tier drops every victim", h.steps)
	require.Equal(h.t, l.bytesMoved, st.BytesMoved, "step %d: bytes moved", h.steps)
	require.Equal(h.t, l.recomputed, st.RecomputedTokens, "step %d: recomputed tokens", h.steps)
	if h.media != nil && h.c.events.enabled() {
		blocks, err := h.c.Blocks(nil)
		require.NoError(h.t, err)
		for _, b := range blocks {
			require.Equal(h.t, h.media[b.Hash], b.Medium, "step %d: Blocks's medium of block %x", h.steps, b.Hash)
		}
	}
	c := h.c
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Equal(h.t, c.tree.Len(), len(h.routed), "step %d: blocks known to the router", h.steps)
	for n := range c.tree.All() {
		tiers, ok := h.routed[n.Hash()]
		require.True(h.t, ok, "step %d: the router does not know block %x", h.steps, n.Hash())
		require.Equal(h.t, Medium(tiers), h.media[n.Hash()], "step %d: block %x's medium as its BlockStored and BlockMoved events said", h.steps, n.Hash())
		for sl := range c.geom.slices {
			st := c.units.of(c.units.id(n.Value, sl))
			want := st.tier
			if st.flags&unitUnwritten != 0 {
				want = Dropped // its load failed: reported dropped
			}
			require.Equal(h.t, want, tiers[sl], "step %d (op %d): router's tier of block %x slice %d; flags %d backup %d busy %d", h.steps, h.op, n.Hash(), sl, st.flags, st.backup, st.busy)
		}
	}
}

// expectedAcquire is what a dense Acquire must report in its Plan.
type expectedAcquire struct {
	hits, onboards, fresh, recompute int
	// copied and partial are the units and tokens of a partial copy.
	copied, partial int
}

// predictAcquire predicts the plan of a dense Acquire of req from the state
// before the call, by the rule of Acquire: every unit of every prompt block
// is pinned; a matched block one of whose units has no bytes is recomputed
// whole into a private copy, so all its units are fresh (a CPU copy is not
// brought back to be overwritten); the units of other matched blocks are
// hits or onboards; unmatched blocks are fresh. It also returns how many
// units of recomputed blocks were on the CPU.
func (h *harness) predictAcquire(req Request) (expectedAcquire, int) {
	c := h.c
	c.mu.Lock()
	defer c.mu.Unlock()
	nodes, err := c.tree.Match(nil, radix.Keys{Namespace: req.Namespace, LoRA: req.LoRA}, req.Tokens, req.Extra)
	require.NoError(h.t, err)
	B := c.geom.blockTokens
	var e expectedAcquire
	released := 0
	for i, n := range nodes {
		dropped := false
		for sl := range c.geom.slices {
			st := c.units.of(c.units.id(n.Value, sl))
			dropped = dropped || st.tier == Dropped || st.flags&unitUnwritten != 0
		}
		if dropped {
			// Recomputed whole into a private copy: every unit fresh.
			e.recompute += min((i+1)*B, len(req.Tokens)) - i*B
			e.fresh += c.geom.slices
			for sl := range c.geom.slices {
				if t := c.units.of(c.units.id(n.Value, sl)).tier; t != GPU && t != Dropped {
					released++
				}
			}
			continue
		}
		for sl := range c.geom.slices {
			switch c.units.of(c.units.id(n.Value, sl)).tier {
			case GPU:
				e.hits++
			default: // on a lower tier (none dropped here)
				e.onboards++
			}
		}
	}
	e.fresh += (c.geom.numBlocks(len(req.Tokens)) - len(nodes)) * c.geom.slices
	if c.partialReuse && len(nodes) < c.geom.numBlocks(len(req.Tokens)) {
		// The cached block past the prefix that agrees with the most of
		// the prompt's next block's first tokens (the first one so found,
		// in insertion order), copied if its every unit holds bytes.
		next := req.Tokens[len(nodes)*B : min(len(req.Tokens), (len(nodes)+1)*B)]
		children := c.tree.Roots()
		if len(nodes) > 0 {
			children = nodes[len(nodes)-1].Children()
		}
		var best *radix.Node[int32]
		agree := 0
		for n := range children {
			if len(nodes) == 0 && n.Keys() != (radix.Keys{Namespace: req.Namespace, LoRA: req.LoRA}) {
				continue
			}
			k := 0
			for k < len(next) && n.Tokens()[k] == next[k] {
				k++
			}
			if k > agree {
				best, agree = n, k
			}
		}
		whole := best != nil
		for sl := range c.geom.slices {
			if whole {
				st := c.units.of(c.units.id(best.Value, sl))
				whole = st.tier != Dropped && st.flags&unitUnwritten == 0
			}
		}
		if whole {
			e.fresh -= c.geom.slices
			e.copied, e.partial = c.geom.slices, agree
		}
	}
	return e, released
}

// checkComputePinned verifies that the server has a slot, in every layer,
// for what plan p of sequence id asks it to compute: every block holding a
// token of p.Compute is pinned in every pool, and so, for a dense
// sequence, is every block a windowed layer reads while computing them (the
// window of the first token to compute).
func (h *harness) checkComputePinned(id SeqID, p Plan) {
	if len(p.Compute) == 0 {
		return
	}
	B := h.c.BlockTokens()
	q := h.ref[id]
	n := len(q.tokens)
	first := p.Compute[0].Start
	for sl := range h.lay.UnitsPerBlock() {
		table, err := h.c.BlockTable(nil, id, sl)
		require.NoError(h.t, err)
		from := first / B
		if w := h.lay.Pools()[h.c.SlicePool(sl)].Window; !q.sparse && w > 0 {
			from = max(0, (first+1-w)/B)
		} else if !q.sparse {
			from = 0
		}
		for i := from; i*B < n; i++ {
			computed := false
			for _, r := range p.Compute {
				computed = computed || (r.Start < (i+1)*B && r.End > i*B)
			}
			if !computed && q.sparse {
				continue
			}
			require.NotEqual(h.t, int32(-1), table[i], "step %d: seq %d slice %d block %d: no slot, plan computes %v", h.steps, id, sl, i, p.Compute)
		}
	}
}

// checkCopiesUseful verifies that no copy of plan p (an onboard or a
// copy-on-write copy) filled a unit of sequence id whose block the server
// recomputes anyway: its bytes would be overwritten.
func (h *harness) checkCopiesUseful(id SeqID, p Plan) {
	B := h.c.BlockTokens()
	n := len(h.ref[id].tokens)
	for _, cp := range p.Executed {
		if cp.To != GPU {
			continue
		}
		found := false
		for i := 0; i*B < n && !found; i++ {
			for sl := range h.lay.UnitsPerBlock() {
				loc, err := h.c.Locate(id, i, sl)
				require.NoError(h.t, err)
				if loc.Tier != GPU || loc.Pool != cp.Pool || loc.Slot != cp.ToSlot {
					continue
				}
				found = true
				for _, r := range p.Compute {
					// A block computed from its first token; a partial
					// copy's block is computed after the tokens copied.
					require.False(h.t, r.Start <= i*B && r.End > i*B,
						"step %d: copy %+v fills block %d slice %d, which is recomputed (%v)", h.steps, cp, i, sl, p.Compute)
				}
			}
		}
		require.True(h.t, found, "step %d: copy %+v fills no unit of sequence %d", h.steps, cp, id)
	}
}

// snapshot is the observable state a failed operation must not change.
type snapshot struct {
	units  map[string]string
	seqs   map[SeqID]string
	stats  Stats
	events int
}

func (h *harness) snapshot() snapshot {
	c := h.c
	s := snapshot{units: map[string]string{}, seqs: map[SeqID]string{}, stats: c.Stats(), events: len(h.events)}
	c.mu.Lock()
	defer c.mu.Unlock()
	for b := range c.units.records() {
		r := c.units.blk(b)
		if !r.live {
			continue
		}
		key := fmt.Sprintf("private %d", b)
		if r.node != nil {
			key = fmt.Sprintf("node %x", r.node.Hash())
		}
		var state []string
		for sl := range c.geom.slices {
			u := c.units.id(int32(b), sl)
			state = append(state, fmt.Sprintf("%s/%d/%d", c.units.of(u).tier, c.units.of(u).slot, c.units.of(u).pins))
		}
		s.units[key] = fmt.Sprintf("refs %d held %d %v", r.refs, r.held, state)
	}
	for id, q := range c.seqs {
		s.seqs[id] = fmt.Sprintf("%v %v %v %d %v", q.tokens, q.blocks, q.pinLo, q.writeFrom, q.stepPins)
	}
	return s
}

// holders returns the live sequences whose blocks include record b, in
// order (Cache.mu held).
func (h *harness) holders(b int32) []SeqID {
	var out []SeqID
	for id, s := range h.c.seqs {
		if slices.Contains(s.blocks, b) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// pinnedAt is where a pinned unit is, and which sequences hold its block.
type pinnedAt struct {
	where   string
	holders []SeqID
}

// pinnedSlots returns where every pinned unit of a block of the tree is,
// keyed by its block's hash and its slice, with the sequences that hold the
// block.
func (h *harness) pinnedSlots() map[string]pinnedAt {
	c := h.c
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]pinnedAt{}
	for b := range c.units.records() {
		r := c.units.blk(b)
		if !r.live || r.node == nil {
			continue
		}
		for sl := range c.geom.slices {
			u := c.units.id(int32(b), sl)
			if c.units.of(u).pins > 0 {
				out[fmt.Sprintf("%x/%d", r.node.Hash(), sl)] = pinnedAt{where: fmt.Sprintf("%s/%d", c.units.of(u).tier, c.units.of(u).slot), holders: h.holders(b)}
			}
		}
	}
	return out
}

func (h *harness) randomTokens(n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(h.choose(3))
	}
	return out
}

func (h *harness) pickSeq() (SeqID, *refSeq, bool) {
	if len(h.order) == 0 {
		return 0, nil, false
	}
	id := h.order[h.choose(len(h.order))]
	return id, h.ref[id], true
}

func (h *harness) forget(id SeqID) {
	delete(h.ref, id)
	h.order = slices.DeleteFunc(h.order, func(x SeqID) bool { return x == id })
}

// fill writes, as the server would, the KV of tokens [start, end) of
// sequence id into every unit of theirs that is on the GPU.
func (h *harness) fill(id SeqID, start, end int) {
	q := h.ref[id]
	ph := prefixHashes(q.keys, q.tokens)
	B := h.c.BlockTokens()
	str := h.lay.Strides()
	for sl := range h.lay.UnitsPerBlock() {
		for i := start / B; i*B < end; i++ {
			loc, err := h.c.Locate(id, i, sl)
			require.NoError(h.t, err)
			if loc.Tier != GPU {
				continue
			}
			buf := h.store.Bytes(GPU, loc.Pool, loc.Slot)
			for o := range int64(len(buf)) {
				j := i*B + int((o/str.Token)%int64(B))
				if j >= start && j < end {
					buf[o] = expectedByte(ph[j], sl, o)
				}
			}
		}
	}
}

// fillUnit writes the whole valid part of one unit (a recomputed unit).
func (h *harness) fillUnit(id SeqID, block, sl int) {
	q := h.ref[id]
	ph := prefixHashes(q.keys, q.tokens)
	B := h.c.BlockTokens()
	str := h.lay.Strides()
	loc, err := h.c.Locate(id, block, sl)
	require.NoError(h.t, err)
	require.Equal(h.t, GPU, loc.Tier)
	buf := h.store.Bytes(GPU, loc.Pool, loc.Slot)
	for o := range int64(len(buf)) {
		j := block*B + int((o/str.Token)%int64(B))
		if j < len(q.tokens) {
			buf[o] = expectedByte(ph[j], sl, o)
		}
	}
}

// fillPlan records what plan p tells the server to compute for sequence
// id; the harness writes it later, when the forward pass runs (forward).
func (h *harness) fillPlan(id SeqID, p Plan) {
	q := h.ref[id]
	for _, r := range p.Compute {
		require.GreaterOrEqual(h.t, r.Start, 0)
		require.LessOrEqual(h.t, r.End, len(q.tokens))
		q.unwritten = append(q.unwritten, r)
	}
}

// forward runs the server's forward pass for sequence id up to token upTo:
// it writes every range the cache asked for below upTo.
func (h *harness) forward(id SeqID, upTo int) {
	q := h.ref[id]
	var rest []TokenRange
	for _, r := range q.unwritten {
		if r.Start < upTo {
			h.fill(id, r.Start, min(r.End, upTo))
		}
		if r.End > upTo {
			rest = append(rest, TokenRange{Start: max(r.Start, upTo), End: r.End})
		}
	}
	q.unwritten = rest
	if len(rest) == 0 {
		q.unwritten = nil
	}
}

// cut forgets the unwritten ranges of q past token n (truncated).
func (q *refSeq) cut(n int) {
	var rest []TokenRange
	for _, r := range q.unwritten {
		if r.Start < n {
			rest = append(rest, TokenRange{Start: r.Start, End: min(r.End, n)})
		}
	}
	q.unwritten = rest
	q.committed = min(q.committed, n)
}

// checkBytes verifies every unit with bytes against its tokens.
// privateOwners maps every private block of a live sequence (one not in
// the prefix tree) to its sequence (Cache.mu held).
func (c *Cache) privateOwners() map[int32]*sequence {
	owner := map[int32]*sequence{}
	for _, s := range c.seqs {
		for _, b := range s.blocks {
			if c.units.blk(b).node == nil {
				owner[b] = s
			}
		}
	}
	return owner
}

// chainTokens returns the tokens of n's chain, from the root's child down
// to n, and the number of nodes in it.
func chainTokens(n *radix.Node[int32]) ([]uint32, int) {
	var chain [][]uint32
	for ; n != nil; n = n.Parent() {
		chain = append(chain, n.Tokens())
	}
	var tokens []uint32
	for i := len(chain) - 1; i >= 0; i-- {
		tokens = append(tokens, chain[i]...)
	}
	return tokens, len(chain)
}

func (h *harness) checkBytes() {
	c := h.c
	c.mu.Lock()
	defer c.mu.Unlock()
	B := c.geom.blockTokens
	str := h.lay.Strides()
	owner := c.privateOwners()
	// A tree block holds only committed, hence written, KV: every byte of
	// every unit with bytes is checked. A private block is checked where
	// its owner's server wrote it.
	for b := range c.units.records() {
		r := c.units.blk(b)
		if !r.live || r.held == 0 {
			continue
		}
		var keys radix.Keys
		var tokens []uint32
		valid := B
		written := func(int) bool { return true }
		idx := int(r.index)
		if r.node != nil {
			keys = r.node.Keys()
			var depth int
			tokens, depth = chainTokens(r.node)
			require.Equal(h.t, idx+1, depth)
		} else {
			s := owner[int32(b)]
			if r.orphan {
				continue // its sequence ended; a transfer still holds it
			}
			require.NotNil(h.t, s, "private block %d without owner", b)
			keys = s.keys
			tokens = s.tokens.appendTo(nil)
			valid = len(tokens) - idx*B
			q := h.ref[s.id]
			if q == nil {
				// The sequence of an operation that met a policy breach:
				// the server never learnt of it.
				continue
			}
			written = q.written
		}
		ph := prefixHashes(keys, tokens)
		for sl := range c.geom.slices {
			u := c.units.id(int32(b), sl)
			st := c.units.of(u)
			type copyAt struct {
				tier Tier
				slot int32
			}
			var copies []copyAt
			if st.tier != Dropped && !st.loading() && !st.storing() && st.flags&unitUnwritten == 0 {
				// (Otherwise no bytes, or not yet: in flight, or a
				// failed load waiting for its recompute.)
				copies = append(copies, copyAt{st.tier, st.slot})
			}
			if st.backup != 0 && st.flags&unitBacking == 0 {
				copies = append(copies, copyAt{c.wt.tier, st.backup - 1}) // write-through
			}
			for _, at := range copies {
				buf := h.store.Bytes(at.tier, c.poolOf(u), at.slot)
				for o := range int64(len(buf)) {
					t := int((o / str.Token) % int64(B))
					if t >= valid || !written(idx*B+t) {
						continue
					}
					if buf[o] != expectedByte(ph[idx*B+t], sl, o) {
						h.t.Fatalf("step %d (op %d): block %d (index %d, tree %t) slice %d on %s slot %d (location %s): byte %d corrupted",
							h.steps, h.op, b, idx, r.node != nil, sl, at.tier, at.slot, st.tier, o)
					}
				}
			}
		}
	}
}

// storeAdopted plays the store behind tier t after Adopt: it holds the
// bytes of the first blocks blocks of req, which it writes into the slots
// of their units on t (those there before hold them already).
func (h *harness) storeAdopted(req Request, blocks int, t Tier) {
	c := h.c
	c.mu.Lock()
	defer c.mu.Unlock()
	keys, nodes, err := c.match(&req)
	require.NoError(h.t, err)
	B := c.geom.blockTokens
	str := h.lay.Strides()
	ph := prefixHashes(keys, req.Tokens)
	for i := range min(blocks, len(nodes)) {
		for sl := range c.geom.slices {
			u := c.units.id(nodes[i].Value, sl)
			st := c.units.of(u)
			if st.tier != t || st.loading() || st.storing() {
				continue
			}
			buf := h.store.Bytes(t, c.poolOf(u), st.slot)
			for o := range int64(len(buf)) {
				buf[o] = expectedByte(ph[i*B+int((o/str.Token)%int64(B))], sl, o)
			}
		}
	}
}

// checkSharing verifies that sequences share blocks only with equal keys
// and prefixes, and that the reference agrees with the cache.
func (h *harness) checkSharing() {
	c := h.c
	c.mu.Lock()
	defer c.mu.Unlock()
	B := c.geom.blockTokens
	if h.poisoned == nil {
		// A poisoned cache may have half-done the operation that met the
		// breach: the reference no longer follows it, its own tree must.
		require.Equal(h.t, len(h.ref), len(c.seqs))
		for id, q := range h.ref {
			s := c.seqs[id]
			require.NotNil(h.t, s, "seq %d", id)
			require.Equal(h.t, q.tokens, s.tokens.appendTo(q.tokens[:0:0]), "seq %d tokens", id)
			require.Equal(h.t, q.keys, s.keys)
		}
	}
	for id, s := range c.seqs {
		for i, b := range s.blocks {
			n := c.units.blk(b).node
			if n == nil {
				continue
			}
			require.Equal(h.t, s.keys, n.Keys(), "seq %d block %d keys", id, i)
			require.Equal(h.t, s.tokens.span(i*B, (i+1)*B), n.Tokens(), "seq %d block %d tokens", id, i)
			if i > 0 {
				prev := c.units.blk(s.blocks[i-1])
				if prev.twin >= 0 {
					// The sequence recomputes its cached block i-1 into
					// a private copy.
					prev = c.units.blk(prev.twin)
				}
				require.Equal(h.t, prev.node, n.Parent(), "seq %d block %d parent", id, i)
			} else {
				require.Nil(h.t, n.Parent())
			}
		}
	}
}

// checkTables verifies every block table: a slot exactly for the units the
// sequence itself pins (its block range in the unit's pool, or its last
// SparseAccess), which are on the GPU there; -1 for every other unit, even
// one cached on the GPU or pinned by another sequence.
func (h *harness) checkTables() {
	c := h.c
	var table []int32
	c.mu.Lock()
	ids := slices.Collect(maps.Keys(c.seqs))
	c.mu.Unlock()
	for _, id := range ids {
		c.mu.Lock()
		s := c.seqs[id]
		own := map[UnitID]bool{}
		for i, b := range s.blocks {
			for p := range c.geom.pools {
				if s.span().pins(i, p) {
					for _, sl := range c.geom.pools[p].slices {
						own[c.units.id(b, sl)] = true
					}
				}
			}
		}
		for _, u := range s.stepPins {
			own[u] = true
		}
		blocks := slices.Clone(s.blocks)
		c.mu.Unlock()
		for sl := range h.lay.UnitsPerBlock() {
			var err error
			table, err = c.BlockTable(table[:0], id, sl)
			require.NoError(h.t, err)
			require.Len(h.t, table, len(blocks))
			for i, slot := range table {
				u := c.units.id(blocks[i], sl)
				if !own[u] {
					require.Equal(h.t, int32(-1), slot, "step %d: seq %d slice %d block %d is not pinned by it", h.steps, id, sl, i)
					continue
				}
				loc, err := c.Locate(id, i, sl)
				require.NoError(h.t, err)
				require.Equal(h.t, UnitLocation{Tier: GPU, Pool: loc.Pool, Slot: slot, Pinned: true, Shared: loc.Shared}, loc,
					"step %d: seq %d slice %d block %d", h.steps, id, sl, i)
			}
		}
	}
}

func (h *harness) checkAll() {
	// A chaos policy may lose keys without the cache noticing (a swallowed
	// Insert of a unit that is never evicted): the policies' Len is then
	// not the cache's business, its own accounting is.
	require.NoError(h.t, h.c.checkAccounting(h.chaos == nil), "step %d (op %d)", h.steps, h.op)
	h.checkTables()
	h.checkBytes()
	h.checkSharing()
	st := h.c.Stats()
	for _, ts := range st.Tiers {
		require.Equal(h.t, ts.Capacity, ts.Free+ts.Pinned+ts.Cached)
	}
	for _, ts := range st.Tiers[1:] {
		if h.inFlight() > 0 {
			break // a transfer's source or destination is pinned below
		}
		require.Zero(h.t, ts.Pinned, "step %d: %s pins a unit between operations", h.steps, ts.Name)
	}
	require.Equal(h.t, h.sinkPanics, st.SinkPanics, "step %d: sink panics counted", h.steps)
	if w := st.Tier(h.c.wt.tier).BackupsWritten; w > 0 {
		h.counts["backups written"] = int(w)
	}
	if h.poisoned == nil {
		// The operation that met a breach may be half-done: its plan was
		// not returned, so the ledger cannot follow it. (The ledger
		// counts a transfer's missing units when the engine reports
		// them, Stats when the cache applies them: a step's worth per
		// call.)
		h.settleAsync()
		h.checkLedger()
	}
}

// notePoisoned records that a chaos policy's breach poisoned the cache (err
// wraps ErrPolicy) and checks what a poisoned cache still owes: every later
// change refused with the same error, reads answering.
func (h *harness) notePoisoned(err error) {
	require.NotNil(h.t, h.chaos, "step %d: ErrPolicy without a chaos policy: %v", h.steps, err)
	h.poisoned = err
	h.counts["poisoned"]++
	_, err2 := h.c.Acquire(Request{Tokens: []uint32{1, 2, 3, 4, 5}})
	require.ErrorIs(h.t, err2, ErrPolicy)
	for _, id := range h.order {
		if _, err := h.c.Len(id); err != nil {
			continue // the operation that met the breach released it
		}
		_, err2 = h.c.Append(id, 1)
		require.ErrorIs(h.t, err2, ErrPolicy)
		break
	}
}

// expectUnchanged asserts that a failed operation left the state as before.
func (h *harness) expectUnchanged(before snapshot, err error, sentinels ...error) {
	h.t.Helper()
	require.Error(h.t, err)
	matched := false
	for _, s := range sentinels {
		matched = matched || errors.Is(err, s)
	}
	require.True(h.t, matched, "step %d: error %v is none of %v", h.steps, err, sentinels)
	h.requireSameState(before, fmt.Sprintf("failed op %d: %v", h.op, err))
}

// requireSameState asserts that the state is as in before; why names the
// call that should have changed nothing.
func (h *harness) requireSameState(before snapshot, why string) {
	h.t.Helper()
	after := h.snapshot()
	require.Equal(h.t, before.units, after.units, "step %d: units changed by %s", h.steps, why)
	require.Equal(h.t, before.seqs, after.seqs, "step %d: sequences changed by %s", h.steps, why)
	require.Equal(h.t, before.stats, after.stats, "step %d: stats changed by %s", h.steps, why)
	require.Equal(h.t, before.events, after.events, "step %d: events of %s", h.steps, why)
}

// expectOnlyLost asserts what a Mover's panic may change: units dropped
// (TierStats.Lost), blocks left with nothing removed, the operation's own
// sequence ended when the rollback pinned one of its units in a slot the
// batch may have written (err then says so), and nothing else but the
// implicit commit of an Append or Fork of sequence committing (0: none);
// the other sequences are as before.
func (h *harness) expectOnlyLost(before snapshot, committing SeqID, err error) {
	h.t.Helper()
	after := h.snapshot()
	var lost uint64
	for i := range after.stats.Tiers {
		lost += after.stats.Tiers[i].Lost - before.stats.Tiers[i].Lost
	}
	var ended []SeqID
	endedCommitting := false
	for id := range before.seqs {
		if _, ok := after.seqs[id]; !ok {
			ended = append(ended, id)
		}
	}
	require.LessOrEqual(h.t, len(ended), 1, "step %d: a Mover's panic ended sequences %v", h.steps, ended)
	if len(ended) == 1 {
		id := ended[0]
		require.ErrorContains(h.t, err, fmt.Sprintf("sequence %d ended", id), "step %d", h.steps)
		require.Equal(h.t, before.stats.Aborted+1, after.stats.Aborted, "step %d: an ended sequence counts as aborted", h.steps)
		delete(before.seqs, id)
		h.forget(id)
		h.counts["sequence ended by a mover panic"]++
		endedCommitting = committing == id
	}
	switch {
	case endedCommitting:
		// Its implicit commit stayed; nothing else is left of it.
		require.Equal(h.t, before.seqs, after.seqs, "step %d: sequences changed by a Mover's panic", h.steps)
	case committing == 0:
		require.Equal(h.t, before.seqs, after.seqs, "step %d: sequences changed by a Mover's panic", h.steps)
		for _, e := range h.events[before.events:] {
			// Dropping units may leave blocks hollow (pruned) or empty
			// (removed).
			require.Contains(h.t, []string{"dropped", "removed", "block moved"}, what(e), "step %d: a Mover's panic only drops units", h.steps)
		}
	default:
		toks, err := h.c.SequenceTokens(nil, committing)
		require.NoError(h.t, err)
		require.True(h.t, slices.Equal(h.ref[committing].tokens, toks), "step %d: tokens of a failed call", h.steps)
	}
	// The ledger does not see these drops (no plan reports them).
	h.plans.lost += lost
}

// settleAsync, with an engine, applies every finished transfer (see
// settle) before the harness takes the state a failed call must leave as
// it is.
func (h *harness) settleAsync() {
	if h.engine != nil {
		h.settle()
	}
}

// expectUndone checks a long Acquire that failed after its first step:
// no sequence was made, and nothing it took is held (checkAll checks the
// pins and every byte); its committed steps' work stays and is counted in
// Stats, which the ledger, made of the plans of successful calls, takes
// as it is.
func (h *harness) expectUndone(before snapshot) {
	h.t.Helper()
	after := h.snapshot()
	require.Equal(h.t, before.seqs, after.seqs, "step %d: a failed Acquire left sequences", h.steps)
	l := &h.plans
	b, a := before.stats, after.stats
	l.offloads += a.Offloads - b.Offloads
	l.onboards += a.Onboards - b.Onboards
	l.copies += a.Copies - b.Copies
	l.bytesMoved += a.BytesMoved - b.BytesMoved
	l.recomputed += a.RecomputedTokens - b.RecomputedTokens
	for i := range a.Tiers {
		l.drops += a.Tiers[i].Drops - b.Tiers[i].Drops
		l.lost += a.Tiers[i].Lost - b.Tiers[i].Lost
		require.Equal(h.t, b.Tiers[i].Hits, a.Tiers[i].Hits, "step %d: a failed Acquire counted hits", h.steps)
		require.Equal(h.t, b.Tiers[i].Misses, a.Tiers[i].Misses, "step %d: a failed Acquire counted misses", h.steps)
	}
}

// expectOnlyCommitted asserts that an Append or Fork of sequence id that
// failed changed nothing but its implicit commit: the sequence's tokens are
// as before, and committing them now changes nothing more.
func (h *harness) expectOnlyCommitted(id SeqID, err error) {
	h.t.Helper()
	require.True(h.t, errors.Is(err, ErrNoSpace) || errors.Is(err, ErrCopyFailed) || (h.engine != nil && errors.Is(err, ErrBusy)), "step %d: %v", h.steps, err)
	toks, err2 := h.c.SequenceTokens(nil, id)
	require.NoError(h.t, err2)
	require.True(h.t, slices.Equal(h.ref[id].tokens, toks), "step %d: tokens of a failed call", h.steps)
	h.settleAsync()
	mid := h.snapshot()
	require.NoError(h.t, h.c.Commit(id, len(toks)))
	h.requireSameState(mid, "a Commit after the implicit one")
}

// partlyDropped returns the hashes of the tree's blocks that lack a unit's
// bytes and that no live sparse sequence holds: whatever uses such a block
// next recomputes it, so none of its units may be offloaded (a copy no one
// reads).
func (h *harness) partlyDropped() map[uint64]bool {
	c := h.c
	c.mu.Lock()
	defer c.mu.Unlock()
	sparse := map[int32]bool{}
	for _, s := range c.seqs {
		if s.sparse {
			for _, b := range s.blocks {
				sparse[b] = true
				if tw := c.units.blk(b).twin; tw >= 0 {
					sparse[tw] = true // held through a recompute copy
				}
			}
		}
	}
	out := map[uint64]bool{}
	for n := range c.tree.All() {
		if sparse[n.Value] {
			continue
		}
		for sl := range c.geom.slices {
			if c.units.of(c.units.id(n.Value, sl)).tier == Dropped {
				out[n.Hash()] = true
				break
			}
		}
	}
	return out
}

// checkNoWastedOffload verifies, after a successful operation, that no unit
// of a block that lacked a unit's bytes before it (partly, from
// partlyDropped) was offloaded by it: such a victim must be dropped.
func (h *harness) checkNoWastedOffload(partly map[uint64]bool, fromEvent int) {
	for _, e := range h.events[fromEvent:] {
		if what(e) == "restored" {
			// A commit merged a recomputed copy into the block: it may
			// hold every unit's bytes again.
			delete(partly, e.Hash)
		}
		if !partly[e.Hash] {
			continue
		}
		require.NotEqual(h.t, "offloaded", what(e), "step %d: unit %d of block %x offloaded although the block lacked a unit", h.steps, e.Slice, e.Hash)
		if what(e) == "dropped" && e.From == GPU {
			h.counts["victim of a partly dropped block dropped"]++
		}
	}
}

func (h *harness) step() {
	h.steps++
	h.clock.Advance(time.Duration(1+h.choose(3)) * 100 * time.Millisecond)
	c := h.c
	if h.engine != nil {
		if h.progress(); h.poisoned != nil {
			return
		}
	}
	before := h.snapshot()
	partly := h.partlyDropped()
	pinnedBefore := h.pinnedSlots()
	// ready plays a server that waits for the transfers sequence id
	// waits on before its kernels touch its units (a no-op with a
	// Mover). It returns false when a chaos policy's breach met on the
	// way poisoned the cache: the step ends there.
	ready := func(id SeqID) bool {
		if h.engine != nil {
			if !h.await(id) {
				return false
			}
			h.settleAsync()
			before, partly, pinnedBefore = h.snapshot(), h.partlyDropped(), h.pinnedSlots()
		}
		return true
	}
	failing := h.choose(20) == 0 && h.engine == nil
	h.mover.armed = failing
	h.mover.panics = failing && h.choose(3) == 0
	failedBefore := h.mover.failed
	// committing is the sequence whose Append or Fork commits implicitly:
	// when the call fails, that commit stays (see Append).
	var committing SeqID
	// long says that the running operation is an Acquire planned in
	// steps: a failure after its first step leaves what its committed
	// steps did (see slices.go).
	long := false
	okErr := func(err error) bool {
		if err == nil {
			return true
		}
		if errors.Is(err, ErrPolicy) {
			h.notePoisoned(err)
			return false
		}
		if long && errors.Is(err, ErrCopyFailed) {
			require.True(h.t, failing)
			h.counts["long acquire failed midway"]++
			h.expectUndone(before)
			return false
		}
		if errors.Is(err, ErrCopyFailed) {
			require.True(h.t, failing)
			require.Equal(h.t, failedBefore+1, h.mover.failed)
			h.counts["copy failed"]++
			var pe *PanicError
			if errors.As(err, &pe) {
				// The units whose slots the batch may have written are
				// dropped, the rest is rolled back: checkAll verifies
				// every byte left and the accounting.
				require.True(h.t, h.mover.panics)
				h.counts["mover panicked"]++
				h.expectOnlyLost(before, committing, err)
				return false
			}
		} else if errors.Is(err, ErrBusy) && h.engine != nil {
			h.counts["fork of a sequence whose commit waits"]++
		} else {
			h.counts["no space"]++
		}
		if committing != 0 {
			h.expectOnlyCommitted(committing, err)
			return false
		}
		if long && errors.Is(err, ErrNoSpace) && c.Stats().PrunedBlocks > before.stats.PrunedBlocks {
			// A long Acquire refused at its reservation: its claim
			// steps referenced its prefix, which takes those blocks off
			// the hollow list, and a step's end may then prune hollow
			// blocks that a transfer below the list's old head had kept
			// (see pruneMetadata). The claims are released; the prune
			// is the cache's housekeeping and stays.
			h.counts["refused long acquire let the tree prune"]++
			h.expectUndone(before)
			return false
		}
		h.expectUnchanged(before, err, ErrNoSpace, ErrCopyFailed)
		return false
	}
	op := h.choose(100)
	h.op = op
	if len(h.order) == 0 && op%4 == 0 {
		// An idle cache may be cleared, once no transfer is in flight.
		if h.engine != nil && h.inFlight() > 0 {
			h.expectUnchanged(before, c.Clear(), ErrBusy)
			h.counts["clear refused in flight"]++
			return
		}
		blocks := c.Stats().Blocks
		if !okErr(c.Clear()) {
			return
		}
		require.Zero(h.t, c.Stats().Blocks)
		require.Equal(h.t, before.stats.Removed+uint64(blocks), c.Stats().Removed)
		h.counts["clear"]++
		return
	}
	if len(h.order) > 0 && op%25 == 0 {
		// Clear refuses while sequences are live.
		h.expectUnchanged(before, c.Clear(), ErrBusy)
	}
	switch {
	case op < 28 || len(h.order) == 0:
		if len(h.order) >= 4 {
			break
		}
		base := h.bases[h.choose(len(h.bases))]
		prompt := slices.Clone(base[:h.choose(len(base)+1)])
		prompt = append(prompt, h.randomTokens(h.choose(6))...)
		keys := radix.Keys{Namespace: []string{"", "a", "b"}[h.choose(3)], LoRA: []string{"", "x"}[h.choose(2)]}
		sparse := h.choose(5) == 0
		req := Request{Tokens: prompt, Namespace: keys.Namespace, LoRA: keys.LoRA, Sparse: sparse}
		if h.choose(4) == 0 {
			req.Priorities = &Priorities{Default: h.choose(101), Ranges: []PriorityRange{{Start: 0, End: 8, Priority: 90, Duration: time.Second}}}
		}
		// Reuse: a live dense sequence with the same keys pins its full
		// blocks on the GPU, so those it committed must be hits.
		mustReuse := 0
		if !sparse && h.lay.Model().Windows == nil && h.engine == nil {
			// (With an engine, a commit may wait for a transfer, and a
			// failed load makes its block a recompute.)
			for _, q := range h.ref {
				if q.sparse || q.keys != keys {
					continue
				}
				k := 0
				for k+4 <= min(q.committed, len(prompt)) && slices.Equal(q.tokens[k:k+4], prompt[k:k+4]) {
					k += 4
				}
				mustReuse = max(mustReuse, k)
			}
		}
		adm, err := c.Admit(req)
		require.NoError(h.t, err)
		want, released := h.predictAcquire(req)
		if want.partial > 0 && !sparse {
			// A copy pins its source: with no room for that the block is
			// computed whole, as Admit says (the Acquire below checks
			// Admit against what it did).
			c.partialReuse = false
			off, err := c.Admit(req)
			c.partialReuse = true
			require.NoError(h.t, err)
			if adm.ReusedTokens != off.ReusedTokens+want.partial {
				want.fresh, want.copied, want.partial = want.fresh+want.copied, 0, 0
				h.counts["partial copy given up for room"]++
			}
		}
		long = !sparse && c.isLong(c.geom.numBlocks(len(prompt))*c.geom.slices)
		if long {
			h.counts["long acquire"]++
		}
		p, err := c.Acquire(req)
		if !failing && !sparse && !errors.Is(err, ErrPolicy) {
			// Admission control predicts a dense Acquire exactly.
			require.Equal(h.t, adm.Fits, err == nil, "step %d: admit %+v, acquire error %v, plan %+v, want %+v, long %v", h.steps, adm, err, p, want, long)
		}
		if !okErr(err) {
			return
		}
		if !sparse {
			require.Equal(h.t, adm.NeedSlots, p.Onboarded+p.Computed+p.Copied, "step %d: %+v, want %+v, long %v", h.steps, p.Counts, want, long)
			require.Equal(h.t, adm.ReusedTokens, p.ReusedTokens)
		}
		q := &refSeq{keys: keys, sparse: sparse}
		if sparse {
			q.tokens = slices.Clone(prompt[:p.Tokens])
			q.pending = slices.Clone(prompt[p.Tokens:])
			require.Equal(h.t, len(prompt)-p.Tokens, p.Pending)
			require.Zero(h.t, p.Tokens%c.BlockTokens())
			h.record(p, false)
			h.counts["acquire sparse"]++
		} else {
			q.tokens = prompt
			require.Equal(h.t, len(prompt), p.Tokens)
			require.GreaterOrEqual(h.t, p.ReusedTokens, mustReuse, "step %d: early reuse", h.steps)
			require.Equal(h.t, want, expectedAcquire{hits: p.Hits, onboards: p.Onboarded, fresh: p.Computed, recompute: p.RecomputeTokens,
				copied: p.Copied, partial: p.PartialTokens}, "step %d: plan of a dense Acquire", h.steps)
			if p.PartialTokens > 0 {
				h.counts["partial copy"]++
				if long {
					h.counts["partial copy in steps"]++
				}
			}
			h.record(p, true)
			h.counts["acquire"]++
			if p.Onboarded > 0 {
				h.counts["onboard"]++
			}
			if p.RecomputeTokens > 0 {
				h.counts["recompute"]++
			}
			if released > 0 {
				h.counts["recompute of a block with CPU copies"]++
			}
			if p.BeingWrittenTokens > 0 {
				h.counts["prompt being written by another"]++
			}
		}
		h.ref[p.Seq] = q
		h.order = append(h.order, p.Seq)
		h.checkCopiesUseful(p.Seq, p)
		h.checkComputePinned(p.Seq, p)
		h.fillPlan(p.Seq, p)
	case op < 50:
		id, q, _ := h.pickSeq()
		var toks []uint32
		if len(q.pending) > 0 {
			k := 1 + h.choose(min(len(q.pending), 6))
			toks = q.pending[:k]
		} else {
			toks = h.randomTokens(1 + h.choose(3))
		}
		// The forward pass that produced the new tokens ran; Append
		// commits what it wrote, unless the server did already.
		if !ready(id) {
			return
		}
		h.forward(id, len(q.tokens))
		if h.choose(2) == 0 {
			if !okErr(c.Commit(id, len(q.tokens))) {
				return
			}
			h.settleAsync()
			before, partly, pinnedBefore = h.snapshot(), h.partlyDropped(), h.pinnedSlots()
			h.counts["commit before append"]++
		} else {
			committing = id
		}
		p, err := c.Append(id, toks...)
		q.committed = len(q.tokens)
		if !okErr(err) {
			return
		}
		if len(q.pending) > 0 {
			q.pending = q.pending[len(toks):]
		}
		q.tokens = append(q.tokens, toks...)
		require.Equal(h.t, len(q.tokens), p.Tokens)
		h.checkComputePinned(id, p)
		h.fillPlan(id, p)
		h.record(p, false)
		h.counts["append"]++
	case op < 55:
		// A server that writes a chunk (or a step) and maybe commits it.
		id, q, _ := h.pickSeq()
		upTo := h.choose(len(q.tokens) + 1)
		if !ready(id) {
			return
		}
		h.forward(id, upTo)
		if h.choose(3) == 0 {
			h.counts["forward pass, no commit"]++
			return
		}
		if !okErr(c.Commit(id, upTo)) {
			return
		}
		q.committed = max(q.committed, upTo)
		h.counts["commit"]++
	case op < 67:
		id, q, _ := h.pickSeq()
		if len(q.tokens) == 0 {
			return
		}
		layer := h.choose(2)
		heads := make([][]int64, 4)
		nb := (len(q.tokens) + 3) / 4
		for hd := range heads {
			for range h.choose(3) {
				heads[hd] = append(heads[hd], int64(h.choose(nb)))
			}
		}
		heads[0] = append(heads[0], int64(nb-1)) // the current block, always chosen
		err := c.SparseAccess(id, byQueryHeads(c.Layout(), layer, heads), &h.res)
		if !okErr(err) {
			return
		}
		// The answer locates the units as the block tables do.
		for _, u := range h.res.Units {
			loc, err := c.Locate(id, u.Block, u.Slice)
			require.NoError(h.t, err)
			require.Equal(h.t, GPU, loc.Tier)
			require.True(h.t, loc.Pinned)
			require.Equal(h.t, u.Slot, loc.Slot)
			table, err := c.BlockTable(nil, id, u.Slice)
			require.NoError(h.t, err)
			require.Equal(h.t, u.Slot, table[u.Block], "step %d: block table of a selected unit", h.steps)
		}
		var recompute []TokenRange
		if h.engine != nil {
			// The step reads the selected units once they are ready,
			// and recomputes those whose loads failed. (Waiting lets a
			// commit of the sequence that waited for transfers go on:
			// a block it merges into an equal cached one moves to that
			// block's slots, so the server reads the tables after.)
			n := len(q.unwritten)
			if !ready(id) {
				return
			}
			recompute = q.unwritten[n:]
		}
		for _, u := range h.res.Units {
			loc, err := c.Locate(id, u.Block, u.Slice)
			require.NoError(h.t, err)
			require.Equal(h.t, GPU, loc.Tier)
			require.True(h.t, loc.Pinned)
			table, err := c.BlockTable(nil, id, u.Slice)
			require.NoError(h.t, err)
			require.Equal(h.t, loc.Slot, table[u.Block], "step %d: block table of a selected unit", h.steps)
			failed := false
			for _, r := range recompute {
				failed = failed || (r.Start < (u.Block+1)*c.BlockTokens() && r.End > u.Block*c.BlockTokens())
			}
			if u.From == Dropped || failed {
				h.fillUnit(id, u.Block, u.Slice)
			}
		}
		require.Equal(h.t, len(h.res.Units), h.res.Hits+(h.res.Onboarded+h.res.Computed))
		h.recordSparse(&h.res, len(q.tokens))
		h.counts["sparse"]++
		if h.res.Onboarded > 0 {
			h.counts["sparse onboard"]++
		}
		if h.res.Computed > 0 {
			h.counts["sparse recompute"]++
		}
	case op < 80:
		id, q, _ := h.pickSeq()
		end, what := c.Release, "release"
		switch h.choose(3) {
		case 0:
			// A request that finished: its last step ran and is shared.
			if !ready(id) {
				return
			}
			h.forward(id, len(q.tokens))
			if !okErr(c.Commit(id, len(q.tokens))) {
				return
			}
			what = "release after commit"
		case 1:
			// A request dropped before its pending computation ran.
			end, what = c.Abort, "abort"
		}
		if !okErr(end(id)) {
			return
		}
		h.forget(id)
		h.counts[what]++
	case op < 88:
		id, q, _ := h.pickSeq()
		n := h.choose(min(len(q.tokens), 7) + 1)
		if h.choose(2) == 0 {
			if !ready(id) {
				return
			}
			h.forward(id, len(q.tokens)) // the verification pass ran
		}
		p, err := c.Truncate(id, n)
		if !okErr(err) {
			return
		}
		q.cut(len(q.tokens) - n)
		q.tokens = q.tokens[:len(q.tokens)-n]
		if q.sparse {
			q.pending = nil
		}
		require.Equal(h.t, len(q.tokens), p.Tokens)
		h.checkCopiesUseful(id, p)
		h.checkComputePinned(id, p)
		h.fillPlan(id, p)
		h.record(p, false)
		h.counts["truncate"]++
		if p.RecomputeTokens > 0 {
			h.counts["truncate recompute"]++
		}
		if p.Copied > 0 {
			h.counts["truncate cow"]++
		}
	case op < 94:
		if len(h.order) >= 4 {
			break
		}
		id, q, _ := h.pickSeq()
		// Fork copies the parent's KV now: it must be written.
		if !ready(id) {
			return
		}
		h.forward(id, len(q.tokens))
		committing = id
		long := c.longFork(c.seqs[id])
		p, err := c.Fork(id)
		q.committed = len(q.tokens)
		if !okErr(err) {
			return
		}
		if long {
			h.counts["long fork"]++
			if p.RecomputeTokens > 0 {
				// Rare here (a windowed parent whose out-of-window unit
				// was evicted, forked with an engine):
				// TestLongForkRepinsARecomputeCopy makes it happen.
				h.counts["long fork with blocks to recompute"]++
			}
		}
		h.ref[p.Seq] = &refSeq{keys: q.keys, tokens: slices.Clone(q.tokens), sparse: q.sparse, committed: len(q.tokens)}
		h.order = append(h.order, p.Seq)
		h.checkCopiesUseful(p.Seq, p)
		h.checkComputePinned(p.Seq, p)
		h.fillPlan(p.Seq, p)
		h.record(p, false)
		h.counts["fork"]++
	case op < 98 && op >= 96 && len(c.tiers.levels) > 1:
		// Blocks a shared store holds, registered on a tier below the
		// GPU; the store (this harness) holds their bytes.
		base := h.bases[h.choose(len(h.bases))]
		req := Request{Tokens: base[:h.choose(len(base)+1)], Namespace: []string{"", "a", "b"}[h.choose(3)]}
		full := len(req.Tokens) / c.BlockTokens()
		t := Tier(2 + h.choose(len(c.tiers.levels)-1))
		n := h.choose(full + 1)
		dropsBefore := before.stats
		got, err := c.Adopt(req, n, t)
		if !okErr(err) {
			// A breach met while placing the units leaves them placed
			// (see Cache.place): the store holds their bytes all the
			// same.
			h.storeAdopted(req, n, t)
			return
		}
		require.LessOrEqual(h.t, got, n, "step %d: Adopt of %d blocks", h.steps, n)
		st := c.Stats()
		for i := range st.Tiers {
			h.plans.drops += st.Tiers[i].Drops - dropsBefore.Tiers[i].Drops
		}
		if st.Tier(t).Adopted > dropsBefore.Tier(t).Adopted {
			h.counts["adopted"]++
		}
		// The store holds every block the lookup found (n), not only
		// the whole prefix Adopt reports: a long Adopt's later step may
		// evict what an earlier one placed (on a full last tier).
		h.storeAdopted(req, n, t)
	case op < 97:
		// A queued request's prefix brought up ahead of its Acquire.
		base := h.bases[h.choose(len(h.bases))]
		req := Request{Tokens: base[:h.choose(len(base)+1)], Namespace: []string{"", "a", "b"}[h.choose(3)], MaxLoadTokens: h.choose(3) * 4}
		want, _ := h.predictAcquire(req)
		bytesBefore := c.Stats().BytesMoved
		k, err := c.Prefetch(req)
		if !okErr(err) {
			return
		}
		require.Zero(h.t, k.Computed+k.Copied, "step %d: a prefetch only onboards", h.steps)
		require.LessOrEqual(h.t, k.Onboarded, want.onboards, "step %d: prefetch of %+v", h.steps, req)
		l := &h.plans
		l.onboards += uint64(k.Onboarded)
		l.offloads += uint64(k.Offloaded)
		l.drops += uint64(k.Dropped)
		moved := c.Stats().BytesMoved - bytesBefore
		if ub := h.lay.Pools()[0].UnitBytes; h.lay.Pools()[len(h.lay.Pools())-1].UnitBytes == ub {
			if h.c.wt.tier == 0 {
				require.Equal(h.t, int64(k.Onboarded+k.Offloaded)*ub, moved, "step %d: bytes a prefetch moved", h.steps)
			} else {
				// A victim with a backup moves down without a copy.
				require.GreaterOrEqual(h.t, moved, int64(k.Onboarded)*ub, "step %d: bytes a prefetch moved", h.steps)
				require.LessOrEqual(h.t, moved, int64(k.Onboarded+k.Offloaded)*ub, "step %d: bytes a prefetch moved", h.steps)
			}
		}
		l.bytesMoved += moved
		if k.Onboarded > 0 {
			h.counts["prefetch"]++
		}
	default:
		h.badInput(before)
	}
	if failing && h.mover.failed == failedBefore {
		h.mover.armed = false
	}
	if h.c.decider == nil {
		// The default Decider's rule (a custom one may move anything).
		h.checkNoWastedOffload(partly, before.events)
	}
	if c.Stats().PrunedBlocks > before.stats.PrunedBlocks {
		h.counts["pruned"]++
	}
	// A unit pinned before and after the operation, by the same
	// sequences, did not move. (One the operation's sequence gave up
	// may be restored for another: a Release lets a waiting commit of
	// another sequence through, which writes a unit the released one had
	// pinned without bytes.)
	for k, v := range h.pinnedSlots() {
		w, ok := pinnedBefore[k]
		if !ok || slices.ContainsFunc(w.holders, func(id SeqID) bool { return !slices.Contains(v.holders, id) }) {
			continue
		}
		require.Equal(h.t, w.where, v.where, "step %d (op %d): pinned unit %s moved", h.steps, h.op, k)
	}
}

// badInput tries an invalid call and checks it fails with the right sentinel
// without changing anything.
func (h *harness) badInput(before snapshot) {
	c := h.c
	h.counts["bad input"]++
	id, q, ok := h.pickSeq()
	switch h.choose(7) {
	case 0:
		h.expectUnchanged(before, c.Release(9999), ErrUnknownSequence)
	case 1:
		_, err := c.Append(9999, 1)
		h.expectUnchanged(before, err, ErrUnknownSequence)
	case 2:
		if ok {
			_, err := c.Truncate(id, len(q.tokens)+1)
			h.expectUnchanged(before, err, ErrOutOfRange)
		}
	case 3:
		_, err := c.Acquire(Request{Tokens: []uint32{1}, Priorities: &Priorities{Default: 101}})
		h.expectUnchanged(before, err, ErrInvalidRequest)
	case 4:
		if ok {
			heads := h.lay.Model().StoredHeads()
			err := c.SparseAccess(id, Selection{Layer: 2, Blocks: make([][]int, heads)}, &h.res)
			h.expectUnchanged(before, err, ErrOutOfRange)
			bad := Selection{Blocks: make([][]int, heads)}
			bad.Blocks[0] = []int{len(q.tokens)/4 + 1}
			err = c.SparseAccess(id, bad, &h.res)
			h.expectUnchanged(before, err, ErrOutOfRange)
			err = c.SparseAccess(id, Selection{Blocks: make([][]int, heads+1)}, &h.res)
			h.expectUnchanged(before, err, ErrInvalidRequest)
		}
	case 5:
		_, err := c.Acquire(Request{Tokens: []uint32{1, 2, 3, 4, 5}, Extra: []radix.ExtraKey{{Pos: 3}, {Pos: 1}}})
		h.expectUnchanged(before, err, ErrInvalidRequest)
	case 6:
		if ok {
			_, err := c.BlockTable(nil, id, 99)
			h.expectUnchanged(before, err, ErrOutOfRange)
		}
	}
}

func runModel(t testing.TB, mc modelConfig, seed uint64, steps int) *harness {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	h := newHarness(t, mc, func(n int) int { return rng.IntN(n) })
	h.checkAll()
	for range steps {
		h.step()
		h.checkAll()
		if h.poisoned != nil {
			return h
		}
	}
	for len(h.order) > 0 {
		id := h.order[0]
		if err := h.c.Release(id); err != nil {
			require.ErrorIs(t, err, ErrPolicy)
			h.notePoisoned(err)
			h.checkAll()
			return h
		}
		h.forget(id)
		h.checkAll()
	}
	if h.engine != nil {
		h.drain()
		h.checkAll()
		if h.poisoned != nil {
			return h
		}
	}
	st := h.c.Stats()
	require.Zero(t, st.Tier(GPU).Pinned)
	// An idle cache may be cleared: every block goes, with one event.
	if err := h.c.Clear(); err != nil {
		// A chaos policy may break its contract in Clear's Removes.
		require.ErrorIs(t, err, ErrPolicy)
		h.notePoisoned(err)
		h.checkAll()
		return h
	}
	h.counts["clear"]++
	after := h.c.Stats()
	require.Zero(t, after.Blocks)
	for _, ts := range after.Tiers {
		require.Zero(t, ts.Cached)
	}
	require.Equal(t, st.Removed+uint64(st.Blocks), after.Removed)
	require.Equal(t, AllCleared, h.events[len(h.events)-1].Kind)
	h.checkAll()
	return h
}

// modelSize returns the size of a randomized model test's run: long when
// KVTIER_MODEL_SEEDS is set (CI's long run), short under -short or the race
// detector, and def otherwise (go test ./..., which keeps kvcache's run
// near a minute on two cores).
func modelSize(long, def, short int) int {
	switch {
	case os.Getenv("KVTIER_MODEL_SEEDS") != "":
		return long
	case testing.Short() || raceEnabled:
		return short
	}
	return def
}

// modelSeeds returns how many seeds a randomized model test runs per
// configuration: n, or the number in KVTIER_MODEL_SEEDS (CI sets it to run
// longer than the inner loop can afford).
func modelSeeds(t *testing.T, n uint64) uint64 {
	v := os.Getenv("KVTIER_MODEL_SEEDS")
	if v == "" {
		return n
	}
	k, err := strconv.ParseUint(v, 10, 32)
	require.NoError(t, err, "KVTIER_MODEL_SEEDS=%q", v)
	return k
}

// runConfigs runs each configuration as a parallel subtest. Once every
// subtest has finished, and none failed, it hands what the runs counted,
// summed over all configurations, to checks (if not nil): the checks of
// what must have happened in some configuration. The runs are independent
// and CPU-bound: in parallel they take about half the wall time on two
// cores.
func runConfigs(t *testing.T, configs []modelConfig, run func(t *testing.T, mc modelConfig) map[string]int, checks func(total map[string]int)) {
	var mu sync.Mutex
	all := map[string]int{}
	t.Cleanup(func() {
		if !t.Failed() && checks != nil {
			checks(all)
		}
	})
	for _, mc := range configs {
		t.Run(mc.name, func(t *testing.T) {
			t.Parallel()
			counts := run(t, mc)
			mu.Lock()
			defer mu.Unlock()
			for k, v := range counts {
				all[k] += v
			}
		})
	}
}

// runSeeds runs mc for the seeds first to first+n-1 and returns what the
// runs counted and, under chaos, the breaches of their policies, summed.
// each, if not nil, checks every run after it ended.
func runSeeds(t *testing.T, mc modelConfig, first, n uint64, steps int, each func(h *harness)) (total, breaches map[string]int) {
	total, breaches = map[string]int{}, map[string]int{}
	for seed := range n {
		h := runModel(t, mc, first+seed, steps)
		for k, v := range h.counts {
			total[k] += v
		}
		if h.chaos != nil {
			for k, v := range h.chaos.breaches {
				breaches[k] += v
			}
		}
		if each != nil {
			each(h)
		}
	}
	return total, breaches
}

// requireMet fails t for each key of want that no configuration counted.
func requireMet(t *testing.T, total map[string]int, want ...string) {
	t.Helper()
	for _, k := range want {
		if total[k] == 0 {
			t.Errorf("no configuration met %q", k)
		}
	}
}

func TestModelRandomized(t *testing.T) {
	steps := modelSize(3000, 1500, 1000)
	runConfigs(t, modelConfigs(), func(t *testing.T, mc modelConfig) map[string]int {
		total, _ := runSeeds(t, mc, 1, modelSeeds(t, 2), steps, func(h *harness) {
			require.NotEmpty(t, h.events)
		})
		t.Logf("%v", total)
		for _, k := range []string{"acquire", "append", "sparse", "release", "truncate", "fork", "bad input", "copy failed", "clear"} {
			require.Positive(t, total[k], "operation %q never ran", k)
		}
		return total
	}, func(total map[string]int) {
		// Rare paths must have run in some configuration: each check
		// is only as good as the cases it met.
		requireMet(t, total, "victim of a partly dropped block dropped", "pruned", "mover panicked", "abort", "prefetch",
			"backups written", "adopted", "move down below the CPU", "load from below the CPU", "commit",
			"prompt being written by another", "truncate recompute", "recompute of a block with CPU copies", "partial copy")
	})
}

// TestModelSliced runs the model-based test with steps of a few units (see
// slices.go), so that most Acquires and Releases are long operations,
// with a Mover and with a TransferEngine: every check of
// TestModelRandomized holds (a long Acquire's plan has the form of one
// transaction's), and a long Acquire that fails midway leaves no sequence and
// nothing held.
func TestModelSliced(t *testing.T) {
	// Fewer steps than TestModelRandomized: every configuration runs twice
	// here (Mover and engine), and CI's long run adds seeds.
	steps := modelSize(800, 500, 300)
	var configs []modelConfig
	for _, mc := range modelConfigs() {
		mc.name, mc.sliced = mc.name+"-sliced", true
		configs = append(configs, mc)
		mc.name, mc.async = mc.name+"-async", true
		configs = append(configs, mc)
	}
	runConfigs(t, configs, func(t *testing.T, mc modelConfig) map[string]int {
		total, _ := runSeeds(t, mc, 200, modelSeeds(t, 2), steps, nil)
		t.Logf("%v", total)
		require.Positive(t, total["long acquire"], "no Acquire ran in steps")
		return total
	}, func(total map[string]int) {
		requireMet(t, total, "long acquire failed midway", "recompute", "onboard", "long fork", "partial copy in steps")
	})
}

// TestModelShares runs the model-based test with namespaces' shares of
// every tier (modelShares), with a Mover and with a TransferEngine, in
// plain operations, in steps and with chaos policies: the shares choose
// other victims, which the checks do not predict, and refuse requests
// beyond a namespace's room on the GPU, which Admit predicts; every check
// holds, and the accounting checks each namespace's counts against the
// slots.
func TestModelShares(t *testing.T) {
	steps, chaosRuns := modelSize(800, 500, 300), uint64(modelSize(6, 3, 2))
	var configs []modelConfig
	for _, mc := range modelConfigs() {
		mc.name, mc.shares = mc.name+"-shares", true
		configs = append(configs, mc)
		mc.name, mc.async = mc.name+"-async", true
		configs = append(configs, mc)
	}
	runConfigs(t, configs, func(t *testing.T, mc modelConfig) map[string]int {
		var shared map[string]int
		tally := func(h *harness) {
			st := h.c.Stats()
			for _, ts := range st.Tiers {
				require.Len(t, ts.Shares, 2)
				for _, sh := range ts.Shares {
					require.LessOrEqual(t, sh.Reserved, sh.Cap)
					shared["share evicted"] += int(sh.Evictions)
					shared["dropped at a cap"] += int(sh.DropsAtCap)
				}
			}
		}
		shared = map[string]int{}
		total, _ := runSeeds(t, mc, 1100, modelSeeds(t, 2), steps, tally)
		sliced := mc
		sliced.sliced = true
		more, _ := runSeeds(t, sliced, 1200, modelSeeds(t, 1), steps/2, tally)
		for k, v := range shared {
			total[k] += v
		}
		// Policies that break their contract now and then: the
		// namespaces' counts stay exact after the poison.
		chaos := mc
		chaos.chaos = 300
		poisoned, breaches := runSeeds(t, chaos, 1300, chaosRuns, steps/4, nil)
		t.Logf("%v; sliced %v; chaos %v, breaches %v", total, more, poisoned, breaches)
		return total
	}, func(total map[string]int) {
		requireMet(t, total, "onboard", "recompute", "share evicted", "dropped at a cap", "move down below the CPU", "backups written", "adopted")
	})
}

// TestModelBlockKeys runs the model-based test with Config.BlockKeys in
// every configuration where it groups units, with a Mover and with a
// TransferEngine: with plain operations, in steps of a few units, and with
// chaos policies. Every check holds as with unit keys (the policies
// choose other victims, which the checks do not predict), and the
// invariants check each block's counts against its units.
func TestModelBlockKeys(t *testing.T) {
	steps, chaosRuns := modelSize(1500, 500, 300), uint64(modelSize(20, 6, 4))
	var configs []modelConfig
	for _, mc := range modelConfigs() {
		if !blockKeysApply(t, mc) {
			continue
		}
		mc.name, mc.blockKeys = mc.name+"-blockkeys", true
		configs = append(configs, mc)
		mc.name, mc.async = mc.name+"-async", true
		configs = append(configs, mc)
	}
	runConfigs(t, configs, func(t *testing.T, mc modelConfig) map[string]int {
		total, _ := runSeeds(t, mc, 700, modelSeeds(t, 2), steps, nil)
		sliced := mc
		sliced.sliced = true
		more, _ := runSeeds(t, sliced, 800, modelSeeds(t, 1), steps/2, nil)
		chaos := mc
		chaos.chaos = 300
		poisoned, breaches := runSeeds(t, chaos, 900, chaosRuns, steps/4, nil)
		t.Logf("%v; sliced %v; chaos %v, breaches %v", total, more, poisoned, breaches)
		for _, k := range []string{"acquire", "append", "release", "truncate", "fork"} {
			require.Positive(t, total[k], "operation %q never ran", k)
		}
		require.Positive(t, more["long acquire"], "no Acquire ran in steps")
		total["chaos run poisoned"] = poisoned["poisoned"]
		return total
	}, func(total map[string]int) {
		requireMet(t, total, "chaos run poisoned", "copy failed", "victim of a partly dropped block dropped", "backups written", "move down below the CPU",
			"load from below the CPU", "recompute of a block with CPU copies")
	})
}

// blockKeysApply reports whether Config.BlockKeys changes anything for mc:
// whether a pool of its layout has several units per block.
func blockKeysApply(t *testing.T, mc modelConfig) bool {
	h := newHarness(t, mc, rand.New(rand.NewPCG(1, 2)).IntN)
	for _, p := range h.lay.Pools() {
		if p.UnitsPerBlock > 1 {
			return true
		}
	}
	return false
}

// TestModelChaos runs the model-based test with chaos policies: in one call
// in a few hundred, a policy breaks its contract (see chaosPolicy). Every
// run either goes on with every invariant intact or stops at the first
// ErrPolicy, after which the cache's accounting, its bytes and its block
// tables must still be exact and every change refused. Each configuration
// runs with a Mover and with a TransferEngine (async), where a breach may
// also come while Poll or Readiness completes transfers.
func TestModelChaos(t *testing.T) {
	runs, steps := uint64(modelSize(40, 20, 10)), modelSize(400, 400, 200)
	var configs []modelConfig
	for _, mc := range modelConfigs() {
		configs = append(configs, mc)
		mc.name, mc.async = mc.name+"-async", true
		configs = append(configs, mc)
	}
	runConfigs(t, configs, func(t *testing.T, mc modelConfig) map[string]int {
		mc.chaos = 300
		total, breaches := runSeeds(t, mc, 100, runs, steps, nil)
		t.Logf("%v", total)
		t.Logf("breaches: %v", breaches)
		require.Positive(t, total["poisoned"], "no run was poisoned")
		require.Positive(t, breaches["panic"], "no policy panicked")
		return total
	}, func(total map[string]int) {
		requireMet(t, total, "poisoned completing transfers")
	})
}

// TestModelCPUPolicyEvictsPinned runs the model-based test with CPU
// policies that, whenever the running operation has pinned one of their
// keys (a unit being onboarded or recomputed, a copy-on-write source),
// return it from Evict. The cache must take each such lie for what it is,
// ErrPolicy, before the victim's offload can write the pinned unit's slot
// (which the onboard or copy would then read) or the commit free it.
func TestModelCPUPolicyEvictsPinned(t *testing.T) {
	runs, steps := uint64(modelSize(30, 12, 8)), modelSize(300, 300, 200)
	var configs []modelConfig
	for _, mc := range modelConfigs() {
		if mc.cpu != (Capacity{}) {
			configs = append(configs, mc)
		}
	}
	runConfigs(t, configs, func(t *testing.T, mc modelConfig) map[string]int {
		mc.chaos, mc.cpuPinnedLiar = math.MaxInt32, true // every tier below the GPU lies
		total, breaches := runSeeds(t, mc, 500, runs, steps, func(h *harness) {
			if h.poisoned != nil {
				require.ErrorContains(t, h.poisoned, "policy of pool")
				require.NotContains(t, h.poisoned.Error(), "gpu policy")
				require.ErrorContains(t, h.poisoned, "Evict returned")
			}
		})
		t.Logf("%v; breaches %v", total, breaches)
		require.Positive(t, breaches["evict a pinned unit"], "no CPU policy returned a pinned unit")
		require.Positive(t, total["poisoned"], "no run was poisoned")
		return total
	}, nil)
}
