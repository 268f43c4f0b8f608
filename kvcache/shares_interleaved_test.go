package kvcache

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvtier/kvtier/layout"
)

// This file checks namespaces' shares of the GPU against operations that
// run between the steps of long operations: a long Acquire reserves its
// room, and whatever other namespaces do before its next step must leave
// the room whole. The model-based test never interleaves operations, so
// it cannot see that.

// ilEngine is a TransferEngine whose transfers finish at random: at once
// (1 in 6), or later, 1 in 20 failing.
type ilEngine struct {
	h       *ilHarness
	started []func(error)
}

func (e *ilEngine) Start(copies []Copy, done func(error)) {
	if e.h.r.IntN(6) == 0 {
		done(nil)
		return
	}
	e.started = append(e.started, done)
}

// progress finishes some transfers and polls.
func (e *ilEngine) progress() {
	if len(e.started) == 0 || e.h.r.IntN(3) > 0 {
		return
	}
	for range e.h.r.IntN(len(e.started) + 1) {
		i := e.h.r.IntN(len(e.started))
		d := e.started[i]
		e.started = append(e.started[:i], e.started[i+1:]...)
		var err error
		if e.h.r.IntN(20) == 0 {
			err = errors.New("injected")
		}
		d(err)
	}
	_, _ = e.h.c.Poll()
}

// settle polls until no finished transfer waits to be applied (Admit
// does not apply them; the Acquire after it does).
func (e *ilEngine) settle() {
	for range 20 {
		_, _ = e.h.c.Poll()
		e.h.c.mu.Lock()
		w := e.h.c.xfer.hasWork()
		e.h.c.mu.Unlock()
		if !w {
			return
		}
	}
}

type ilSeq struct {
	id     SeqID
	ns     string
	tokens int
	busy   bool
}

// ilHarness runs random operations of several namespaces; between two
// steps of a long operation (Cache.afterStep) it runs up to two more,
// some of them long, two deep.
type ilHarness struct {
	c       *Cache
	r       *rand.Rand
	nss     []string
	bases   map[string][][]uint32
	seqs    []*ilSeq
	depth   int
	slice   int
	defects []string
	counts  map[string]int
	serial  int
	engine  *ilEngine
}

func (h *ilHarness) fail(format string, args ...any) {
	h.defects = append(h.defects, fmt.Sprintf(format, args...))
}

// tenantState is a GPU tenant's counts when an operation starts.
type tenantState struct {
	serial             int
	used, reserve, cap int
	evictions          uint64
	ns                 string
}

func (h *ilHarness) tenants() [][]tenantState {
	var out [][]tenantState
	for p := range h.c.geom.pools {
		a := h.c.tiers.arena(GPU, p)
		var row []tenantState
		if a.tenants != nil {
			for _, tn := range a.tenants.list {
				row = append(row, tenantState{h.serial, tn.used, tn.reserve, tn.cap, tn.evictions, tn.namespace})
			}
		}
		out = append(out, row)
	}
	return out
}

// checkAfter checks an operation of namespace ns: the cache is not
// poisoned, the error is one a full or busy cache gives, the accounting is
// exact (between operations), no namespace holds more than its cap, and
// one within its reservation when the operation started (with nothing run
// in between) lost no unit to it.
func (h *ilHarness) checkAfter(what, ns string, before [][]tenantState, err error) {
	if h.c.poisoned != nil {
		h.fail("%s (ns %q): poisoned: %v", what, ns, h.c.poisoned)
		return
	}
	if err != nil && !errors.Is(err, ErrNoSpace) && !errors.Is(err, ErrInvalidRequest) && !errors.Is(err, ErrUnknownSequence) && !errors.Is(err, ErrCopyFailed) && !errors.Is(err, ErrBusy) {
		h.fail("%s (ns %q): unexpected error %v", what, ns, err)
	}
	if h.c.long == 0 {
		if e := h.c.checkInvariants(); e != nil {
			h.fail("%s: invariants: %v", what, e)
		}
	}
	for p, row := range h.tenants() {
		for i, tn := range row {
			if i > 0 && tn.used > tn.cap {
				h.fail("%s (ns %q): namespace %q holds %d slots, above its cap %d", what, ns, tn.ns, tn.used, tn.cap)
			}
			b := before[p][i]
			if b.serial == h.serial && i > 0 && tn.ns != ns && b.used <= b.reserve && tn.evictions > b.evictions {
				h.fail("%s (ns %q): namespace %q within its reservation (%d of %d) lost %d units", what, ns, tn.ns, b.used, b.reserve, tn.evictions-b.evictions)
			}
		}
	}
}

func (h *ilHarness) prompt(ns string) []uint32 {
	bs := h.bases[ns]
	b := bs[h.r.IntN(len(bs))]
	p := append([]uint32(nil), b[:h.r.IntN(len(b)+1)]...)
	for range h.r.IntN(12) {
		p = append(p, uint32(1000+h.r.IntN(5)))
	}
	if len(p) == 0 {
		p = append(p, 7)
	}
	return p
}

func (h *ilHarness) pick() *ilSeq {
	var cand []*ilSeq
	for _, s := range h.seqs {
		if !s.busy {
			cand = append(cand, s)
		}
	}
	if len(cand) == 0 {
		return nil
	}
	return cand[h.r.IntN(len(cand))]
}

// withSeq runs f on a sequence no running operation uses, marking it busy.
func (h *ilHarness) withSeq(f func(s *ilSeq)) {
	s := h.pick()
	if s == nil {
		return
	}
	s.busy = true
	f(s)
	s.busy = false
}

// reserved sums the GPU slots long operations have reserved.
func (h *ilHarness) reserved() int {
	n := 0
	for p := range h.c.geom.pools {
		n += h.c.tiers.arena(GPU, p).reserved
	}
	return n
}

// op runs one random operation; long says it may run in steps.
func (h *ilHarness) op(long bool) {
	if h.engine != nil {
		h.engine.progress()
	}
	ns := h.nss[h.r.IntN(len(h.nss))]
	h.serial++
	saved := h.c.sliceUnits
	h.c.sliceUnits = 1 << 20
	if long {
		h.c.sliceUnits = h.slice
	}
	defer func() { h.c.sliceUnits = saved }()
	before := h.tenants()
	switch k := h.r.IntN(11); {
	case k == 10:
		req := Request{Tokens: h.prompt(ns), Namespace: ns}
		if h.r.IntN(2) == 0 {
			_, err := h.c.Prefetch(req)
			h.counts["prefetch"]++
			h.checkAfter("Prefetch", ns, before, err)
			return
		}
		req.Sparse = true
		plan, err := h.c.Acquire(req)
		h.counts["sparse acquire"]++
		h.checkAfter("sparse Acquire", ns, before, err)
		if err == nil {
			h.seqs = append(h.seqs, &ilSeq{id: plan.Seq, ns: ns, tokens: plan.Tokens})
		}
	case k < 4 || len(h.seqs) == 0:
		req := Request{Tokens: h.prompt(ns), Namespace: ns}
		if h.engine != nil {
			h.engine.settle()
		}
		adm, err := h.c.Admit(req)
		if err != nil {
			h.fail("Admit: %v", err)
			return
		}
		// Whether this Acquire reserved room: the sum of reservations
		// grows in one of its steps (those between run deeper).
		reservedAt, myDepth := h.reserved(), h.depth
		reservedSeen, ranBetween := false, false
		prev := h.c.afterStep
		h.c.afterStep = func(call string) {
			if h.reserved() > reservedAt && h.depth == myDepth {
				reservedSeen = true
			}
			if h.between(call) && h.depth == myDepth {
				ranBetween = true
			}
		}
		plan, err := h.c.Acquire(req)
		h.c.afterStep = prev
		h.counts["acquire"]++
		if adm.Fits != (err == nil) && (err == nil || errors.Is(err, ErrNoSpace)) && !reservedSeen && !ranBetween {
			h.fail("Admit %+v but Acquire: %v (ns %q, %d tokens)", adm, err, ns, len(req.Tokens))
		}
		if errors.Is(err, ErrNoSpace) && reservedSeen {
			h.fail("a long Acquire (ns %q, depth %d) failed after its reservation: %v", ns, h.depth, err)
		}
		h.checkAfter("Acquire", ns, before, err)
		if err == nil {
			s := &ilSeq{id: plan.Seq, ns: ns, tokens: len(req.Tokens)}
			h.seqs = append(h.seqs, s)
			if h.r.IntN(3) > 0 {
				s.busy = true
				before = h.tenants()
				err := h.c.Commit(plan.Seq, len(req.Tokens))
				s.busy = false
				h.checkAfter("Commit", ns, before, err)
			}
		}
	case k < 5:
		h.withSeq(func(s *ilSeq) {
			before = h.tenants()
			h.checkAfter("Commit", s.ns, before, h.c.Commit(s.id, s.tokens))
		})
	case k < 7:
		h.withSeq(func(s *ilSeq) {
			toks := make([]uint32, 1+h.r.IntN(6))
			for i := range toks {
				toks[i] = uint32(h.r.IntN(4))
			}
			before = h.tenants()
			_ = h.c.Commit(s.id, s.tokens)
			_, err := h.c.Append(s.id, toks...)
			if err == nil {
				s.tokens += len(toks)
			}
			h.counts["append"]++
			h.checkAfter("Append", s.ns, before, err)
		})
	case k < 8:
		h.withSeq(func(s *ilSeq) {
			before = h.tenants()
			plan, err := h.c.Fork(s.id)
			h.counts["fork"]++
			h.checkAfter("Fork", s.ns, before, err)
			if err == nil {
				h.seqs = append(h.seqs, &ilSeq{id: plan.Seq, ns: s.ns, tokens: s.tokens})
			}
		})
	case k < 9:
		h.withSeq(func(s *ilSeq) {
			if s.tokens < 2 {
				return
			}
			n := 1 + h.r.IntN(s.tokens-1)
			before = h.tenants()
			_, err := h.c.Truncate(s.id, n)
			if err == nil {
				s.tokens -= n
			}
			h.counts["truncate"]++
			h.checkAfter("Truncate", s.ns, before, err)
		})
	default:
		h.withSeq(func(s *ilSeq) {
			before = h.tenants()
			err := h.c.Release(s.id)
			for i, x := range h.seqs {
				if x == s {
					h.seqs = append(h.seqs[:i], h.seqs[i+1:]...)
					break
				}
			}
			h.counts["release"]++
			h.checkAfter("Release", s.ns, before, err)
		})
	}
}

// between runs up to two operations between two steps of a long one, two
// deep; it reports whether it ran any.
func (h *ilHarness) between(call string) bool {
	if h.depth >= 2 {
		return false
	}
	h.depth++
	defer func() { h.depth-- }()
	n := h.r.IntN(3)
	for range n {
		h.counts["between steps of "+call]++
		h.op(h.depth < 2 && h.r.IntN(3) == 0)
	}
	return n > 0
}

// TestSharesInterleaved runs random operations of four namespaces, with
// shares of the GPU and the CPU, some of them in steps with others run
// between the steps, with a Mover-less cache and with a TransferEngine.
// After every operation: the cache is not poisoned, its accounting is
// exact, no namespace is above its cap, none within its reservation lost
// a unit to another; Admit predicted every Acquire that nothing ran in;
// and no long Acquire failed after it reserved its room.
func TestSharesInterleaved(t *testing.T) {
	for _, tc := range []struct {
		name    string
		kind    layout.Kind
		windows []int
		gpu     int64
		cpu     int64
		shares  []Share
		partial bool
		wt      bool
	}{
		{name: "all-layers-two-reserves", kind: layout.AllLayers, gpu: 12, cpu: 8,
			shares: []Share{{Namespace: "a", Reserve: 0.3, Cap: 0.6}, {Namespace: "b", Reserve: 0.4, Cap: 0.8}}},
		{name: "all-layers-three-reserves", kind: layout.AllLayers, gpu: 16,
			shares: []Share{{Namespace: "a", Reserve: 0.25, Cap: 0.5}, {Namespace: "b", Reserve: 0.25, Cap: 0.5}, {Namespace: "c", Reserve: 0.25}}},
		{name: "paged-two-reserves", kind: layout.PagedLayer, gpu: 40, cpu: 20,
			shares: []Share{{Namespace: "a", Reserve: 0.3, Cap: 0.6}, {Namespace: "b", Reserve: 0.4, Cap: 0.8}}},
		{name: "paged-window-partial", kind: layout.PagedLayer, windows: []int{6, 0}, gpu: 40, cpu: 16, partial: true,
			shares: []Share{{Namespace: "a", Reserve: 0.3, Cap: 0.5}, {Namespace: "b", Reserve: 0.5}}},
		{name: "paged-writethrough-tight", kind: layout.PagedLayer, gpu: 24, cpu: 12, wt: true,
			shares: []Share{{Namespace: "a", Reserve: 0.25, Cap: 0.34}, {Namespace: "b", Reserve: 0.25, Cap: 0.5}, {Namespace: "c", Reserve: 0.25, Cap: 0.6}}},
		{name: "all-layers-caps", kind: layout.AllLayers, gpu: 10, cpu: 6,
			shares: []Share{{Namespace: "a", Cap: 0.3}, {Namespace: "b", Cap: 0.5}, {Namespace: "c", Reserve: 0.1, Cap: 0.2}}},
		{name: "all-layers-cap-is-reserve", kind: layout.AllLayers, gpu: 12, cpu: 8,
			shares: []Share{{Namespace: "a", Reserve: 0.25, Cap: 0.25}, {Namespace: "b", Reserve: 0.34, Cap: 0.34}, {Namespace: "c", Reserve: 0.4, Cap: 0.4}}},
		{name: "paged-window-default-namespace", kind: layout.PagedLayer, windows: []int{6, 0}, gpu: 36, cpu: 12, partial: true, wt: true,
			shares: []Share{{Namespace: "a", Reserve: 0.3, Cap: 0.3}, {Namespace: "b", Reserve: 0.3, Cap: 0.5}, {Namespace: "", Reserve: 0.2, Cap: 0.4}}},
		{name: "bsa-partial", kind: layout.BSA, windows: []int{0, 8}, gpu: 60, cpu: 24, partial: true,
			shares: []Share{{Namespace: "a", Reserve: 0.2, Cap: 0.5}, {Namespace: "b", Reserve: 0.4, Cap: 0.7}}},
		{name: "all-layers-no-shares", kind: layout.AllLayers, gpu: 10, cpu: 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			seeds, steps := modelSize(40, 12, 4), modelSize(300, 300, 200)
			counts := map[string]int{}
			failed := 0
			for seed := range seeds {
				tiers := GPUAndCPU(Capacity{Units: tc.gpu}, Capacity{Units: tc.cpu})
				tiers[0].Shares = tc.shares
				if tc.cpu > 0 {
					tiers[1].Shares = tc.shares
					tiers[1].WriteThrough = tc.wt
				}
				r := rand.New(rand.NewPCG(uint64(seed), 99))
				cfg := Config{Layout: tinyLayout(t, tc.kind, tc.windows), Tiers: tiers, PartialReuse: tc.partial}
				h := &ilHarness{r: r, nss: []string{"a", "b", "c", ""}, bases: map[string][][]uint32{}, counts: counts, slice: 1 + r.IntN(8)}
				if seed%2 == 1 {
					h.engine = &ilEngine{h: h}
					cfg.Engine = h.engine
				}
				c, err := New(cfg)
				require.NoError(t, err)
				h.c = c
				for _, ns := range h.nss {
					for range 3 {
						b := make([]uint32, 8+r.IntN(20))
						for i := range b {
							b[i] = uint32(r.IntN(3))
						}
						h.bases[ns] = append(h.bases[ns], b)
					}
				}
				c.sliceUnits = h.slice
				c.afterStep = func(call string) { h.between(call) }
				for i := 0; i < steps && c.poisoned == nil; i++ {
					h.op(true)
				}
				if len(h.defects) > 0 {
					if failed++; failed <= 3 {
						t.Errorf("seed %d (steps of %d units, engine %v): %d defects, the first: %s", seed, h.slice, h.engine != nil,
							len(h.defects), strings.Join(h.defects[:min(3, len(h.defects))], "\n  "))
					}
				}
			}
			t.Logf("%d of %d seeds failed; %v", failed, seeds, counts)
			require.Positive(t, counts["between steps of Acquire"], "no operation ran between two steps of an Acquire")
		})
	}
}

// TestGPUReservationSurvivesAnotherNamespace: "a" (a reservation of 3 of
// 12 GPU slots) and "b" (6) cache 4 blocks each, 4 slots are free. "a"'s
// long Acquire of 8 new blocks reserves 8: its 4 evictable units and the
// 4 free slots. Between its steps "b" acquires a block, which its own
// cached blocks make room for; it must take the place of one of them, not
// one of the free slots "a" reserved, and "a"'s Acquire completes.
func TestGPUReservationSurvivesAnotherNamespace(t *testing.T) {
	tiers := GPUAndCPU(Capacity{Units: 12}, Capacity{})
	tiers[0].Shares = []Share{{Namespace: "a", Reserve: 0.25}, {Namespace: "b", Reserve: 0.5}}
	c, err := New(Config{Layout: sharesTestLayout(t), Tiers: tiers})
	require.NoError(t, err)
	serve := func(ns string, p []uint32) {
		plan, err := c.Acquire(Request{Tokens: p, Namespace: ns})
		require.NoError(t, err)
		require.NoError(t, c.Commit(plan.Seq, len(p)))
		require.NoError(t, c.Release(plan.Seq))
	}
	serve("a", sharesTestPrompt(0, 4))
	serve("b", sharesTestPrompt(1000, 4))
	gpu := c.tiers.arena(GPU, 0)
	require.Len(t, gpu.free, 4)
	require.Equal(t, 8, gpu.availableTo(c.tenantOf("a")))

	c.sliceUnits = 7 // a long Acquire, one placement a step
	var between error
	ran := false
	c.afterStep = func(string) {
		if ran || gpu.reserved == 0 {
			return
		}
		ran = true
		saved := c.sliceUnits
		c.sliceUnits = 1 << 20
		defer func() { c.sliceUnits = saved }()
		req := Request{Tokens: sharesTestPrompt(2000, 1), Namespace: "b"}
		adm, err := c.Admit(req)
		require.NoError(t, err)
		require.True(t, adm.Fits)
		_, between = c.Acquire(req)
	}
	_, err = c.Acquire(Request{Tokens: sharesTestPrompt(3000, 8), Namespace: "a"})
	c.afterStep = nil
	require.True(t, ran)
	require.NoError(t, between)
	require.NoError(t, err, "a's long Acquire failed after its reservation")
	require.NoError(t, c.checkInvariants())
}
