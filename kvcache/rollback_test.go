package kvcache

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvtier/kvtier/costmodel"
	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/layout"
	"github.com/stretchr/testify/require"
)

// twin is one of two caches that run the same requests, one of which also
// runs an operation that fails.
type twin struct {
	c      *Cache
	mover  *faultyMover
	clock  *eviction.ManualClock
	events []string
}

func newTwin(t *testing.T, f PolicyFactory) *twin {
	l := tinyLayout(t, layout.PagedLayer, nil)
	gpu, cpu := Capacity{Units: 8}, Capacity{Units: 4}
	store, err := NewMemoryStore(l, GPUAndCPU(gpu, cpu))
	require.NoError(t, err)
	tw := &twin{mover: &faultyMover{inner: store}, clock: &eviction.ManualClock{}}
	// Every policy is priced with the same cost (RetentionPolicy reads
	// it; with no link, the default Decider moves every victim it can, as
	// without a cost).
	tw.c, err = New(Config{Layout: l, Tiers: tiersOf(gpu, cpu, f, f), Recompute: &costmodel.Recompute{Alpha: 1e-3, Beta: 1e-2},
		Mover: tw.mover, Clock: tw.clock, Events: func(e Event) {
			tw.events = append(tw.events, fmt.Sprintf("%s %x/%d %s->%s", e.Kind, e.Hash, e.Slice, e.From, e.To))
		}})
	require.NoError(t, err)
	return tw
}

// serve runs one request that finishes: acquire, commit, release.
func (tw *twin) serve(t *testing.T, tokens []uint32, prio int) {
	t.Helper()
	tw.clock.Advance(time.Second)
	p, err := tw.c.Acquire(Request{Tokens: tokens, Priorities: &Priorities{Default: prio, DefaultDuration: 3 * time.Second}})
	require.NoError(t, err)
	finish(t, tw.c, p.Seq)
}

// TestFailedOperationLeavesPoliciesAsTheyWere: an operation rolled back
// after its copies failed used to re-insert its victims as new keys and
// undo its pins with Unpin, which recency policies take as a use: an LRU
// victim came back most recent, an expired priority came back with a new
// timer, a retention victim became "used now", S3-FIFO's queues and ghost
// kept what the failed Evict had done. With policies that roll back
// (eviction.Transactional), every later choice is the one a cache that
// never ran the failed operation makes.
func TestFailedOperationLeavesPoliciesAsTheyWere(t *testing.T) {
	for name, f := range map[string]PolicyFactory{
		"lru":       LRUPolicy(),
		"fifo":      FIFOPolicy(),
		"plru":      PrioritizedLRUPolicy(),
		"s3fifo":    S3FIFOPolicy(eviction.S3FIFOConfig{}),
		"arc":       ARCPolicy(eviction.ARCConfig{}),
		"wtinylfu":  WTinyLFUPolicy(eviction.WTinyLFUConfig{}),
		"retention": RetentionPolicy(),
	} {
		t.Run(name, func(t *testing.T) {
			a, b := newTwin(t, f), newTwin(t, f)
			for _, tw := range []*twin{a, b} {
				// Four one-block prompts fill the GPU; the first two hit
				// again (S3-FIFO promotes them), the priorities of some
				// expire before the failed operation.
				for i, base := range []uint32{0, 100, 200, 300, 0, 100} {
					tw.serve(t, seqTokens(4, base), 35+20*(i%3))
				}
				tw.clock.Advance(5 * time.Second)
			}
			// a alone: a two-block prompt evicts (and offloads) two cached
			// blocks, then its copies fail.
			a.mover.armed = true
			_, err := a.c.Acquire(Request{Tokens: seqTokens(8, 500)})
			require.ErrorIs(t, err, ErrCopyFailed)
			a.events, b.events = nil, nil
			// From here on, both must choose the same victims.
			for i, base := range []uint32{600, 700, 0, 800, 100, 900, 200, 1000, 300} {
				for _, tw := range []*twin{a, b} {
					tw.serve(t, seqTokens(4+4*(i%2), base), 35)
				}
				require.Equal(t, b.events, a.events, "request %d: a's policies remember the failed operation", i)
			}
			require.NotEmpty(t, a.events)
		})
	}
}
