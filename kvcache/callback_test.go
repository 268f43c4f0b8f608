package kvcache

import (
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/layout"
	"github.com/stretchr/testify/require"
)

// within fails the test if f does not return within a few seconds: the
// defects these tests pin were deadlocks.
func within(t *testing.T, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("deadlock: the call did not return")
	}
}

// callingMover is a Mover that calls back into its cache from Copy.
type callingMover struct {
	c    *Cache
	seq  SeqID
	errs map[string]error
	st   Stats
}

func (m *callingMover) Copy([]Copy) error {
	m.st = m.c.Stats()
	_, m.errs["Len"] = m.c.Len(m.seq)
	_, m.errs["Locate"] = m.c.Locate(m.seq, 0, 0)
	_, m.errs["BlockTable"] = m.c.BlockTable(nil, m.seq, 0)
	_, m.errs["Acquire"] = m.c.Acquire(Request{Tokens: seqTokens(4, 900)})
	m.errs["Release"] = m.c.Release(m.seq)
	_, m.errs["Admit"] = m.c.Admit(Request{Tokens: seqTokens(4, 900)})
	_, _, m.errs["TakeEvents"] = m.c.TakeEvents(nil)
	if m.c.Slots(GPU, 0) == 0 {
		m.errs["Slots"] = errors.New("no slots")
	}
	return nil
}

// TestCallbackCallingTheCacheDoesNotDeadlock: a Mover (or a policy) that
// calls the cache used to wedge every goroutine. Stats answers with the
// counters before the running operation, the configuration getters answer,
// and every other method returns ErrReentrant.
func TestCallbackCallingTheCacheDoesNotDeadlock(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	m := &callingMover{errs: map[string]error{}}
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: 4}, Capacity{Units: 4}), Mover: m})
	require.NoError(t, err)
	m.c = c
	a, err := c.Acquire(Request{Tokens: seqTokens(8, 0)})
	require.NoError(t, err)
	finish(t, c, a.Seq)
	live, err := c.Acquire(Request{})
	require.NoError(t, err)
	m.seq = live.Seq
	before := c.Stats()
	within(t, func() {
		_, err = c.Acquire(Request{Tokens: seqTokens(4, 100)}) // offloads: calls the Mover
	})
	require.NoError(t, err)
	require.Equal(t, before, m.st, "Stats from a callback: the state before the operation")
	for _, name := range []string{"Len", "Locate", "BlockTable", "Acquire", "Release", "Admit", "TakeEvents"} {
		require.ErrorIs(t, m.errs[name], ErrReentrant, name)
		require.ErrorContains(t, m.errs[name], name)
	}
	require.NoError(t, m.errs["Slots"])
	require.NoError(t, c.checkInvariants())
	_, err = c.Len(live.Seq)
	require.NoError(t, err, "the sequence the callback tried to release is alive")
}

// statsPolicy is an LRU that calls Stats in every Evict.
type statsPolicy struct {
	eviction.Policy[UnitID]
	c     *Cache
	calls int
}

func (p *statsPolicy) Evict() (UnitID, bool) {
	p.calls++
	_ = p.c.Stats()
	return p.Policy.Evict()
}

// TestPolicyCallingStats: the defect as reported, a policy that calls
// Stats.
func TestPolicyCallingStats(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	p := &statsPolicy{Policy: eviction.NewLRU[UnitID]()}
	c, err := New(Config{Layout: l, Tiers: tiersOf(Capacity{Units: 2}, Capacity{}, func(PoolInfo) (eviction.Policy[UnitID], error) { return p, nil }, nil)})
	require.NoError(t, err)
	p.c = c
	within(t, func() {
		for i := range 4 {
			a, err := c.Acquire(Request{Tokens: seqTokens(4, uint32(100*i))})
			require.NoError(t, err)
			finish(t, c, a.Seq)
		}
	})
	require.Positive(t, p.calls)
}

// TestSinkPanicIsReported: a sink that panics used to leave the delivering
// flag set, so no event was ever delivered again and they piled up. The
// panic is recovered and counted, and the sink gets the next events.
func TestSinkPanicIsReported(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	var got []EventKind
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: 8}, Capacity{}), Events: func(e Event) {
		if len(got) == 0 {
			got = append(got, 0)
			panic("sink bug")
		}
		got = append(got, e.Kind)
	}})
	require.NoError(t, err)
	a, err := c.Acquire(Request{Tokens: seqTokens(8, 0)})
	require.NoError(t, err)
	require.NotPanics(t, func() { require.NoError(t, c.Commit(a.Seq, 8)) })
	require.Equal(t, []EventKind{0, BlockStored}, got, "the second event of the batch was delivered")
	require.NoError(t, c.Release(a.Seq))
	require.NoError(t, c.Clear())
	require.Equal(t, []EventKind{0, BlockStored, AllCleared}, got)
	st := c.Stats()
	require.Equal(t, uint64(1), st.SinkPanics)
	pe := c.SinkPanic()
	require.NotNil(t, pe)
	require.Equal(t, "sink bug", pe.Value)
	require.Contains(t, pe.Call, "stored")
}

// TestSinkGoexitDoesNotStallDelivery: a sink that ends its goroutine
// (runtime.Goexit, which t.FailNow calls) used to leave its delivery turn
// taken for good, so every later caller with events waited forever. Its
// batch is now given up (counted like a panic) and the next caller's
// events are delivered.
func TestSinkGoexitDoesNotStallDelivery(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	var mu sync.Mutex
	exited := false
	var got []EventKind
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: 8}, Capacity{}), Events: func(e Event) {
		mu.Lock()
		first := !exited
		exited = true
		if !first {
			got = append(got, e.Kind)
		}
		mu.Unlock()
		if first {
			runtime.Goexit()
		}
	}})
	require.NoError(t, err)
	a, err := c.Acquire(Request{Tokens: seqTokens(8, 0)})
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Commit(a.Seq, 8) // its sink call ends this goroutine
	}()
	<-done
	finished := make(chan error, 1)
	go func() { finished <- errors.Join(c.Release(a.Seq), c.Clear()) }()
	select {
	case err := <-finished:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Clear is stuck behind the delivery its sink abandoned")
	}
	mu.Lock()
	require.Equal(t, []EventKind{AllCleared}, got)
	mu.Unlock()
	require.Equal(t, uint64(1), c.Stats().SinkPanics)
	require.ErrorContains(t, c.SinkPanic(), "Goexit")
}

// TestEachCallerDeliversItsOwnEvents: with a slow sink, the goroutine that
// happened to deliver used to deliver everyone's events (one call took
// minutes) while the others returned at once and their events piled up.
// Now each call delivers its own events, in order, before it returns, and
// waits for the earlier calls' deliveries only.
func TestEachCallerDeliversItsOwnEvents(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	gate := make(chan struct{})
	var mu sync.Mutex
	var got []uint64
	first := true
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: 16}, Capacity{}), Events: func(e Event) {
		mu.Lock()
		wait := first
		first = false
		mu.Unlock()
		if wait {
			<-gate // the first event blocks until the test lets it go
		}
		mu.Lock()
		got = append(got, e.Hash)
		mu.Unlock()
	}})
	require.NoError(t, err)
	a, err := c.Acquire(Request{Tokens: seqTokens(4, 0)})
	require.NoError(t, err)
	b, err := c.Acquire(Request{Tokens: seqTokens(4, 100)})
	require.NoError(t, err)
	aDone := make(chan struct{})
	go func() {
		defer close(aDone)
		require.NoError(t, c.Commit(a.Seq, 4)) // its event blocks in the sink
	}()
	for {
		mu.Lock()
		blocked := !first
		mu.Unlock()
		if blocked {
			break
		}
		time.Sleep(time.Millisecond)
	}
	bDone := make(chan struct{})
	go func() {
		defer close(bDone)
		require.NoError(t, c.Commit(b.Seq, 4)) // waits for a's delivery, then delivers its own
	}()
	select {
	case <-bDone:
		t.Fatal("b's call returned before its event was delivered")
	case <-time.After(50 * time.Millisecond):
	}
	close(gate)
	<-aDone
	<-bDone
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, 2, "each call delivered its event before returning")
	stats := c.Stats()
	require.Zero(t, stats.EventsBuffered)
}

// TestSinkMayChangeTheCache: a sink that releases a sequence when it sees
// its block stored gets the release's events after the current ones.
func TestSinkMayChangeTheCache(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	var c *Cache
	var kinds []string
	var victim SeqID
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: 4}, Capacity{}), Events: func(e Event) {
		if e.Kind != BlockMoved {
			kinds = append(kinds, what(e))
		}
		if e.Kind == BlockStored && victim != 0 {
			id := victim
			victim = 0
			require.NoError(t, c.Release(id))
			_, err := c.Acquire(Request{Tokens: seqTokens(8, 500)}) // evicts the stored block
			require.NoError(t, err)
		}
	}})
	require.NoError(t, err)
	a, err := c.Acquire(Request{Tokens: seqTokens(4, 0)})
	require.NoError(t, err)
	victim = a.Seq
	within(t, func() { require.NoError(t, c.Commit(a.Seq, 4)) })
	require.Equal(t, []string{"stored", "dropped", "dropped", "removed"}, kinds)
	require.NoError(t, c.checkInvariants())
}

// TestTakeEventsBoundsMemory: the pull buffer keeps the newest events up to
// its capacity and reports how many it dropped.
func TestTakeEventsBoundsMemory(t *testing.T) {
	l := tinyLayout(t, layout.AllLayers, nil) // one unit per block
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: 64}, Capacity{}), EventBuffer: 4})
	require.NoError(t, err)
	a, err := c.Acquire(Request{Tokens: seqTokens(40, 0)}) // ten blocks
	require.NoError(t, err)
	require.NoError(t, c.Commit(a.Seq, 40)) // ten BlockStored events
	st := c.Stats()
	require.Equal(t, 4, st.EventsBuffered)
	require.Equal(t, uint64(6), st.EventsDropped)
	events, lost, err := c.TakeEvents(nil)
	require.NoError(t, err)
	require.Equal(t, uint64(6), lost)
	require.Len(t, events, 4)
	for i, e := range events {
		require.Equal(t, BlockStored, e.Kind)
		require.Equal(t, seqTokens(4, uint32(4*(6+i))), e.Tokens, "the newest four, oldest first")
	}
	events, lost, err = c.TakeEvents(events[:0])
	require.NoError(t, err)
	require.Empty(t, events)
	require.Zero(t, lost)
	require.Zero(t, c.Stats().EventsBuffered)
	_, err = New(Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: 64}, Capacity{}), EventBuffer: -1})
	require.ErrorIs(t, err, ErrInvalidConfig)
	// Without a buffer, TakeEvents has nothing to give.
	c2, err := New(Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: 64}, Capacity{})})
	require.NoError(t, err)
	events, lost, err = c2.TakeEvents(nil)
	require.NoError(t, err)
	require.Empty(t, events)
	require.Zero(t, lost)
}

// statsReadingPolicy reads the cache's Stats from inside Insert (a callback run
// under the lock: it gets the snapshot of the end of the last operation).
type statsReadingPolicy struct {
	eviction.Policy[UnitID]
	c    **Cache
	seen []Stats
}

func (p *statsReadingPolicy) Insert(k UnitID, e eviction.Entry) error {
	if *p.c != nil {
		p.seen = append(p.seen, (*p.c).Stats())
	}
	return p.Policy.Insert(k, e)
}

// TestCallbackSeesStatsOfTheLastOperation: a callback's Stats are those
// at the end of the last operation. An Append into a partial block skips
// refreshing them, since it changes nothing they report, but the first
// decode token commits the prompt's blocks (Stored, Blocks): that Append
// used to leave the snapshot stale.
func TestCallbackSeesStatsOfTheLastOperation(t *testing.T) {
	l := tinyLayout(t, layout.AllLayers, nil)
	var c *Cache
	sp := &statsReadingPolicy{c: &c}
	f := func(info PoolInfo) (eviction.Policy[UnitID], error) {
		p, err := LRUPolicy()(info)
		if info.Tier == GPU {
			sp.Policy = p
			return sp, err
		}
		return p, err
	}
	var err error
	c, err = New(Config{Layout: l, Tiers: tiersOf(Capacity{Units: 8}, Capacity{}, f, nil)})
	require.NoError(t, err)
	// A 5-token prompt: block 0 full (private until written), block 1 partial.
	a, err := c.Acquire(Request{Tokens: seqTokens(5, 0)})
	require.NoError(t, err)
	// The first decode token fits block 1: the fast path, which commits
	// block 0 (the prompt's forward pass wrote it).
	_, err = c.Append(a.Seq, 99)
	require.NoError(t, err)
	real := c.Stats()
	require.Equal(t, uint64(1), real.Stored)
	// The next operation's callbacks see "the snapshot taken at the end of
	// the last operation".
	sp.seen = nil
	_, err = c.Acquire(Request{Tokens: seqTokens(4, 100)})
	require.NoError(t, err)
	require.NotEmpty(t, sp.seen)
	require.Equal(t, real.Stored, sp.seen[0].Stored, "Stats seen from a callback after a fast-path Append")
	require.Equal(t, real.Blocks, sp.seen[0].Blocks)
}

// TestBlockEventsOnly: with Config.BlockEventsOnly, a cache emits exactly
// the events of one without it, minus UnitMoved, on a workload that moves
// units down two tiers, drops them and loads them back.
func TestBlockEventsOnly(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	u := int64(l.UnitsPerBlock())
	tiers := []TierConfig{{Capacity: Capacity{Units: 3 * u}}, {Capacity: Capacity{Units: 3 * u}}, {Capacity: Capacity{Units: 4 * u}}}
	var all, blocks []Event
	full, err := New(Config{Layout: l, Tiers: tiers, Events: func(e Event) { all = append(all, e) }})
	require.NoError(t, err)
	only, err := New(Config{Layout: l, Tiers: tiers, Events: func(e Event) { blocks = append(blocks, e) }, BlockEventsOnly: true})
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(7, 8))
	for range 200 {
		tokens := seqTokens(4*(1+rng.IntN(3)), uint32(rng.IntN(6))*100)
		for _, c := range []*Cache{full, only} {
			p, err := c.Acquire(Request{Tokens: tokens})
			require.NoError(t, err)
			require.NoError(t, c.Commit(p.Seq, len(tokens)))
			require.NoError(t, c.Release(p.Seq))
		}
	}
	var want []Event
	kinds := map[EventKind]int{}
	for _, e := range all {
		kinds[e.Kind]++
		if e.Kind != UnitMoved {
			want = append(want, e)
		}
	}
	require.Positive(t, kinds[UnitMoved])
	require.Positive(t, kinds[BlockMoved])
	require.Equal(t, want, blocks)
}
