package kvcache

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier/layout"
	"github.com/kvtier/kvtier/radix"
	"github.com/stretchr/testify/require"
)

// The concurrent model-based test runs several goroutines on one cache,
// each the server of its own sequences, while the cache's long operations
// run in steps of a few units (see slices.go), so that the steps of an
// Acquire, a Release or a Commit interleave with the other goroutines'
// calls. A goroutine acquires, appends, commits, truncates, forks,
// prefetches and releases at random, waits for readiness before it
// touches a sequence's units (with a TransferEngine), and writes the KV of
// every token it is told to compute as the harness does (bytes derived
// from the token's whole prefix). Prompts come from a few shared bases, in
// two namespaces, so that goroutines reuse each other's blocks. After
// every round all goroutines stop at a barrier and the cache is checked
// as the single-goroutine test checks it after every step: its accounting
// (slots, pins, references, transfers), every byte of every unit that
// holds bytes, each sequence's tokens and block tables, and Stats.

// concurrentConfig is one configuration of TestModelConcurrent.
type concurrentConfig struct {
	name  string
	kind  layout.Kind
	async bool
	// failPct is the percentage of transfers the engine fails.
	failPct int
	// blockKeys is Config.BlockKeys.
	blockKeys bool
}

// concurrentWorld is what the goroutines of one run share.
type concurrentWorld struct {
	t      *testing.T
	c      *Cache
	store  *MemoryStore
	lay    *layout.Layout
	engine *AsyncMemoryStore
	bases  [][]uint32
	// mu guards the goroutines' sequences (seqs) for the checker.
	mu   sync.Mutex
	seqs map[SeqID]*concSeq
	// counts of what happened, to show the run exercised each path.
	counts sync.Map
	// mine holds each goroutine's live sequences, from round to round.
	mine [][]SeqID
}

// concSeq is one sequence as its goroutine knows it.
type concSeq struct {
	keys   radix.Keys
	tokens []uint32
}

func (w *concurrentWorld) count(what string) {
	v, _ := w.counts.LoadOrStore(what, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

func (w *concurrentWorld) counted(what string) int64 {
	v, ok := w.counts.Load(what)
	if !ok {
		return 0
	}
	return v.(*atomic.Int64).Load()
}

// TestModelConcurrent runs 3 goroutines for rounds of random operations
// on one cache with steps of 1 to 4 units, with a Mover and with an
// engine that runs transfers on its own goroutines and fails some, on the
// paged and the all-layers layouts, with a policy key per unit and per
// block, under -race in CI, and checks the cache at a barrier after every
// round.
func TestModelConcurrent(t *testing.T) {
	rounds := 200
	if testing.Short() || raceEnabled {
		rounds = 50
	}
	configs := []concurrentConfig{
		{name: "paged-mover", kind: layout.PagedLayer},
		{name: "paged-async", kind: layout.PagedLayer, async: true, failPct: 5},
		{name: "alllayers-async", kind: layout.AllLayers, async: true},
		{name: "bsa-mover", kind: layout.BSA},
		{name: "paged-async-blockkeys", kind: layout.PagedLayer, async: true, failPct: 5, blockKeys: true},
		{name: "bsa-mover-blockkeys", kind: layout.BSA, blockKeys: true},
	}
	for _, cc := range configs {
		t.Run(cc.name, func(t *testing.T) {
			t.Parallel()
			for seed := range uint64(modelSeeds(t, 2)) {
				runConcurrent(t, cc, 7000+seed, rounds)
			}
		})
	}
}

func runConcurrent(t *testing.T, cc concurrentConfig, seed uint64, rounds int) {
	const workers = 3
	m := layout.Model{Name: "tiny", Layers: 2, QueryHeads: 4, KVHeads: 2, HeadDim: 2, ElemBytes: 1}
	l, err := layout.New(m, cc.kind, 4)
	require.NoError(t, err)
	units := int64(l.UnitsPerBlock())
	tiers := GPUAndCPU(Capacity{Units: 40 * units}, Capacity{Units: 24 * units})
	store, err := NewMemoryStore(l, tiers)
	require.NoError(t, err)
	w := &concurrentWorld{t: t, store: store, lay: l, seqs: map[SeqID]*concSeq{}}
	cfg := Config{Layout: l, Tiers: tiers, Mover: store, BlockKeys: cc.blockKeys}
	if cc.async {
		rng := rand.New(rand.NewPCG(seed, 99))
		var rmu sync.Mutex
		w.engine, err = NewAsyncMemoryStore(store, AsyncOptions{Workers: 2, CopyTime: time.Microsecond,
			Fail: func([]Copy) error {
				rmu.Lock()
				defer rmu.Unlock()
				if rng.IntN(100) < cc.failPct {
					return errors.New("injected transfer failure")
				}
				return nil
			}})
		require.NoError(t, err)
		defer w.engine.Close()
		cfg.Mover, cfg.Engine = nil, w.engine
	}
	w.c, err = New(cfg)
	require.NoError(t, err)
	w.c.sliceUnits = 1 + int(seed%4)
	rng := rand.New(rand.NewPCG(seed, 1))
	for range 4 {
		b := make([]uint32, 8+rng.IntN(30))
		for i := range b {
			b[i] = uint32(rng.IntN(3))
		}
		w.bases = append(w.bases, b)
	}
	w.mine = make([][]SeqID, workers)
	for round := range rounds {
		var wg sync.WaitGroup
		for g := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w.mine[g] = w.worker(rand.New(rand.NewPCG(seed, uint64(round*workers+g+2))), 12, w.mine[g])
			}()
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		w.check(fmt.Sprintf("seed %d round %d", seed, round))
	}
	// Every goroutine's sequences end; the cache is checked empty of
	// pins.
	w.mu.Lock()
	ids := slices.Collect(func(yield func(SeqID) bool) {
		for id := range w.seqs {
			if !yield(id) {
				return
			}
		}
	})
	w.mu.Unlock()
	for _, id := range ids {
		require.NoError(t, w.c.Release(id))
		delete(w.seqs, id)
	}
	w.check(fmt.Sprintf("seed %d end", seed))
	require.Zero(t, w.c.Stats().Tier(GPU).Pinned)
	for _, k := range []string{"acquire", "long acquire", "append", "commit", "release", "truncate", "fork"} {
		require.Positive(t, w.counted(k), "seed %d: %q never ran", seed, k)
	}
	t.Logf("seed %d: %d acquires (%d long), %d no space, %d busy", seed, w.counted("acquire"), w.counted("long acquire"),
		w.counted("no space"), w.counted("busy"))
}

// started records q as the reference of p's new sequence (from an
// Acquire or a Fork, counted as what), computes what p says, and returns
// mine with the sequence added.
func (w *concurrentWorld) started(what string, p Plan, q *concSeq, mine []SeqID) []SeqID {
	w.mu.Lock()
	w.seqs[p.Seq] = q
	w.mu.Unlock()
	w.count(what)
	w.compute(p.Seq, q, p.Compute)
	return append(mine, p.Seq)
}

// worker runs n random operations on its own sequences, mine (a
// goroutine of a server), then returns them, with none of its calls in
// progress.
func (w *concurrentWorld) worker(rng *rand.Rand, n int, mine []SeqID) []SeqID {
	t := w.t
	c := w.c
	for range n {
		if t.Failed() {
			return mine
		}
		op := rng.IntN(100)
		if len(mine) == 0 || (op < 25 && len(mine) < 2) {
			base := w.bases[rng.IntN(len(w.bases))]
			prompt := slices.Clone(base[:rng.IntN(len(base)+1)])
			for range rng.IntN(8) {
				prompt = append(prompt, uint32(100+rng.IntN(1000)))
			}
			keys := radix.Keys{Namespace: []string{"", "a"}[rng.IntN(2)]}
			req := Request{Tokens: prompt, Namespace: keys.Namespace}
			long := c.isLong(c.geom.numBlocks(len(prompt)) * c.geom.slices)
			p, err := c.Acquire(req)
			if w.failed(err) {
				continue
			}
			if long {
				w.count("long acquire")
			}
			mine = w.started("acquire", p, &concSeq{keys: keys, tokens: slices.Clone(prompt)}, mine)
			continue
		}
		k := rng.IntN(len(mine))
		id := mine[k]
		w.mu.Lock()
		q := w.seqs[id]
		w.mu.Unlock()
		if len(q.tokens) > 48 {
			op = 99 // long enough: released, as a finished request
		}
		switch {
		case op < 50:
			toks := make([]uint32, 1+rng.IntN(5))
			for i := range toks {
				toks[i] = uint32(100 + rng.IntN(1000))
			}
			p, err := c.Append(id, toks...)
			if w.failed(err) {
				continue
			}
			w.mu.Lock()
			q.tokens = append(q.tokens, toks...)
			w.mu.Unlock()
			w.count("append")
			w.compute(id, q, p.Compute)
		case op < 60:
			if err := c.Commit(id, len(q.tokens)); !w.failed(err) {
				w.count("commit")
			}
		case op < 70:
			cut := rng.IntN(len(q.tokens) + 1)
			p, err := c.Truncate(id, cut)
			if w.failed(err) {
				continue
			}
			w.mu.Lock()
			q.tokens = q.tokens[:len(q.tokens)-cut]
			w.mu.Unlock()
			w.count("truncate")
			w.compute(id, q, p.Compute)
		case op < 76 && len(mine) < 3:
			p, err := c.Fork(id)
			if w.failed(err) {
				continue
			}
			mine = w.started("fork", p, &concSeq{keys: q.keys, tokens: slices.Clone(q.tokens)}, mine)
		case op < 80:
			base := w.bases[rng.IntN(len(w.bases))]
			if _, err := c.Prefetch(Request{Tokens: base, Namespace: []string{"", "a"}[rng.IntN(2)]}); !w.failed(err) {
				w.count("prefetch")
			}
		case op < 82:
			var st StepTables
			require.NoError(t, c.BlockTables(&st, id))
			_ = c.Stats()
		default:
			var err error
			if rng.IntN(4) == 0 {
				err = c.Abort(id)
			} else {
				err = c.Release(id)
			}
			require.NoError(t, err)
			w.mu.Lock()
			delete(w.seqs, id)
			w.mu.Unlock()
			mine = slices.Delete(mine, k, k+1)
			w.count("release")
		}
	}
	// The goroutine's sequences stay for the next round, written.
	return mine
}

// failed reports whether err is a failure the test accepts (no room, a
// fork that must wait for a commit), or fails the test for any other.
func (w *concurrentWorld) failed(err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, ErrNoSpace):
		w.count("no space")
	case errors.Is(err, ErrBusy):
		w.count("busy")
	default:
		require.NoError(w.t, err)
	}
	return true
}

// compute plays the server after an operation on sequence id, whose
// tokens are q's: it waits until the sequence's units are readable (with
// an engine), then writes the KV of the ranges it was told to compute and
// of those whose loads failed, and declares nothing (the next Append or
// Commit does).
func (w *concurrentWorld) compute(id SeqID, q *concSeq, ranges []TokenRange) {
	ranges = slices.Clone(ranges)
	if w.engine != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		more, err := w.c.WaitReady(ctx, id, -1)
		require.NoError(w.t, err)
		if len(more) > 0 {
			w.count("recompute after a failed load")
		}
		ranges = append(ranges, more...)
	}
	w.mu.Lock()
	tokens := slices.Clone(q.tokens)
	w.mu.Unlock()
	ph := prefixHashes(q.keys, tokens)
	B := w.c.BlockTokens()
	str := w.lay.Strides()
	for _, r := range ranges {
		require.LessOrEqual(w.t, r.End, len(tokens))
		for sl := range w.lay.UnitsPerBlock() {
			table, err := w.c.BlockTable(nil, id, sl)
			require.NoError(w.t, err)
			for i := r.Start / B; i*B < r.End; i++ {
				require.NotEqual(w.t, int32(-1), table[i], "seq %d slice %d block %d: no slot for tokens %v", id, sl, i, r)
				buf := w.store.Bytes(GPU, w.c.SlicePool(sl), table[i])
				for o := range int64(len(buf)) {
					j := i*B + int((o/str.Token)%int64(B))
					if j >= r.Start && j < r.End {
						buf[o] = expectedByte(ph[j], sl, o)
					}
				}
			}
		}
	}
}

// check runs, with every goroutine stopped, the checks of the
// single-goroutine test that need no reference beyond the goroutines'
// sequences: the cache's accounting, every byte, each sequence's tokens
// and tables, Stats.
func (w *concurrentWorld) check(where string) {
	t := w.t
	c := w.c
	if w.engine != nil {
		// Let the transfers in flight finish and be applied, so that
		// every byte is where the cache says.
		for i := 0; ; i++ {
			require.Less(t, i, 100000, "%s: transfers never drain", where)
			c.mu.Lock()
			idle := c.xfer.inFlight == 0 && !c.xfer.hasWork()
			c.mu.Unlock()
			if idle {
				break
			}
			_, err := c.Poll()
			require.NoError(t, err)
			time.Sleep(10 * time.Microsecond)
		}
	}
	require.NoError(t, c.checkInvariants(), where)
	st := c.Stats()
	for _, ts := range st.Tiers {
		require.Equal(t, ts.Capacity, ts.Free+ts.Pinned+ts.Cached, where)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	require.Equal(t, len(w.seqs), len(c.seqs), where)
	require.Zero(t, c.long, "%s: long operations under way", where)
	for id, q := range w.seqs {
		s := c.seqs[id]
		require.NotNil(t, s, "%s: seq %d", where, id)
		require.Equal(t, q.tokens, s.tokens.appendTo(q.tokens[:0:0]), "%s: seq %d tokens", where, id)
		require.False(t, s.busy, "%s: seq %d busy", where, id)
		span := s.span()
		for sl := range c.geom.slices {
			table := s.table(sl)
			require.Len(t, table, len(s.blocks))
			for i, slot := range table {
				u := c.units.id(s.blocks[i], sl)
				if !span.pins(i, c.geom.poolOfSlice(sl)) {
					require.Equal(t, int32(-1), slot, "%s: seq %d slice %d block %d not pinned", where, id, sl, i)
					continue
				}
				require.Equal(t, GPU, c.units.tierOf(u), "%s: seq %d slice %d block %d", where, id, sl, i)
				require.Equal(t, c.units.slotOf(u), slot, "%s: seq %d slice %d block %d", where, id, sl, i)
			}
		}
	}
	// Every unit with bytes holds its tokens' bytes: a tree block's from
	// its chain, a private block's from its sequence (every token of
	// which its goroutine wrote).
	B := c.geom.blockTokens
	str := w.lay.Strides()
	owner := c.privateOwners()
	for b := range c.units.records() {
		r := c.units.blk(b)
		if !r.live || r.held == 0 {
			continue
		}
		var keys radix.Keys
		var tokens []uint32
		idx := int(r.index)
		if r.node != nil {
			keys = r.node.Keys()
			tokens, _ = chainTokens(r.node)
		} else {
			s := owner[int32(b)]
			require.NotNil(t, s, "%s: private block %d without owner", where, b)
			keys = s.keys
			tokens = s.tokens.appendTo(nil)
		}
		valid := min(B, len(tokens)-idx*B)
		ph := prefixHashes(keys, tokens)
		for sl := range c.geom.slices {
			u := c.units.id(int32(b), sl)
			st := c.units.of(u)
			if st.tier == Dropped || st.loading() || st.storing() || st.flags&unitUnwritten != 0 {
				continue
			}
			buf := w.store.Bytes(st.tier, c.poolOf(u), st.slot)
			for o := range int64(len(buf)) {
				tk := int((o / str.Token) % int64(B))
				if tk < valid && buf[o] != expectedByte(ph[idx*B+tk], sl, o) {
					t.Fatalf("%s: block %d (index %d, tree %t) slice %d on %s slot %d: byte %d corrupted", where, b, idx, r.node != nil, sl, st.tier, st.slot, o)
				}
			}
		}
	}
}

// concurrently runs each of fs on a goroutine of its own and returns once
// all have returned.
func concurrently(fs ...func()) {
	var wg sync.WaitGroup
	for _, f := range fs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f()
		}()
	}
	wg.Wait()
}

// cutIn changes sequence id while a long operation of it may be under
// way: after a pause that depends on round, by round it truncates it to
// 6+round tokens, appends 3 tokens, forks it (and releases the child) or,
// when release allows, releases it, which it then reports.
func cutIn(c *Cache, id SeqID, round int, release bool) (released bool, err error) {
	time.Sleep(time.Duration(round%5) * 20 * time.Microsecond)
	kinds := 3
	if release {
		kinds = 4
	}
	switch round % kinds {
	case 0:
		_, err = c.Truncate(id, 6+round)
	case 1:
		_, err = c.Append(id, 1, 2, 3)
	case 2:
		var f Plan
		if f, err = c.Fork(id); err == nil {
			err = c.Release(f.Seq)
		}
	case 3:
		return true, c.Release(id)
	}
	return false, err
}

// TestLongCommitMakesOthersWait commits a 64-block sequence in steps of
// one unit while another goroutine truncates it, appends to it or forks
// it: its call waits for the commit (the sequence is busy), so it never
// changes a half-committed sequence under the commit (which went on
// committing blocks past the sequence's new end, from tokens no longer
// its own), and the cache's accounting holds after every round.
func TestLongCommitMakesOthersWait(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: 2 * 200}, Capacity{})})
	require.NoError(t, err)
	c.sliceUnits = 1
	for round := range 60 {
		p, err := c.Acquire(Request{Tokens: seqTokens(256, uint32(round)<<16)})
		require.NoError(t, err)
		concurrently(func() {
			if err := c.Commit(p.Seq, 256); err != nil {
				// The Truncate came first.
				require.ErrorIs(t, err, ErrOutOfRange)
			}
		}, func() {
			// Let the commit begin, then cut into what it commits.
			_, err := cutIn(c, p.Seq, round, false)
			require.NoError(t, err)
		})
		require.NoError(t, c.checkInvariants(), "round %d", round)
		require.NoError(t, c.Release(p.Seq))
		require.NoError(t, c.checkInvariants(), "round %d", round)
		require.Zero(t, c.Stats().Tier(GPU).Pinned, "round %d", round)
	}
}
