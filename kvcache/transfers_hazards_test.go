package kvcache

import (
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/kvtier/kvtier/layout"
	"github.com/stretchr/testify/require"
)

// Hazards of transfers in flight that a review found (each test failed
// before its fix): a slot still read by a copy-on-write freed by another
// transfer's end, a block rewritten while a copy reads it, and user code
// that ends its goroutine in the middle.

// revEngine: transfers complete only when the test says so, by id.
type revEngine struct {
	store *MemoryStore
	jobs  []*revJob
}

type revJob struct {
	copies []Copy
	done   func(error)
	over   bool
}

func (e *revEngine) Start(copies []Copy, done func(error)) {
	e.jobs = append(e.jobs, &revJob{copies: append([]Copy(nil), copies...), done: done})
}

func (e *revEngine) finish(t *testing.T, i int, err error) {
	t.Helper()
	j := e.jobs[i]
	require.False(t, j.over)
	j.over = true
	if err == nil {
		require.NoError(t, e.store.Copy(j.copies))
	}
	j.done(err)
}

// jobCache is a cache over a MemoryStore for layout l and tiers whose
// transfers a revEngine runs when the test says; wrap, when not nil,
// makes the engine the cache calls out of it.
func jobCache(t *testing.T, l *layout.Layout, tiers []TierConfig, wrap func(*revEngine) TransferEngine) (*Cache, *MemoryStore, *revEngine) {
	t.Helper()
	store, err := NewMemoryStore(l, tiers)
	require.NoError(t, err)
	e := &revEngine{store: store}
	var engine TransferEngine = e
	if wrap != nil {
		engine = wrap(e)
	}
	c, err := New(Config{Layout: l, Tiers: tiers, Engine: engine})
	require.NoError(t, err)
	return c, store, e
}

// drain completes every unfinished job not in skip (and those they start).
func (e *revEngine) drain(t *testing.T, c *Cache, skip map[int]bool) {
	t.Helper()
	for {
		progress := false
		for i, j := range e.jobs {
			if !j.over && !skip[i] {
				e.finish(t, i, nil)
				progress = true
			}
		}
		_, err := c.Poll()
		require.NoError(t, err)
		if !progress {
			return
		}
	}
}

func concat(xs ...[]uint32) []uint32 {
	var out []uint32
	for _, x := range xs {
		out = append(out, x...)
	}
	return out
}

// TestAsyncCopySourceOutlivesALoadOfIt: a copy-on-write reads its source
// from the CPU; another sequence onboards the same unit; the load
// finishing must not free the CPU slot while the copy still reads it (it
// did, and another unit moved down into it).
func TestAsyncCopySourceOutlivesALoadOfIt(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, []int{4, 0}) // layer 0 window 4: pool 0
	c, store, e := jobCache(t, l, GPUAndCPU(Capacity{Units: 20}, Capacity{Units: 16}), nil)
	none := map[int]bool{}

	ta := seqTokens(8, 0)
	a, err := c.Acquire(Request{Tokens: ta})
	require.NoError(t, err)
	e.drain(t, c, none)
	writeBlocks(t, c, store, a.Seq, ta, 0, 2)
	ta = concat(ta, seqTokens(8, 100))
	_, err = c.Append(a.Seq, ta[8:]...)
	require.NoError(t, err)
	e.drain(t, c, none)
	writeBlocks(t, c, store, a.Seq, ta, 2, 4)
	ta = append(ta, 7)
	_, err = c.Append(a.Seq, 7) // commits blocks 2, 3; pool 0 unpins blocks 0..2
	require.NoError(t, err)
	e.drain(t, c, none)

	ty := seqTokens(12, 300)
	y, err := c.Acquire(Request{Tokens: ty})
	require.NoError(t, err)
	e.drain(t, c, none)
	writeBlocks(t, c, store, y.Seq, ty, 0, 3)
	finish(t, c, y.Seq)

	tx := seqTokens(16, 500)
	x, err := c.Acquire(Request{Tokens: tx})
	require.NoError(t, err)
	e.drain(t, c, none)
	writeBlocks(t, c, store, x.Seq, tx, 0, 4)
	require.NoError(t, c.Commit(x.Seq, 16))
	e.drain(t, c, none)

	loc, err := c.Locate(a.Seq, 2, 0)
	require.NoError(t, err)
	require.Equal(t, CPU, loc.Tier, "setup: block 1's windowed unit is on the CPU")
	cpuSlot := loc.Slot

	// Truncate A to 6 tokens: block 1 becomes partial and is copied on
	// write; its windowed unit is copied from the CPU.
	first := len(e.jobs)
	_, err = c.Truncate(a.Seq, len(ta)-10)
	require.NoError(t, err)
	cow := map[int]bool{}
	for i := first; i < len(e.jobs); i++ {
		for _, cp := range e.jobs[i].copies {
			if cp.From == CPU && cp.FromSlot == cpuSlot && cp.Pool == 0 {
				cow[i] = true
			}
		}
	}
	require.NotEmpty(t, cow, "the copy-on-write reads the CPU slot")

	// B onboards the same unit; its load completes (with everything else
	// but the copy-on-write).
	_, err = c.Acquire(Request{Tokens: ta[:12]})
	require.NoError(t, err)
	e.drain(t, c, cow)
	// X goes: a new prompt pushes X's units down to the CPU, into the
	// freed slot.
	require.NoError(t, c.Release(x.Seq))
	z, err := c.Acquire(Request{Tokens: seqTokens(8, 900)})
	require.NoError(t, err)
	e.drain(t, c, cow)
	_ = z
	for i := range cow {
		e.finish(t, i, nil)
	}
	e.drain(t, c, none)
	// A's first 6 tokens: block 0 and (copied) block 1.
	for sl := range 2 {
		table, err := c.BlockTable(nil, a.Seq, sl)
		require.NoError(t, err)
		for i, slot := range table {
			buf := store.Bytes(GPU, c.SlicePool(sl), slot)
			for o := range buf {
				require.Equal(t, pattern(ta[i*4], sl, o), buf[o], "A block %d slice %d byte %d", i, sl, o)
			}
		}
	}
	require.NoError(t, c.checkInvariants())
}

type goexitEngine struct {
	inner *revEngine
	exit  bool
}

func (e *goexitEngine) Start(copies []Copy, done func(error)) {
	if e.exit {
		e.exit = false
		runtime.Goexit()
	}
	e.inner.Start(copies, done)
}

// TestAsyncEngineStartGoexitPoisons: an engine that ends the goroutine in
// Start (as a panic would) left the operation half done: transfers never
// started, slots held by nobody, Clear refusing forever. Now the cache is
// poisoned with an error that says why.
func TestAsyncEngineStartGoexitPoisons(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	var e *goexitEngine
	c, store, inner := jobCache(t, l, GPUAndCPU(Capacity{Units: 4}, Capacity{Units: 8}), func(r *revEngine) TransferEngine {
		e = &goexitEngine{inner: r}
		return e
	})
	none := map[int]bool{}
	p := seqTokens(8, 0)
	a, err := c.Acquire(Request{Tokens: p})
	require.NoError(t, err)
	writeBlocks(t, c, store, a.Seq, p, 0, 2)
	finish(t, c, a.Seq)
	b, err := c.Acquire(Request{Tokens: seqTokens(8, 100)}) // pushes p to the CPU
	require.NoError(t, err)
	inner.drain(t, c, none)
	writeBlocks(t, c, store, b.Seq, seqTokens(8, 100), 0, 2)
	finish(t, c, b.Seq)
	inner.drain(t, c, none)

	e.exit = true
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _, _ = c.Acquire(Request{Tokens: p}) }() // two transfers, one per layer
	wg.Wait()
	// The engine may still be writing what it was handed: the cache
	// refuses every change, so no slot is handed out again, and answers
	// reads.
	require.ErrorIs(t, c.Clear(), ErrCopyFailed)
	_, err = c.Acquire(Request{Tokens: seqTokens(4, 900)})
	require.ErrorIs(t, err, ErrCopyFailed)
	var pe *PanicError
	require.ErrorAs(t, err, &pe)
	require.Positive(t, c.Stats().Transfers, "the unstarted transfer stays in flight")
}

// TestWriteThroughMoverGoexitGivesBackupsUp: a Mover that ends the
// goroutine while writing backups left them recorded but never written;
// an eviction later moved a unit to its "backup" for free and a load
// served its zeros.
func TestWriteThroughMoverGoexitGivesBackupsUp(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	tiers := GPUAndCPU(Capacity{Units: 4}, Capacity{Units: 8})
	tiers[1].WriteThrough = true
	store, err := NewMemoryStore(l, tiers)
	require.NoError(t, err)
	m := &goexitMover{inner: store}
	c, err := New(Config{Layout: l, Tiers: tiers, Mover: m})
	require.NoError(t, err)
	p := seqTokens(8, 0)
	a, err := c.Acquire(Request{Tokens: p})
	require.NoError(t, err)
	writeBlocks(t, c, store, a.Seq, p, 0, 2)
	m.armed = true
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = c.Commit(a.Seq, 8) }() // the backups' batch ends the goroutine
	wg.Wait()
	require.Zero(t, c.Stats().Tier(CPU).Backups, "the backups are given up")
	require.NoError(t, c.checkInvariants())
	require.NoError(t, c.Release(a.Seq))
	// Another prompt evicts p's units: to their "backups", never written.
	q := seqTokens(8, 100)
	b, err := c.Acquire(Request{Tokens: q})
	require.NoError(t, err)
	require.NotEmpty(t, b.Executed, "the victims are copied down")
	writeBlocks(t, c, store, b.Seq, q, 0, 2)
	finish(t, c, b.Seq)
	a2, err := c.Acquire(Request{Tokens: p})
	require.NoError(t, err)
	requireBlocks(t, c, store, a2.Seq, p)
}

// TestAsyncNoDetachWhileCopied: B's copy-on-write reads block 1 of A; A
// then truncates into block 1, which is its alone and a leaf now: it was
// detached and A's server rewrote it while B's copy still read it. It is
// copied on write instead while a transfer reads it.
func TestAsyncNoDetachWhileCopied(t *testing.T) {
	c, store, e := jobCache(t, tinyLayout(t, layout.PagedLayer, nil), GPUAndCPU(Capacity{Units: 16}, Capacity{Units: 8}), nil)
	none := map[int]bool{}
	p := seqTokens(10, 0)
	a, err := c.Acquire(Request{Tokens: p})
	require.NoError(t, err)
	e.drain(t, c, none)
	writeBlocks(t, c, store, a.Seq, p, 0, 3)
	b, err := c.Fork(a.Seq) // commits blocks 0, 1
	require.NoError(t, err)
	e.drain(t, c, none)
	first := len(e.jobs)
	_, err = c.Truncate(b.Seq, 4) // 6 tokens: block 1 copied on write
	require.NoError(t, err)
	cow := map[int]bool{}
	for i := first; i < len(e.jobs); i++ {
		cow[i] = true
	}
	require.NotEmpty(t, cow)
	_, err = c.Truncate(a.Seq, 5) // 5 tokens: block 1 is A's alone, but B's copy reads it
	require.NoError(t, err)
	e.drain(t, c, cow) // A's own transfers, not B's copy
	var r Readiness
	require.NoError(t, c.Readiness(a.Seq, &r))
	require.Zero(t, r.Pending, "A may write block 1 now")
	tb, err := c.BlockTable(nil, b.Seq, 0)
	require.NoError(t, err)
	ta, err := c.BlockTable(nil, a.Seq, 0)
	require.NoError(t, err)
	require.NotEqual(t, tb[1], ta[1], "A writes a copy of block 1, not the block B's copy reads")
	// A's server computes token 5 onward into block 1.
	for sl := range 2 {
		table, err := c.BlockTable(nil, a.Seq, sl)
		require.NoError(t, err)
		buf := store.Bytes(GPU, c.SlicePool(sl), table[1])
		for o := range buf {
			buf[o] = 0xAB
		}
	}
	e.drain(t, c, none) // B's copy runs now
	require.NoError(t, c.Readiness(b.Seq, &r))
	require.Zero(t, r.Pending)
	require.Empty(t, r.Recompute)
	requireBlocks(t, c, store, b.Seq, p[:6])
}

// TestAsyncTruncateTakesBackADeclaredCommit: a sequence's commit waits for
// a transfer that moves the equal cached block down; meanwhile its sliding
// window passes that block (its private unit there is dropped) and a
// Truncate moves the window back, which gives the unit a fresh slot for the
// server to recompute. When the transfer ends, the waiting commit must not
// merge that slot, whose bytes are not written yet, into the cached block
// (it did: the cache then served a block of garbage as a hit).
func TestAsyncTruncateTakesBackADeclaredCommit(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, []int{4, 0}) // layer 0 window 4
	c, store, e := jobCache(t, l, GPUAndCPU(Capacity{Units: 16}, Capacity{Units: 16}), nil)
	none := map[int]bool{}

	prompt := seqTokens(8, 0)
	p, err := c.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	a, err := c.Acquire(Request{Tokens: prompt}) // P has not committed: A computes too
	require.NoError(t, err)
	require.Equal(t, []TokenRange{{Start: 0, End: 8}}, a.Compute)
	e.drain(t, c, none)
	writeBlocks(t, c, store, p.Seq, prompt, 0, 2)
	writeBlocks(t, c, store, a.Seq, prompt, 0, 2)
	c.mu.Lock()
	cached := c.units.id(c.seqs[p.Seq].blocks[0], 0) // P's block 0, layer 0
	c.mu.Unlock()
	finish(t, c, p.Seq)
	e.drain(t, c, none)

	// New prompts fill the GPU until the cached block's windowed unit is
	// moving down to the CPU; that transfer is held.
	held := holdMoveDown(t, c, store, e, cached)

	// A's server wrote tokens 0..8 and appends 8..12: the implicit commit
	// of blocks 0 and 1 waits for the move down (block 0 equals the
	// cached one), and the window of token 12 leaves blocks 0 and 1.
	more := append(slices.Clone(prompt), seqTokens(4, 8)...)
	_, err = c.Append(a.Seq, more[8:]...)
	require.NoError(t, err)
	e.drain(t, c, held)
	// A's block 0, private and out of its window, is unpinned: new
	// prompts take its slot.
	c.mu.Lock()
	mine := c.units.id(c.seqs[a.Seq].blocks[0], 0)
	c.mu.Unlock()
	pushOut(t, c, store, e, held, mine, cached)
	// Speculation rejected: back to 5 tokens. The window of token 5
	// covers blocks 0 and 1 again; A's units there were dropped, so the
	// server recomputes from token 0.
	tp, err := c.Truncate(a.Seq, 7)
	require.NoError(t, err)
	require.Equal(t, 0, tp.Compute[0].Start, "Truncate plans %+v", tp)
	e.drain(t, c, held)

	// The move down ends; the waiting commit runs.
	e.drain(t, c, none)
	requireCachedBytes(t, c, store, cached, prompt[0], "before A's server recomputed it")
	require.NoError(t, c.checkInvariants())

	// The server recomputes what the Truncate asked and commits: the
	// cached block holds the right bytes, whichever copy serves it.
	writeBlocks(t, c, store, a.Seq, more[:5], 0, 1)
	writeBlocks(t, c, store, a.Seq, more[:5], 1, 2)
	require.NoError(t, c.Commit(a.Seq, 5))
	e.drain(t, c, none)
	b, err := c.Acquire(Request{Tokens: prompt[:4]})
	require.NoError(t, err)
	e.drain(t, c, none)
	requireBlocks(t, c, store, b.Seq, prompt[:4])
	require.NoError(t, c.checkInvariants())
}

// TestAsyncSparseRestoreTakesBackADeclaredCommit: as in
// TestAsyncTruncateTakesBackADeclaredCommit, with a sparse sequence whose
// commit waits while it has no bytes for a unit of the block (a sparse
// sequence pins only the block of its next token), which a SparseAccess
// then restores into a fresh slot that its server writes with the layer's
// kernel. The waiting commit must not merge that slot into the cached
// block before the server declares it written.
func TestAsyncSparseRestoreTakesBackADeclaredCommit(t *testing.T) {
	l := tinyLayout(t, layout.BSA, nil) // 4 units per block: (layer, KV head)
	c, store, e := jobCache(t, l, GPUAndCPU(Capacity{Units: 32}, Capacity{Units: 32}), nil)
	none := map[int]bool{}

	prompt := seqTokens(8, 0)
	a, err := c.Acquire(Request{Tokens: prompt, Sparse: true})
	require.NoError(t, err)
	require.Equal(t, 8, a.Pending)
	p, err := c.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	e.drain(t, c, none)
	_, err = c.Append(a.Seq, prompt...) // A's prefill: blocks 0 and 1, private
	require.NoError(t, err)
	e.drain(t, c, none)
	writeBlocks(t, c, store, p.Seq, prompt, 0, 2)
	for sl := range l.UnitsPerBlock() { // A's server writes the units it has
		for b := range 2 {
			loc, err := c.Locate(a.Seq, b, sl)
			require.NoError(t, err)
			if loc.Tier == GPU {
				buf := store.Bytes(GPU, loc.Pool, loc.Slot)
				for o := range buf {
					buf[o] = pattern(prompt[b*4], sl, o)
				}
			}
		}
	}
	c.mu.Lock()
	cached := c.units.id(c.seqs[p.Seq].blocks[0], 0) // P's block 0, layer 0 head 0
	mine := c.units.id(c.seqs[a.Seq].blocks[0], 0)
	c.mu.Unlock()
	finish(t, c, p.Seq)
	e.drain(t, c, none)

	held := holdMoveDown(t, c, store, e, cached)

	// A appends a token: its commit of blocks 0 and 1 waits for the move
	// down.
	_, err = c.Append(a.Seq, 8)
	require.NoError(t, err)
	e.drain(t, c, held)
	c.mu.Lock()
	_, waits := c.xfer.declared[c.seqs[a.Seq]]
	c.mu.Unlock()
	require.True(t, waits, "setup: A's commit does not wait")
	// New prompts take the slot of A's block 0, which A does not pin.
	pushOut(t, c, store, e, held, mine, cached)

	// Layer 0 reads block 0: A's unit there is restored into a fresh slot.
	var res SparseResult
	require.NoError(t, c.SparseAccess(a.Seq, Selection{Layer: 0, Blocks: [][]int{{0}, {0}}}, &res))
	restored := false
	for _, u := range res.Units {
		restored = restored || (u.Block == 0 && u.From == Dropped)
	}
	require.True(t, restored, "setup: SparseAccess restored nothing: %+v", res.Units)

	// The move down ends before the layer's kernel ran.
	e.drain(t, c, none)
	requireCachedBytes(t, c, store, cached, prompt[0], "before A's server restored it")
	require.NoError(t, c.checkInvariants())
}

// holdMoveDown serves new 4-token prompts, completing their transfers,
// until one of them moves cached unit u down to the CPU, and returns the
// engine jobs of that prompt's Acquire, which the test holds.
func holdMoveDown(t *testing.T, c *Cache, store *MemoryStore, e *revEngine, u UnitID) map[int]bool {
	t.Helper()
	none := map[int]bool{}
	for k := range 32 {
		first := len(e.jobs)
		f := seqTokens(4, uint32(1000+100*k))
		fp, err := c.Acquire(Request{Tokens: f})
		require.NoError(t, err)
		c.mu.Lock()
		storing := c.units.of(u).storing()
		c.mu.Unlock()
		if storing {
			held := map[int]bool{}
			for i := first; i < len(e.jobs); i++ {
				held[i] = true
			}
			return held
		}
		e.drain(t, c, none)
		writeBlocks(t, c, store, fp.Seq, f, 0, 1)
		finish(t, c, fp.Seq)
		e.drain(t, c, none)
	}
	t.Fatal("setup: the cached unit never moved down")
	return nil
}

// pushOut serves new 4-token prompts, completing every transfer but held,
// until unpinned unit u has lost its GPU slot, while cached's move down
// stays held.
func pushOut(t *testing.T, c *Cache, store *MemoryStore, e *revEngine, held map[int]bool, u, cached UnitID) {
	t.Helper()
	for k := range 32 {
		f := seqTokens(4, uint32(5000+100*k))
		fp, err := c.Acquire(Request{Tokens: f})
		require.NoError(t, err)
		e.drain(t, c, held)
		writeBlocks(t, c, store, fp.Seq, f, 0, 1)
		finish(t, c, fp.Seq)
		e.drain(t, c, held)
		c.mu.Lock()
		gone, storing := c.units.of(u).tier != GPU, c.units.of(cached).storing()
		c.mu.Unlock()
		if gone {
			require.True(t, storing, "setup: the move down is held")
			return
		}
	}
	t.Fatal("setup: the unpinned private unit kept its slot")
}

// requireCachedBytes checks that cached unit u (slice 0 of its block),
// when on the GPU, holds the bytes of the block whose first token is
// first.
func requireCachedBytes(t *testing.T, c *Cache, store *MemoryStore, u UnitID, first uint32, when string) {
	t.Helper()
	c.mu.Lock()
	st := *c.units.of(u)
	c.mu.Unlock()
	if st.tier != GPU {
		return
	}
	buf := store.Bytes(GPU, c.SlicePool(0), st.slot)
	for o := range buf {
		require.Equal(t, pattern(first, 0, o), buf[o], "the cached block on GPU slot %d, byte %d, %s", st.slot, o, when)
	}
}
