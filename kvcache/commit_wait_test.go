package kvcache_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/layout"
	"github.com/stretchr/testify/require"
)

// heldStream is a TransferEngine that holds every transfer until run:
// the test decides when transfers finish, and whether they fail.
type heldStream struct {
	mem  *kvcache.MemoryStore
	mu   sync.Mutex
	held []func(fail bool)
}

func (d *heldStream) Start(copies []kvcache.Copy, done func(error)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.held = append(d.held, func(fail bool) {
		if fail {
			done(errors.New("heldStream: injected failure"))
			return
		}
		done(d.mem.Copy(copies))
	})
}

// run finishes every transfer started so far.
func (d *heldStream) run() { d.finish(false) }

// finish finishes every transfer started so far, failing each when fail
// is set, and returns how many.
func (d *heldStream) finish(fail bool) int {
	d.mu.Lock()
	held := d.held
	d.held = nil
	d.mu.Unlock()
	for _, f := range held {
		f(fail)
	}
	return len(held)
}

func countFrom(n int, base uint32) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = base + uint32(i)
	}
	return out
}

// evictingPrompt builds a cache whose GPU holds 2*blocks units (a toy model
// paged per layer: 2 units per block), fills it with a committed prompt of
// blocks blocks, and acquires a second one of as many blocks: its slots are
// the first prompt's, whose bytes move down to the CPU by transfers that
// engine runs (a heldStream when engine is nil, returned).
func evictingPrompt(t *testing.T, blocks int, engine func(*kvcache.MemoryStore) kvcache.TransferEngine) (*kvcache.Cache, *heldStream, kvcache.SeqID, []uint32) {
	t.Helper()
	m := layout.Model{Name: "toy", Layers: 2, QueryHeads: 4, KVHeads: 2, HeadDim: 8, ElemBytes: 2}
	l, err := layout.New(m, layout.PagedLayer, 16)
	require.NoError(t, err)
	units := int64(2 * blocks)
	tiers := kvcache.GPUAndCPU(kvcache.Capacity{Units: units}, kvcache.Capacity{Units: 2 * units})
	mem, err := kvcache.NewMemoryStore(l, tiers)
	require.NoError(t, err)
	var stream *heldStream
	var e kvcache.TransferEngine
	if engine == nil {
		stream = &heldStream{mem: mem}
		e = stream
	} else {
		e = engine(mem)
	}
	c, err := kvcache.New(kvcache.Config{Layout: l, Tiers: tiers, Engine: e})
	require.NoError(t, err)
	a, b := countFrom(16*blocks, 0), countFrom(16*blocks, 1<<20)
	p, err := c.Acquire(kvcache.Request{Tokens: a})
	require.NoError(t, err)
	require.NoError(t, c.Commit(p.Seq, len(a)))
	require.NoError(t, c.Release(p.Seq))
	p, err = c.Acquire(kvcache.Request{Tokens: b})
	require.NoError(t, err)
	return c, stream, p.Seq, b
}

// TestWaitReadyWaitsForALongCommit: a Commit whose blocks' slots are still
// being vacated goes on when the transfers finish, a step's worth of blocks
// per call; WaitReady with layer -1 returns only once it is done, so that
// Commit, WaitReady, Release keeps every block (200 blocks here: four times
// a step's worth). With a test engine and with AsyncMemoryStore.
func TestWaitReadyWaitsForALongCommit(t *testing.T) {
	const blocks = 200
	for _, name := range []string{"held", "async"} {
		t.Run(name, func(t *testing.T) {
			var engine func(*kvcache.MemoryStore) kvcache.TransferEngine
			if name == "async" {
				engine = func(mem *kvcache.MemoryStore) kvcache.TransferEngine {
					e, err := kvcache.NewAsyncMemoryStore(mem, kvcache.AsyncOptions{Workers: 2})
					require.NoError(t, err)
					t.Cleanup(e.Close)
					return e
				}
			}
			c, stream, seq, b := evictingPrompt(t, blocks, engine)
			require.NoError(t, c.Commit(seq, len(b)))
			if stream != nil {
				var r kvcache.Readiness
				require.NoError(t, c.Readiness(seq, &r))
				require.Positive(t, r.Pending, "the commit waits for held transfers")
				stream.run()
			}
			_, err := c.WaitReady(context.Background(), seq, -1)
			require.NoError(t, err)
			require.NoError(t, c.Release(seq))
			again, err := c.Acquire(kvcache.Request{Tokens: b})
			require.NoError(t, err)
			require.Equal(t, 2*blocks, again.Hits, "Commit, WaitReady(-1), Release kept %d of %d units; computes %v", again.Hits, 2*blocks, again.Compute)
		})
	}
}

// TestAcquireAppliesFinishedTransfersFirst: once the engine has reported
// every transfer done, an Acquire that needs the slots they held finds
// them, though no call applied the transfers in between; also when they
// are more than a step's worth of moves (200 blocks).
func TestAcquireAppliesFinishedTransfersFirst(t *testing.T) {
	for _, blocks := range []int{2, 200} {
		c, stream, seq, b := evictingPrompt(t, blocks, nil)
		require.NoError(t, c.Abort(seq))
		stream.run()
		_, err := c.Acquire(kvcache.Request{Tokens: b})
		require.NoError(t, err, "%d blocks", blocks)
	}
}

// TestWaitReadyReturnsWhenACommitWaitsForTheServer: a Fork's copy on write
// of the partial block fails while the child's Commit of that block waits
// for it. The commit can then go on only once the server has recomputed
// the block and declared it again, so WaitReady with layer -1 returns the
// block to recompute rather than waiting for the commit; the server's
// next Commit then goes through.
func TestWaitReadyReturnsWhenACommitWaitsForTheServer(t *testing.T) {
	m := layout.Model{Name: "toy", Layers: 2, QueryHeads: 4, KVHeads: 2, HeadDim: 8, ElemBytes: 2}
	l, err := layout.New(m, layout.PagedLayer, 16)
	require.NoError(t, err)
	tiers := kvcache.GPUAndCPU(kvcache.Capacity{Units: 16}, kvcache.Capacity{Units: 16})
	mem, err := kvcache.NewMemoryStore(l, tiers)
	require.NoError(t, err)
	e := &heldStream{mem: mem}
	c, err := kvcache.New(kvcache.Config{Layout: l, Tiers: tiers, Engine: e})
	require.NoError(t, err)
	p, err := c.Acquire(kvcache.Request{Tokens: countFrom(24, 0)})
	require.NoError(t, err)
	require.NoError(t, c.Commit(p.Seq, 24))
	f, err := c.Fork(p.Seq) // copies the partial block 1 on write
	require.NoError(t, err)
	_, err = c.Append(f.Seq, countFrom(8, 100)...)
	require.NoError(t, err)
	require.NoError(t, c.Commit(f.Seq, 32))
	var r kvcache.Readiness
	require.NoError(t, c.Readiness(f.Seq, &r))
	require.Positive(t, r.Pending, "setup: the copy, and the commit waiting for it")
	require.Positive(t, e.finish(true))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	recompute, err := c.WaitReady(ctx, f.Seq, -1)
	require.NoError(t, err, "WaitReady(-1) waited for a commit only the server can let through")
	require.Equal(t, []kvcache.TokenRange{{Start: 16, End: 32}}, recompute)
	require.NoError(t, c.Commit(f.Seq, 32)) // recomputed
	require.NoError(t, c.Readiness(f.Seq, &r))
	require.Zero(t, r.Pending)
	require.Empty(t, r.Recompute)
}
