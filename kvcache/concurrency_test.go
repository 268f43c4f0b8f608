package kvcache

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier/layout"
	"github.com/stretchr/testify/require"
)

// TestConcurrentStress runs many goroutines against one cache (run it with
// -race) and checks the accounting while and after they run. It also checks
// that the event sink is never called concurrently.
func TestConcurrentStress(t *testing.T) {
	m := layout.Model{Name: "tiny", Layers: 2, QueryHeads: 4, KVHeads: 2, HeadDim: 2, ElemBytes: 1}
	l, err := layout.New(m, layout.BSA, 4)
	require.NoError(t, err)
	gpu, cpu := Capacity{Units: 96}, Capacity{Units: 64}
	store, err := NewMemoryStore(l, GPUAndCPU(gpu, cpu))
	require.NoError(t, err)
	var inSink, maxInSink, events atomic.Int64
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(gpu, cpu), Mover: store, Events: func(Event) {
		n := inSink.Add(1)
		if n > maxInSink.Load() {
			maxInSink.Store(n)
		}
		events.Add(1)
		inSink.Add(-1)
	}})
	require.NoError(t, err)

	workers, ops := 8, 400
	if testing.Short() {
		ops = 100
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			var mine []SeqID
			var res SparseResult
			tokens := func(n int) []uint32 {
				out := make([]uint32, n)
				for i := range out {
					out[i] = uint32(rng.IntN(2))
				}
				return out
			}
			for range ops {
				var err error
				switch op := rng.IntN(10); {
				case op < 3 || len(mine) == 0:
					var p Plan
					p, err = c.Acquire(Request{Tokens: tokens(rng.IntN(24)), Namespace: []string{"", "t"}[rng.IntN(2)], Sparse: rng.IntN(4) == 0})
					if err == nil {
						mine = append(mine, p.Seq)
					}
				case op < 5:
					_, err = c.Append(mine[rng.IntN(len(mine))], tokens(1+rng.IntN(4))...)
				case op < 6:
					id := mine[rng.IntN(len(mine))]
					n, _ := c.Len(id)
					if n > 0 {
						heads := [][]int64{{int64(rng.IntN((n + 3) / 4))}, nil, {0}, nil}
						err = c.SparseAccess(id, byQueryHeads(c.Layout(), rng.IntN(2), heads), &res)
					}
				case op < 7:
					var p Plan
					p, err = c.Fork(mine[rng.IntN(len(mine))])
					if err == nil {
						mine = append(mine, p.Seq)
					}
				case op < 8:
					_, err = c.Truncate(mine[rng.IntN(len(mine))], rng.IntN(3))
				default:
					i := rng.IntN(len(mine))
					err = c.Release(mine[i])
					mine = append(mine[:i], mine[i+1:]...)
				}
				if err != nil && !errors.Is(err, ErrNoSpace) && !errors.Is(err, ErrOutOfRange) {
					errs <- err
					return
				}
				_ = c.Stats()
			}
			for _, id := range mine {
				if err := c.Release(id); err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	checkWhileRunning(t, c, &wg, errs, 0)
	require.NoError(t, c.checkInvariants())
	st := c.Stats()
	require.Zero(t, st.Sequences)
	require.Zero(t, st.Tier(GPU).Pinned)
	require.Positive(t, events.Load())
	require.Equal(t, int64(1), maxInSink.Load(), "event sink called concurrently")
}

// checkWhileRunning checks c's invariants over and over, pause apart,
// until the workers of wg are done, then requires that none of them sent
// an error on errs.
func checkWhileRunning(t *testing.T, c *Cache, wg *sync.WaitGroup, errs chan error, pause time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
			require.NoError(t, c.checkInvariants())
			time.Sleep(pause)
		}
	}
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}
