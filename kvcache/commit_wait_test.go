package kvcache_test

import (
	"context"
	"sync"
	"testing"

	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/layout"
	"github.com/stretchr/testify/require"
)

// heldStream is a TransferEngine that holds every transfer until run:
// the test decides when transfers finish.
type heldStream struct {
	mem  *kvcache.MemoryStore
	mu   sync.Mutex
	held []func()
}

func (d *heldStream) Start(copies []kvcache.Copy, done func(error)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.held = append(d.held, func() { done(d.mem.Copy(copies)) })
}

// run finishes every transfer started so far.
func (d *heldStream) run() {
	d.mu.Lock()
	held := d.held
	d.held = nil
	d.mu.Unlock()
	for _, f := range held {
		f()
	}
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
// them, though no call applied the transfers in between.
func TestAcquireAppliesFinishedTransfersFirst(t *testing.T) {
	c, stream, seq, b := evictingPrompt(t, 2, nil)
	require.NoError(t, c.Abort(seq))
	stream.run()
	_, err := c.Acquire(kvcache.Request{Tokens: b})
	require.NoError(t, err)
}
