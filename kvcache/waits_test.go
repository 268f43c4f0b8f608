package kvcache

import (
	"errors"
	"testing"

	"github.com/kvtier/kvtier/layout"
	"github.com/stretchr/testify/require"
)

// waitsCache returns a cache whose GPU is full of cached units, so that
// every block an Append opens evicts victims that move down to the CPU
// through an engine: each block-opening Append makes transfers its
// sequence waits on.
func waitsCache(t testing.TB) (*Cache, SeqID) {
	// Windows of 8 tokens: a decoding sequence pins its last blocks only,
	// so that the GPU's victims can be its own older blocks.
	m := layout.Model{Name: "w", Layers: 4, QueryHeads: 2, KVHeads: 1, HeadDim: 2, ElemBytes: 1, Windows: []int{8, 8, 8, 8}}
	l, err := layout.New(m, layout.PagedLayer, 4)
	if err != nil {
		t.Fatal(err)
	}
	tiers := GPUAndCPU(Capacity{Units: 4 * 64}, Capacity{Units: 4 * 1 << 14})
	ms, err := NewMemoryStore(l, tiers)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Layout: l, Tiers: tiers, Engine: MoverEngine(ms)})
	if err != nil {
		t.Fatal(err)
	}
	// Fill the GPU with a cached prompt, then start the sequence.
	p, err := c.Acquire(Request{Tokens: seqTokens(4*60, 1<<20)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Commit(p.Seq, 4*60); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(p.Seq); err != nil {
		t.Fatal(err)
	}
	q, err := c.Acquire(Request{Tokens: seqTokens(4, 0)})
	if err != nil {
		t.Fatal(err)
	}
	return c, q.Seq
}

// TestWaitsDoNotPileUp drives completion with Poll alone (no Readiness,
// which the docs allow) through 2,000 block-opening Appends: the
// sequence's waits and the cache's table of transfers stay as small as
// what is in flight. (They used to keep every transfer the sequence had
// waited on, and each new transfer scanned the list.)
func TestWaitsDoNotPileUp(t *testing.T) {
	c, id := waitsCache(t)
	for i := range 2000 * 4 {
		if _, err := c.Append(id, uint32(i)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Poll(); err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		waits, known := len(c.seqs[id].waits), len(c.xfer.byID)
		c.mu.Unlock()
		if waits != 0 || known != 0 {
			t.Fatalf("append %d: the sequence waits on %d transfers and the cache knows %d, all finished", i, waits, known)
		}
	}
	if moves := c.Stats().Offloads; moves < 1000 {
		t.Fatalf("%d units moved down: the Appends made too few transfers to test", moves)
	}
}

// TestFailuresReachPollOnlySequences checks that a failed load's units
// reach the sequence that waited on it although the transfer is forgotten
// as soon as Poll applies it: a later Readiness reports the blocks to
// recompute, once.
func TestFailuresReachPollOnlySequences(t *testing.T) {
	c, e, _ := asyncCache(t, Capacity{Units: 4}, Capacity{Units: 8})
	prompt, other := seqTokens(8, 0), seqTokens(8, 100)
	cachedOnCPU(t, c, e, prompt, other)
	plan, err := c.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	require.Equal(t, 4, plan.Onboarded)
	for len(e.started) > 0 {
		fail := errors.New("injected")
		// Fail the transfer that loads layer 1 (the second one), let
		// the others through.
		e.complete(t, 0, map[bool]error{true: fail}[len(e.started) == 1])
	}
	n, err := c.Poll()
	require.NoError(t, err)
	require.Positive(t, n)
	c.mu.Lock()
	require.Empty(t, c.seqs[plan.Seq].waits, "finished transfers stay in the sequence's waits")
	require.Empty(t, c.xfer.byID, "finished transfers stay known")
	c.mu.Unlock()
	var r Readiness
	require.NoError(t, c.Readiness(plan.Seq, &r))
	require.Equal(t, []TokenRange{{0, 8}}, r.Recompute)
	require.Zero(t, r.Pending)
	require.NoError(t, c.Readiness(plan.Seq, &r))
	require.Equal(t, []TokenRange{{0, 8}}, r.Recompute, "owed until written: reported again")
	require.NoError(t, c.Commit(plan.Seq, 8))
	require.NoError(t, c.Readiness(plan.Seq, &r))
	require.Empty(t, r.Recompute, "declared written")
}
