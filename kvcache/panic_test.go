package kvcache

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/kvtier/kvtier/costmodel"
	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/layout"
	"github.com/stretchr/testify/require"
)

// panickyPolicy wraps a policy and panics at the at-th call (counted from 1
// over every method but Len) once armed.
type panickyPolicy struct {
	eviction.Policy[UnitID]
	method string // "" any method
	calls  int
	at     int
}

func (p *panickyPolicy) hit(method string) {
	if p.at == 0 || (p.method != "" && p.method != method) {
		return
	}
	p.calls++
	if p.calls == p.at {
		panic(fmt.Sprintf("policy bug in %s", method))
	}
}

func (p *panickyPolicy) Insert(k UnitID, e eviction.Entry) error {
	p.hit("Insert")
	return p.Policy.Insert(k, e)
}
func (p *panickyPolicy) Access(k UnitID) { p.hit("Access"); p.Policy.Access(k) }
func (p *panickyPolicy) Pin(k UnitID)    { p.hit("Pin"); p.Policy.Pin(k) }
func (p *panickyPolicy) Unpin(k UnitID)  { p.hit("Unpin"); p.Policy.Unpin(k) }
func (p *panickyPolicy) Remove(k UnitID) { p.hit("Remove"); p.Policy.Remove(k) }
func (p *panickyPolicy) Evict() (UnitID, bool) {
	p.hit("Evict")
	return p.Policy.Evict()
}

// requireAccountingExact checks what a poisoned cache still owes: every
// slot free, pinned or cached, the unit tables against a recount (the
// policies may have lost track of keys: that is what poisoned the cache).
func requireAccountingExact(t *testing.T, c *Cache) {
	t.Helper()
	st := c.Stats()
	for _, ts := range []TierStats{st.Tier(GPU), st.Tier(CPU)} {
		require.Equal(t, ts.Capacity, ts.Free+ts.Pinned+ts.Cached)
	}
	require.NoError(t, c.checkAccounting(false))
}

// TestPolicyPanicIsRecovered: a policy that panics in any of its methods,
// at any point of any operation, makes that call return ErrPolicy wrapping
// a *PanicError instead of crashing the server; the cache is poisoned, its
// accounting is exact (nothing stays pinned by a half-applied operation,
// Stats add up) and retrying Release cannot drive a pin count negative.
func TestPolicyPanicIsRecovered(t *testing.T) {
	for _, method := range []string{"Insert", "Access", "Pin", "Unpin", "Remove", "Evict"} {
		for _, tier := range []Tier{GPU, CPU} {
			if tier == CPU && (method == "Access" || method == "Unpin") {
				// Hits are GPU hits; a unit an operation pins on the
				// CPU (an onboard) leaves it at commit, so the CPU
				// hears Unpin only when a copy-on-write source or a
				// rollback lets go of one, which the chaos model
				// tests drive.
				continue
			}
			// A dry run counts the calls, so that every call is tried.
			_, pp, _ := runPanicScenario(t, method, tier, 0)
			calls := pp.calls
			require.Positive(t, calls, "the scenario never calls the %s policy's %s", tier, method)
			for at := 1; at <= min(calls, 12); at++ {
				t.Run(fmt.Sprintf("%s/%s/%d", tier, method, at), func(t *testing.T) {
					c, _, failed := runPanicScenario(t, method, tier, at)
					require.ErrorIs(t, failed, ErrPolicy)
					var pe *PanicError
					require.ErrorAs(t, failed, &pe)
					require.Contains(t, pe.Call, method)
					require.Equal(t, fmt.Sprintf("policy bug in %s", method), pe.Value)
					require.NotEmpty(t, pe.Stack)
					requireAccountingExact(t, c)
					for id := range SeqID(20) {
						if _, err := c.Len(id); err == nil {
							require.ErrorIs(t, c.Release(id), ErrPolicy, "a poisoned cache refuses changes")
						}
					}
					requireAccountingExact(t, c)
				})
			}
		}
	}
}

// runPanicScenario runs a mix of Acquire, Append and Release over a small
// cache whose tier policies panic at their at-th call of method (0: never)
// and returns the cache, the panicking policy and the first error.
func runPanicScenario(t *testing.T, method string, tier Tier, at int) (*Cache, *panickyPolicy, error) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	gpu, cpu := Capacity{Units: 6}, Capacity{Units: 4}
	store, err := NewMemoryStore(l, GPUAndCPU(gpu, cpu))
	require.NoError(t, err)
	var pp *panickyPolicy
	factory := func(info PoolInfo) (eviction.Policy[UnitID], error) {
		// LRU declares that it ignores hits on pinned keys: S3-FIFO
		// hears every Access.
		inner, err := S3FIFOPolicy(eviction.S3FIFOConfig{})(info)
		require.NoError(t, err)
		p := &panickyPolicy{Policy: inner, method: method}
		if info.Tier == tier {
			p.at = at
			if at == 0 {
				p.at = -1 // count, never panic
			}
			pp = p
		}
		return p, nil
	}
	c, err := New(Config{Layout: l, Tiers: tiersOf(gpu, cpu, factory, factory), Mover: store})
	require.NoError(t, err)
	var live []SeqID
	var failed error
	for i := 0; i < 16 && failed == nil; i++ {
		var p Plan
		require.NotPanics(t, func() {
			switch {
			case i%3 == 2 && len(live) > 0:
				// A request that ran: commit it all, then release.
				n, _ := c.Len(live[0])
				if failed = c.Commit(live[0], n); failed == nil {
					failed = c.Release(live[0])
				}
				if failed == nil {
					live = live[1:]
				}
			case i%3 == 1 && len(live) > 0:
				p, failed = c.Append(live[len(live)-1], 7)
			default:
				p, failed = c.Acquire(Request{Tokens: seqTokens(4+i%5, uint32(100*(i%2)))})
				if failed == nil {
					live = append(live, p.Seq)
				}
			}
		})
	}
	if at == 0 {
		require.NoError(t, failed)
	}
	return c, pp, failed
}

// panickyMover panics in its armed call, after performing the first copy of
// the batch (so a destination slot really was written).
type panickyMover struct {
	inner *MemoryStore
	armed bool
}

func (m *panickyMover) Copy(batch []Copy) error {
	if m.armed {
		m.armed = false
		_ = m.inner.Copy(batch[:1])
		panic("mover bug")
	}
	return m.inner.Copy(batch)
}

// TestMoverPanicIsRecovered: a Mover that panics mid-batch makes the
// operation fail with ErrCopyFailed wrapping a *PanicError; it is rolled
// back, and the victims whose slots the batch would have written are
// dropped (their bytes are unknown), counted in TierStats.Lost. The cache is
// not poisoned: the next operation works.
func TestMoverPanicIsRecovered(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	gpu, cpu := Capacity{Units: 4}, Capacity{Units: 2}
	store, err := NewMemoryStore(l, GPUAndCPU(gpu, cpu))
	require.NoError(t, err)
	m := &panickyMover{inner: store}
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(gpu, cpu), Mover: m})
	require.NoError(t, err)
	for _, base := range []uint32{0, 100, 200} {
		p, err := c.Acquire(Request{Tokens: seqTokens(4, base)})
		require.NoError(t, err)
		finish(t, c, p.Seq)
	}
	st := c.Stats()
	require.Equal(t, int64(2), st.Tier(CPU).Cached, "the first block is on the CPU")
	// The next block evicts the second one from the GPU and offloads it
	// into the CPU slots of the first (a CPU victim). The Mover performs
	// the first of these copies and panics: after the rollback, the first
	// block's units hold slots the batch may have written.
	m.armed = true
	var p Plan
	require.NotPanics(t, func() { p, err = c.Acquire(Request{Tokens: seqTokens(4, 300)}) })
	require.ErrorIs(t, err, ErrCopyFailed)
	var pe *PanicError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "Mover.Copy", pe.Call)
	require.Zero(t, p.Seq)
	require.NoError(t, c.checkInvariants())
	st = c.Stats()
	require.Equal(t, uint64(2), st.Tier(CPU).Lost, "both offload destinations may have been written")
	require.Zero(t, st.Tier(CPU).Cached)
	require.Equal(t, int64(4), st.Tier(GPU).Cached, "the GPU victims keep their slots")
	require.Zero(t, st.Sequences)
	// Not poisoned.
	p, err = c.Acquire(Request{Tokens: seqTokens(4, 0)})
	require.NoError(t, err)
	finish(t, c, p.Seq)
	require.NoError(t, c.checkInvariants())
}

// TestMoverPanicOverTheSequencesOwnUnit: an operation may evict a unit its
// own sequence unpinned in the same call (Truncate releases the blocks past
// its new end first). When the Mover panics, the rollback pins that unit
// again, but the batch may have overwritten its slot: the sequence's KV is
// unknown, so the sequence is ended (as by Abort) and the unit dropped,
// rather than left pinned with bytes nobody can vouch for (before, it was
// dropped while still pinned: a hole in the sequence's block table and a
// pin on a unit with no slot).
func TestMoverPanicOverTheSequencesOwnUnit(t *testing.T) {
	l := tinyLayout(t, layout.AllLayers, nil)
	gpu := Capacity{Units: 2}
	store, err := NewMemoryStore(l, GPUAndCPU(gpu, Capacity{}))
	require.NoError(t, err)
	m := &panickyMover{inner: store}
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(gpu, Capacity{}), Mover: m})
	require.NoError(t, err)
	a, err := c.Acquire(Request{Tokens: seqTokens(8, 0)})
	require.NoError(t, err)
	finish(t, c, a.Seq)
	b, err := c.Acquire(Request{Tokens: seqTokens(8, 0)})
	require.NoError(t, err)
	require.Equal(t, 2, b.Hits)
	// Cutting into the first block (cached, with a child) copies it on
	// write: the copy needs a slot, and the only evictable unit is the
	// second block's, which the Truncate itself just unpinned.
	m.armed = true
	var err2 error
	require.NotPanics(t, func() { _, err2 = c.Truncate(b.Seq, 6) })
	require.ErrorIs(t, err2, ErrCopyFailed)
	require.ErrorContains(t, err2, fmt.Sprintf("sequence %d ended", b.Seq))
	require.NoError(t, c.checkInvariants())
	_, err = c.Len(b.Seq)
	require.ErrorIs(t, err, ErrUnknownSequence)
	st := c.Stats()
	require.Equal(t, uint64(1), st.Tier(GPU).Lost, "the second block's unit may have been overwritten")
	require.Zero(t, st.Tier(GPU).Pinned)
	require.Equal(t, uint64(1), st.Aborted)
	// The cache goes on: the first block is still cached, the second is
	// recomputed.
	p, err := c.Acquire(Request{Tokens: seqTokens(8, 0)})
	require.NoError(t, err)
	require.Equal(t, []TokenRange{{Start: 4, End: 8}}, p.Compute)
	require.NoError(t, c.checkInvariants())
}

// TestCostModelPanicIsRecovered: a cost model whose weight function panics
// while the cache decides a victim's fate poisons the cache like a policy.
func TestCostModelPanicIsRecovered(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	armed := false
	weight := func(i, n int) float64 {
		if armed {
			panic("weight bug")
		}
		return 1
	}
	c, err := New(Config{Layout: l, Tiers: linked(GPUAndCPU(Capacity{Units: 4}, Capacity{Units: 8}), costmodel.Link{BytesPerSecond: 1e9}),
		Recompute: &costmodel.Recompute{Beta: 1, LayerWeight: weight, PositionWeight: weight}})
	require.NoError(t, err)
	for _, base := range []uint32{0, 100} {
		p, err := c.Acquire(Request{Tokens: seqTokens(4, base)})
		require.NoError(t, err)
		finish(t, c, p.Seq)
	}
	armed = true
	require.NotPanics(t, func() { _, err = c.Acquire(Request{Tokens: seqTokens(4, 200)}) })
	require.ErrorIs(t, err, ErrPolicy)
	var pe *PanicError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "weight bug", pe.Value)
	requireAccountingExact(t, c)
}

// TestFactoryPanicIsAnError: New reports a policy factory that panics.
func TestFactoryPanicIsAnError(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	_, err := New(Config{Layout: l, Tiers: tiersOf(Capacity{Units: 4}, Capacity{}, func(PoolInfo) (eviction.Policy[UnitID], error) { panic("factory bug") }, nil)})
	require.ErrorIs(t, err, ErrInvalidConfig)
	var pe *PanicError
	require.True(t, errors.As(err, &pe))
	require.Equal(t, "factory bug", pe.Value)
}

// goexitMover ends its goroutine (runtime.Goexit, as t.FailNow does) in its
// armed call, after performing the first copy of the batch.
type goexitMover struct {
	inner *MemoryStore
	armed bool
}

func (m *goexitMover) Copy(batch []Copy) error {
	if m.armed {
		m.armed = false
		_ = m.inner.Copy(batch[:1])
		runtime.Goexit()
	}
	return m.inner.Copy(batch)
}

// goexitPolicy is an LRU whose Evict ends its goroutine once armed.
type goexitPolicy struct {
	eviction.Policy[UnitID]
	armed bool
}

func (p *goexitPolicy) Evict() (UnitID, bool) {
	if p.armed {
		p.armed = false
		runtime.Goexit()
	}
	return p.Policy.Evict()
}

// inGoroutine runs f in a goroutine of its own (it may end it with
// runtime.Goexit) and waits for it, failing the test if it hangs.
func inGoroutine(t *testing.T, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not end")
	}
}

// TestCallbackGoexitIsContained: user code that ends its goroutine
// (runtime.Goexit) in the middle of an operation used to leave the
// operation half-applied and kept as if it had succeeded: slots owned by
// units never placed, victims taken out of their policies. A Mover that
// exits is treated as one that panicked (the operation rolled back, the
// units in the slots its batch may have written dropped); a policy that
// exits poisons the cache, whose accounting stays exact. Either way the
// lock is released: other goroutines go on.
func TestCallbackGoexitIsContained(t *testing.T) {
	l := tinyLayout(t, layout.AllLayers, nil)
	t.Run("Mover", func(t *testing.T) {
		tiers := GPUAndCPU(Capacity{Units: 2}, Capacity{Units: 2})
		store, err := NewMemoryStore(l, tiers)
		require.NoError(t, err)
		m := &goexitMover{inner: store}
		c, err := New(Config{Layout: l, Tiers: tiers, Mover: m})
		require.NoError(t, err)
		for _, base := range []uint32{0, 100} { // the second pushes the first to the CPU
			a, err := c.Acquire(Request{Tokens: seqTokens(8, base)})
			require.NoError(t, err)
			finish(t, c, a.Seq)
		}
		// The next prompt moves the second one's units into the CPU
		// slots of the first (which are dropped): the Mover exits after
		// the first move, so after the rollback the first prompt's units
		// hold slots the batch may have written.
		m.armed = true
		inGoroutine(t, func() { _, _ = c.Acquire(Request{Tokens: seqTokens(8, 200)}) })
		require.NoError(t, c.checkInvariants())
		st := c.Stats()
		require.Equal(t, uint64(2), st.Tier(CPU).Lost, "both moves' destinations may have been written")
		require.Equal(t, int64(2), st.Tier(GPU).Cached, "the GPU victims are back in their slots")
		require.Zero(t, st.Sequences)
		p, err := c.Acquire(Request{Tokens: seqTokens(8, 0)})
		require.NoError(t, err, "not poisoned")
		finish(t, c, p.Seq)
		require.NoError(t, c.checkInvariants())
	})
	t.Run("Policy", func(t *testing.T) {
		factory, gpp := gpuPolicy(func() *goexitPolicy { return &goexitPolicy{Policy: eviction.NewLRU[UnitID]()} })
		c, err := New(Config{Layout: l, Tiers: tiersOf(Capacity{Units: 2}, Capacity{Units: 4}, factory, factory)})
		require.NoError(t, err)
		gp := *gpp
		a, err := c.Acquire(Request{Tokens: seqTokens(8, 0)})
		require.NoError(t, err)
		finish(t, c, a.Seq)
		gp.armed = true
		inGoroutine(t, func() { _, _ = c.Acquire(Request{Tokens: seqTokens(8, 100)}) })
		require.NoError(t, c.checkAccounting(false))
		_, err = c.Acquire(Request{Tokens: seqTokens(4, 200)})
		require.ErrorIs(t, err, ErrPolicy)
		require.ErrorContains(t, err, "Goexit")
	})
}

// TestMoverPanicThenPolicyPanic: when a policy panics while the victims a
// panicking Mover may have written are dropped, the cache is poisoned, and
// the failed call says so (ErrPolicy beside ErrCopyFailed) instead of
// leaving it for the next call to find (found by a review).
func TestMoverPanicThenPolicyPanic(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	gpu, cpu := Capacity{Units: 4}, Capacity{Units: 2}
	store, err := NewMemoryStore(l, GPUAndCPU(gpu, cpu))
	require.NoError(t, err)
	m := &panickyMover{inner: store}
	var cp *panickyPolicy
	tiers := GPUAndCPU(gpu, cpu)
	tiers[1].Policy = func(info PoolInfo) (eviction.Policy[UnitID], error) {
		p, err := LRUPolicy()(info)
		cp = &panickyPolicy{Policy: p, method: "Remove"}
		return cp, err
	}
	c, err := New(Config{Layout: l, Tiers: tiers, Mover: m})
	require.NoError(t, err)
	for _, base := range []uint32{0, 100, 200} {
		p, err := c.Acquire(Request{Tokens: seqTokens(4, base)})
		require.NoError(t, err)
		finish(t, c, p.Seq)
	}
	// As in TestMoverPanicIsRecovered, the first block's units on the
	// CPU are dropped after the rollback; the CPU policy panics in their
	// Remove.
	m.armed, cp.at = true, 1
	_, err = c.Acquire(Request{Tokens: seqTokens(4, 300)})
	require.ErrorIs(t, err, ErrCopyFailed)
	require.ErrorIs(t, err, ErrPolicy, "%v", err)
	_, err = c.Acquire(Request{Tokens: seqTokens(4, 400)})
	require.ErrorIs(t, err, ErrPolicy)
	requireAccountingExact(t, c)
}

// goexitUnpinPolicy ends its goroutine in the first Unpin after armed is
// set.
type goexitUnpinPolicy struct {
	eviction.Policy[UnitID]
	armed bool
}

func (p *goexitUnpinPolicy) Unpin(u UnitID) {
	if p.armed {
		p.armed = false
		runtime.Goexit()
	}
	p.Policy.Unpin(u)
}

// TestGoexitApplyingFinishedTransfersReleasesTheLock: the calls that apply
// finished transfers before they plan (Acquire, Append, Truncate, Fork,
// SparseAccess, Prefetch, Adopt) call the policies there (a victim that
// arrived below is unpinned); a policy that ends the goroutine then leaves
// the lock released, as everywhere else.
func TestGoexitApplyingFinishedTransfersReleasesTheLock(t *testing.T) {
	for _, call := range []string{"Acquire", "Append", "Fork"} {
		t.Run(call, func(t *testing.T) {
			l := tinyLayout(t, layout.PagedLayer, nil)
			var cpu *goexitUnpinPolicy
			cf := func(PoolInfo) (eviction.Policy[UnitID], error) {
				cpu = &goexitUnpinPolicy{Policy: eviction.NewLRU[UnitID]()}
				return cpu, nil
			}
			c, _, e := jobCache(t, l, tiersOf(Capacity{Units: 4}, Capacity{Units: 8}, nil, cf), nil)
			a, err := c.Acquire(Request{Tokens: seqTokens(8, 0)})
			require.NoError(t, err)
			finish(t, c, a.Seq)
			e.drain(t, c, map[int]bool{})
			b, err := c.Acquire(Request{Tokens: seqTokens(8, 100)}) // moves a down
			require.NoError(t, err)
			for i := range e.jobs {
				if !e.jobs[i].over {
					e.finish(t, i, nil)
				}
			}
			cpu.armed = true
			inGoroutine(t, func() {
				switch call {
				case "Acquire":
					_, _ = c.Acquire(Request{Tokens: seqTokens(4, 200)})
				case "Append":
					_, _ = c.Append(b.Seq, 1)
				case "Fork":
					_, _ = c.Fork(b.Seq)
				}
			})
			require.False(t, cpu.armed, "setup: the policy's Unpin was not called")
			done := make(chan struct{})
			go func() { _ = c.Stats(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatalf("the cache's lock is still held after %s's goroutine ended", call)
			}
		})
	}
}
