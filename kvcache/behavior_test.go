package kvcache

import (
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/kvtier/kvtier/costmodel"
	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/layout"
	"github.com/stretchr/testify/require"
)

func tinyLayout(t testing.TB, kind layout.Kind, windows []int) *layout.Layout {
	t.Helper()
	m := layout.Model{Name: "tiny", Layers: 2, QueryHeads: 4, KVHeads: 2, HeadDim: 2, ElemBytes: 1, Windows: windows}
	l, err := layout.New(m, kind, 4)
	require.NoError(t, err)
	return l
}

func seqTokens(n int, base uint32) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = base + uint32(i)
	}
	return out
}

func TestNewRejectsBadConfig(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	failing := func(PoolInfo) (eviction.Policy[UnitID], error) { return nil, errors.New("boom") }
	nilPolicy := func(PoolInfo) (eviction.Policy[UnitID], error) { return nil, nil }
	for name, tc := range map[string]struct {
		cfg  Config
		want string
	}{
		"nil layout":    {Config{Tiers: GPUAndCPU(Capacity{Units: 4}, Capacity{})}, "Layout"},
		"zero layout":   {Config{Layout: &layout.Layout{}, Tiers: GPUAndCPU(Capacity{Units: 4}, Capacity{})}, "Layout"},
		"no tier":       {Config{Layout: l}, "0 tiers"},
		"nine tiers":    {Config{Layout: l, Tiers: make([]TierConfig, 9)}, "9 tiers"},
		"zero tier":     {Config{Layout: l, Tiers: []TierConfig{{Capacity: Capacity{Units: 4}}, {}}}, "tier 2 (CPU) has no capacity"},
		"same names":    {Config{Layout: l, Tiers: []TierConfig{{Name: "x", Capacity: Capacity{Units: 4}}, {Name: "x", Capacity: Capacity{Units: 4}}}}, `both named "x"`},
		"bad link":      {Config{Layout: l, Tiers: linked(GPUAndCPU(Capacity{Units: 4}, Capacity{Units: 4}), costmodel.Link{BytesPerSecond: -1})}, "tier 2 (CPU) Link"},
		"both fields":   {Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: 4, Bytes: 64}, Capacity{})}, "both"},
		"negative CPU":  {Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: 4}, Capacity{Units: -1})}, "negative"},
		"pool no slot":  {Config{Layout: l, Tiers: GPUAndCPU(Capacity{Bytes: 16}, Capacity{})}, "no slot"},
		"bad recompute": {Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: 4}, Capacity{}), Recompute: &costmodel.Recompute{Alpha: -1}}, "Recompute"},
		"factory error": {Config{Layout: l, Tiers: tiersOf(Capacity{Units: 4}, Capacity{}, failing, nil)}, "boom"},
		"nil policy":    {Config{Layout: l, Tiers: tiersOf(Capacity{Units: 4}, Capacity{Units: 4}, nil, nilPolicy)}, "nil"},
		"NaN weight": {Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: 4}, Capacity{}),
			Recompute: &costmodel.Recompute{Beta: 1, LayerWeight: nanWeight}}, "LayerWeight(0, 1) returned NaN"},
		"NaN retention weight": {Config{Layout: l, Tiers: tiersOf(Capacity{Units: 4}, Capacity{}, RetentionPolicy(), nil),
			Recompute: &costmodel.Recompute{Beta: 1, PositionWeight: nanWeight}}, "PositionWeight(0, 1) returned NaN"},
		"retention, no cost": {Config{Layout: l, Tiers: tiersOf(Capacity{Units: 4}, Capacity{}, RetentionPolicy(), nil)}, "Config.Recompute, which is nil"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := New(tc.cfg)
			require.ErrorIs(t, err, ErrInvalidConfig)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// nanWeight is a weight function that returns NaN.
func nanWeight(int, int) float64 { return math.NaN() }

func TestCapacitySplitsByBytesPerBlock(t *testing.T) {
	// AllLayers with two windows: pool 0 holds one layer, pool 1 the other;
	// both units have the same size, so bytes split evenly.
	l := tinyLayout(t, layout.AllLayers, []int{8, 0})
	slots, err := PoolSlots(l, Capacity{Bytes: 10 * 32})
	require.NoError(t, err)
	require.Equal(t, []int{5, 5}, slots)
	// Paged, one pool of two slices: units split by units per block.
	l2 := tinyLayout(t, layout.PagedLayer, nil)
	slots, err = PoolSlots(l2, Capacity{Units: 7})
	require.NoError(t, err)
	require.Equal(t, []int{7}, slots)
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(Capacity{Bytes: 10 * 32}, Capacity{})})
	require.NoError(t, err)
	require.Equal(t, 5, c.Slots(GPU, 1))
	require.Equal(t, 0, c.Slots(CPU, 1))
	require.Equal(t, 0, c.Slots(GPU, 7))
}

func TestErrNoSpaceRollsBack(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: 6}, Capacity{})})
	require.NoError(t, err)
	p, err := c.Acquire(Request{Tokens: seqTokens(8, 0)}) // 2 blocks, 4 units
	require.NoError(t, err)
	before := c.Stats()
	_, err = c.Acquire(Request{Tokens: seqTokens(8, 100)})
	require.ErrorIs(t, err, ErrNoSpace)
	require.ErrorContains(t, err, "needs 4 slots, 2 free")
	require.Equal(t, before, c.Stats())
	require.NoError(t, c.checkInvariants())
	adm, err := c.Admit(Request{Tokens: seqTokens(8, 100)})
	require.NoError(t, err)
	require.False(t, adm.Fits)
	require.Equal(t, 4, adm.NeedSlots)
	require.Equal(t, 2, adm.FreeSlots)
	finish(t, c, p.Seq)
	adm, err = c.Admit(Request{Tokens: seqTokens(8, 100)})
	require.NoError(t, err)
	require.True(t, adm.Fits)
}

// TestReleaseEvictsChainTailFirst: a released chain leaves LRU from its
// last block, so a later request re-uses its head and recomputes only the
// tail.
func TestReleaseEvictsChainTailFirst(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: 8}, Capacity{})})
	require.NoError(t, err)
	prompt := seqTokens(16, 0) // 4 blocks, 8 units: the whole GPU
	p, err := c.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	finish(t, c, p.Seq)
	other, err := c.Acquire(Request{Tokens: seqTokens(4, 100)}) // needs 2 slots
	require.NoError(t, err)
	require.Equal(t, 2, other.Dropped)
	finish(t, c, other.Seq)
	again, err := c.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	require.Equal(t, 12, again.ReusedTokens)
	require.Equal(t, []TokenRange{{12, 16}}, again.Compute)
}

// TestDroppedHeadStaysKnown: with FIFO the chain's first block is evicted
// first; it stays in the tree as dropped, so a later match recomputes it and
// still hits the blocks after it (Pensieve).
func TestDroppedHeadStaysKnown(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	fifo := func(PoolInfo) (eviction.Policy[UnitID], error) { return eviction.NewFIFO[UnitID](), nil }
	c, err := New(Config{Layout: l, Tiers: tiersOf(Capacity{Units: 8}, Capacity{}, fifo, nil)})
	require.NoError(t, err)
	prompt := seqTokens(12, 0) // 3 blocks, 6 units
	p, err := c.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	finish(t, c, p.Seq)
	other, err := c.Acquire(Request{Tokens: seqTokens(8, 100)}) // 4 units: 2 evicted
	require.NoError(t, err)
	require.Equal(t, 2, other.Dropped)
	finish(t, c, other.Seq)
	require.Equal(t, 5, c.Stats().Blocks) // the dropped head is still known
	again, err := c.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	require.Equal(t, []TokenRange{{0, 4}}, again.Compute)
	require.Equal(t, 4, again.RecomputeTokens)
	require.Equal(t, 4, again.Hits)
	require.Equal(t, int64(4), c.Stats().RecomputedTokens)
	require.NoError(t, c.checkInvariants())
}

func TestOffloadOnboardRoundTripKeepsBytes(t *testing.T) {
	l := tinyLayout(t, layout.BSA, nil) // 4 slices of 16 bytes
	gpu, cpu := Capacity{Units: 8}, Capacity{Units: 16}
	store, err := NewMemoryStore(l, GPUAndCPU(gpu, cpu))
	require.NoError(t, err)
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(gpu, cpu), Mover: store})
	require.NoError(t, err)
	prompt := seqTokens(8, 0)
	p, err := c.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	for b := range 2 {
		for sl := range 4 {
			loc, err := c.Locate(p.Seq, b, sl)
			require.NoError(t, err)
			buf := store.Bytes(GPU, loc.Pool, loc.Slot)
			for i := range buf {
				buf[i] = byte(b*64 + sl*16 + i)
			}
		}
	}
	finish(t, c, p.Seq)
	q, err := c.Acquire(Request{Tokens: seqTokens(8, 50)})
	require.NoError(t, err)
	require.Equal(t, 8, q.Offloaded)
	finish(t, c, q.Seq)
	r, err := c.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	require.Equal(t, 8, r.Onboarded)
	require.Equal(t, 8, r.Offloaded) // the other prompt goes to the CPU
	require.Empty(t, r.Compute)
	for b := range 2 {
		for sl := range 4 {
			loc, err := c.Locate(r.Seq, b, sl)
			require.NoError(t, err)
			require.Equal(t, GPU, loc.Tier)
			buf := store.Bytes(GPU, loc.Pool, loc.Slot)
			for i := range buf {
				require.Equal(t, byte(b*64+sl*16+i), buf[i])
			}
		}
	}
	st := c.Stats()
	require.Equal(t, uint64(16), st.Offloads)
	require.Equal(t, uint64(8), st.Onboards)
	require.Equal(t, int64(24*16), st.BytesMoved)
	require.Equal(t, int64(8), st.Tier(CPU).Cached)
	require.InDelta(t, 0.0, st.Tier(GPU).HitRate(), 1e-9)
	require.InDelta(t, 8.0/24, st.Tier(CPU).HitRate(), 1e-9)
}

func TestCostModelDropsCheapUnits(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	// Recompute costs nothing: every victim is dropped although the CPU
	// has room.
	c, err := New(Config{Layout: l, Tiers: linked(GPUAndCPU(Capacity{Units: 4}, Capacity{Units: 8}), costmodel.Link{BytesPerSecond: 1e9}),
		Recompute: &costmodel.Recompute{}})
	require.NoError(t, err)
	p, err := c.Acquire(Request{Tokens: seqTokens(8, 0)})
	require.NoError(t, err)
	finish(t, c, p.Seq)
	q, err := c.Acquire(Request{Tokens: seqTokens(8, 10)})
	require.NoError(t, err)
	require.Equal(t, 4, q.Dropped)
	require.Zero(t, q.Offloaded)
}

// TestCommitSharesAndMerges: a block is shared once committed, not
// before: a second request with the same prompt computes its own copy
// (told that the first is writing it), and when both commit, the second
// adopts the first's block and frees its own slots.
func TestCommitSharesAndMerges(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: 16}, Capacity{})})
	require.NoError(t, err)
	a, err := c.Acquire(Request{Tokens: seqTokens(6, 0)})
	require.NoError(t, err)
	b, err := c.Acquire(Request{Tokens: seqTokens(6, 0)})
	require.NoError(t, err)
	require.Zero(t, b.Hits, "a's block 0 is not written yet")
	require.Equal(t, 4, b.BeingWrittenTokens, "but a is writing it")
	used := c.Stats().Tier(GPU).Capacity - c.Stats().Tier(GPU).Free
	require.Equal(t, int64(8), used) // two copies of block 0, two partial blocks
	// Each Append commits the tokens before it: b adopts a's block 0.
	_, err = c.Append(a.Seq, 6, 7)
	require.NoError(t, err)
	_, err = c.Append(b.Seq, 6, 7)
	require.NoError(t, err)
	require.Equal(t, int64(6), c.Stats().Tier(GPU).Capacity-c.Stats().Tier(GPU).Free)
	// Both fill block 1 with the same tokens; committing them makes b
	// adopt a's block 1 too.
	require.NoError(t, c.Commit(a.Seq, 8))
	require.NoError(t, c.Commit(b.Seq, 8))
	require.NoError(t, c.checkInvariants())
	for sl := range 2 {
		ta, err := c.BlockTable(nil, a.Seq, sl)
		require.NoError(t, err)
		tb, err := c.BlockTable(nil, b.Seq, sl)
		require.NoError(t, err)
		require.Equal(t, ta, tb)
	}
	require.Equal(t, int64(4), c.Stats().Tier(GPU).Capacity-c.Stats().Tier(GPU).Free)
	// A third request reuses both blocks at once.
	d, err := c.Acquire(Request{Tokens: seqTokens(8, 0)})
	require.NoError(t, err)
	require.Equal(t, 8, d.ReusedTokens)
	require.Zero(t, d.BeingWrittenTokens)
}

func TestNamespacesNeverShare(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: 16}, Capacity{})})
	require.NoError(t, err)
	a, err := c.Acquire(Request{Tokens: seqTokens(8, 0), Namespace: "tenant-a"})
	require.NoError(t, err)
	require.NoError(t, c.Commit(a.Seq, 8))
	p, err := c.Acquire(Request{Tokens: seqTokens(8, 0), Namespace: "tenant-b"})
	require.NoError(t, err)
	require.Zero(t, p.Hits)
	p, err = c.Acquire(Request{Tokens: seqTokens(8, 0), Namespace: "tenant-a", LoRA: "adapter"})
	require.NoError(t, err)
	require.Zero(t, p.Hits)
	p, err = c.Acquire(Request{Tokens: seqTokens(8, 0), Namespace: "tenant-a"})
	require.NoError(t, err)
	require.Equal(t, 4, p.Hits)
}

func TestSlidingWindowUnpinsOldBlocks(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, []int{4, 0}) // layer 0: window of 4 tokens
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: 16}, Capacity{})})
	require.NoError(t, err)
	p, err := c.Acquire(Request{Tokens: seqTokens(8, 0)})
	require.NoError(t, err)
	for b := range 2 {
		loc, err := c.Locate(p.Seq, b, 0)
		require.NoError(t, err)
		require.True(t, loc.Pinned, "the prefill may read every block")
	}
	_, err = c.Append(p.Seq, 8, 9, 10, 11, 12)
	require.NoError(t, err)
	// The first appended token (position 8) reads positions 5..8: block 0
	// left layer 0's window, block 1 did not.
	loc, err := c.Locate(p.Seq, 0, 0)
	require.NoError(t, err)
	require.False(t, loc.Pinned)
	require.Equal(t, GPU, loc.Tier) // still cached
	loc, err = c.Locate(p.Seq, 1, 0)
	require.NoError(t, err)
	require.True(t, loc.Pinned)
	loc, err = c.Locate(p.Seq, 0, 1) // the full-attention layer keeps it
	require.NoError(t, err)
	require.True(t, loc.Pinned)
	require.NoError(t, c.checkInvariants())
}

// TestSparseContextLargerThanGPU: a BSA sequence whose context does not fit
// on the GPU is prefilled block by block and decoded with sparse accesses.
func TestSparseContextLargerThanGPU(t *testing.T) {
	l := tinyLayout(t, layout.BSA, nil) // 4 units per block
	gpu, cpu := Capacity{Units: 12}, Capacity{Units: 64}
	store, err := NewMemoryStore(l, GPUAndCPU(gpu, cpu))
	require.NoError(t, err)
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(gpu, cpu), Mover: store})
	require.NoError(t, err)
	prompt := seqTokens(40, 0) // 10 blocks = 40 units > 12 GPU slots
	p, err := c.Acquire(Request{Tokens: prompt, Sparse: true})
	require.NoError(t, err)
	require.Equal(t, 40, p.Pending)
	for i := 0; i < 40; i += 4 {
		_, err := c.Append(p.Seq, prompt[i:i+4]...)
		require.NoError(t, err)
	}
	var res SparseResult
	for step := range 5 {
		_, err := c.Append(p.Seq, uint32(1000+step))
		require.NoError(t, err)
		for layer := range 2 {
			// Query heads 0,1 read KV head 0; 2,3 read KV head 1.
			heads := [][]int64{{0, 10}, {3}, {int64(step), 10}, {7}}
			require.NoError(t, c.SparseAccess(p.Seq, byQueryHeads(c.Layout(), layer, heads), &res))
			require.Len(t, res.Units, 6) // head 0: blocks 0,3,10; head 1: step,7,10
			require.Equal(t, int64(6*16), res.BytesRead)
			require.Equal(t, res.Hits+(res.Onboarded+res.Computed), 6)
			require.Zero(t, res.Computed)
		}
	}
	st := c.Stats()
	require.Positive(t, st.Onboards)
	require.LessOrEqual(t, st.Tier(GPU).Pinned, int64(12))
	require.NoError(t, c.checkInvariants())
	// A second sparse request with the same prompt takes all of it.
	q, err := c.Acquire(Request{Tokens: prompt, Sparse: true})
	require.NoError(t, err)
	require.Equal(t, 40, q.Tokens)
	require.Zero(t, q.Pending)
}

func TestTruncateDetachesOrCopies(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	gpu := Capacity{Units: 16}
	store, err := NewMemoryStore(l, GPUAndCPU(gpu, Capacity{}))
	require.NoError(t, err)
	var events []Event
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(gpu, Capacity{}), Mover: store, Events: func(e Event) { events = append(events, e) }})
	require.NoError(t, err)
	p, err := c.Acquire(Request{Tokens: seqTokens(8, 0)})
	require.NoError(t, err)
	// Uncommitted: the block just becomes partial again.
	tp, err := c.Truncate(p.Seq, 1)
	require.NoError(t, err)
	require.Zero(t, tp.Copied)
	require.Empty(t, events, "nothing was ever shared")
	_, err = c.Append(p.Seq, 7)
	require.NoError(t, err)
	require.NoError(t, c.Commit(p.Seq, 8))
	// Only user, leaf: the block is detached, no copy.
	tp, err = c.Truncate(p.Seq, 2)
	require.NoError(t, err)
	require.Zero(t, tp.Copied)
	require.Equal(t, BlockRemoved, events[len(events)-1].Kind)
	require.Equal(t, 1, c.Stats().Blocks)
	_, err = c.Append(p.Seq, 6, 7)
	require.NoError(t, err)
	// Shared with a fork: copy on write.
	f, err := c.Fork(p.Seq)
	require.NoError(t, err)
	require.Zero(t, f.Copied) // no partial block to copy
	tp, err = c.Truncate(p.Seq, 1)
	require.NoError(t, err)
	require.Equal(t, 2, tp.Copied)
	require.Len(t, tp.Executed, 2)
	require.Equal(t, GPU, tp.Executed[0].From)
	require.NoError(t, c.checkInvariants())
	_, err = c.Truncate(p.Seq, 8)
	require.ErrorIs(t, err, ErrOutOfRange)
	require.ErrorContains(t, err, "truncate 8 tokens of a sequence of 7")
}

func TestEventsDescribeBlocks(t *testing.T) {
	l := tinyLayout(t, layout.AllLayers, nil)
	var events []Event
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: 2}, Capacity{Units: 2}), Events: func(e Event) { events = append(events, e) }})
	require.NoError(t, err)
	p, err := c.Acquire(Request{Tokens: seqTokens(8, 0), Namespace: "ns"})
	require.NoError(t, err)
	require.Empty(t, events, "a block is stored when committed")
	require.NoError(t, c.Commit(p.Seq, 8))
	require.Len(t, events, 2)
	require.Equal(t, BlockStored, events[0].Kind)
	require.False(t, events[0].HasParent)
	require.Equal(t, seqTokens(4, 0), events[0].Tokens)
	require.Equal(t, "ns", events[0].Namespace)
	require.True(t, events[1].HasParent)
	require.Equal(t, events[0].Hash, events[1].ParentHash)
	finish(t, c, p.Seq)
	q, err := c.Acquire(Request{Tokens: seqTokens(4, 50)})
	require.NoError(t, err)
	require.Equal(t, []string{"offloaded"}, whats(events[2:]))
	require.Equal(t, GPU, events[2].From)
	require.Equal(t, CPU, events[2].To)
	require.Equal(t, events[1].Hash, events[2].Hash) // the tail left first
	finish(t, c, q.Seq)
	require.Equal(t, BlockStored, events[len(events)-1].Kind)
	require.NoError(t, c.Clear())
	require.Equal(t, AllCleared, events[len(events)-1].Kind)
	require.Zero(t, c.Stats().Blocks)
	require.True(t, slices.ContainsFunc(events, func(e Event) bool { return e.Kind.String() == "moved" }))
}

func TestBadRequests(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: 8}, Capacity{})})
	require.NoError(t, err)
	for name, p := range map[string]*Priorities{
		"priority":       {Default: -1},
		"duration":       {Default: 1, DefaultDuration: -1},
		"empty range":    {Default: 1, Ranges: []PriorityRange{{Start: 3, End: 3}}},
		"range priority": {Default: 1, Ranges: []PriorityRange{{Start: 0, End: 3, Priority: 101}}},
		"range duration": {Default: 1, Ranges: []PriorityRange{{Start: 0, End: 3, Duration: -1}}},
	} {
		_, err := c.Acquire(Request{Tokens: seqTokens(4, 0), Priorities: p})
		require.ErrorIs(t, err, ErrInvalidRequest, name)
	}
	_, err = c.Fork(42)
	require.ErrorIs(t, err, ErrUnknownSequence)
	require.ErrorContains(t, err, "42")
	_, err = c.Len(42)
	require.ErrorIs(t, err, ErrUnknownSequence)
	_, err = c.Locate(42, 0, 0)
	require.ErrorIs(t, err, ErrUnknownSequence)
	_, err = c.SequenceTokens(nil, 42)
	require.ErrorIs(t, err, ErrUnknownSequence)
	p, err := c.Acquire(Request{Tokens: seqTokens(4, 0)})
	require.NoError(t, err)
	_, err = c.Locate(p.Seq, 1, 0)
	require.ErrorIs(t, err, ErrOutOfRange)
	_, err = c.Locate(p.Seq, 0, 2)
	require.ErrorIs(t, err, ErrOutOfRange)
	require.NotPanics(t, func() { err = c.SparseAccess(p.Seq, Selection{Blocks: make([][]int, 2)}, nil) })
	require.ErrorIs(t, err, ErrInvalidRequest)
	require.ErrorContains(t, err, "nil SparseResult")
	require.NoError(t, c.checkInvariants())
}

func TestMemoryStoreRejectsBadCopies(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	m, err := NewMemoryStore(l, GPUAndCPU(Capacity{Units: 2}, Capacity{Units: 2}))
	require.NoError(t, err)
	copy(m.Bytes(GPU, 0, 0), "abc")
	err = m.Copy([]Copy{{From: GPU, FromSlot: 0, To: CPU, ToSlot: 1}, {From: GPU, FromSlot: 0, To: CPU, ToSlot: 2}})
	require.ErrorIs(t, err, ErrInvalidCopy)
	require.Zero(t, m.Bytes(CPU, 0, 1)[0], "nothing copied by a failed batch")
	require.Nil(t, m.Bytes(Dropped, 0, 0))
	require.Nil(t, m.Bytes(GPU, 1, 0))
	require.NoError(t, m.Copy([]Copy{{From: GPU, FromSlot: 0, To: CPU, ToSlot: 1}}))
	require.Equal(t, byte('a'), m.Bytes(CPU, 0, 1)[0])

	// The zero MemoryStore has no slots.
	var zero MemoryStore
	require.Nil(t, zero.Bytes(GPU, 0, 0))
	require.ErrorIs(t, zero.Copy([]Copy{{From: GPU, FromSlot: 0, To: CPU, ToSlot: 0}}), ErrInvalidCopy)
}

// TestRecomputedBlockIsNotOnboarded: a block one of whose units was dropped
// is recomputed whole, so its units on the CPU are not copied back (the
// recompute would overwrite them): the recompute gets fresh slots, and
// their CPU copies are released when it is committed.
func TestRecomputedBlockIsNotOnboarded(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil) // 2 units (layers) per block, 32 bytes each
	// Flat positions and the seed layer weight: layer 0's units cost 48 ns
	// to recompute and are offloaded (32 ns to copy back), layer 1's cost
	// 24 ns and are dropped.
	rc := &costmodel.Recompute{Beta: 48e-9, PositionWeight: costmodel.Flat}
	tiers := linked(GPUAndCPU(Capacity{Units: 4}, Capacity{Units: 8}), costmodel.Link{BytesPerSecond: 1e9})
	store, err := NewMemoryStore(l, tiers)
	require.NoError(t, err)
	var events []Event
	c, err := New(Config{Layout: l, Tiers: tiers, Recompute: rc, Mover: store, Events: func(e Event) { events = append(events, e) }})
	require.NoError(t, err)
	prompt := seqTokens(8, 0) // 2 blocks, 4 units: the whole GPU
	p, err := c.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	finish(t, c, p.Seq)
	q, err := c.Acquire(Request{Tokens: seqTokens(8, 100)})
	require.NoError(t, err)
	require.Equal(t, 2, q.Offloaded)
	require.Equal(t, 2, q.Dropped)
	finish(t, c, q.Seq)
	before := c.Stats()

	adm, err := c.Admit(Request{Tokens: prompt})
	require.NoError(t, err)
	events = events[:0]
	r, err := c.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	require.Equal(t, []TokenRange{{0, 8}}, r.Compute)
	require.Equal(t, 8, r.RecomputeTokens)
	require.Zero(t, r.Onboarded)
	require.Equal(t, 4, r.Computed)
	require.Equal(t, adm.NeedSlots, r.Computed)
	for _, cp := range r.Executed {
		require.NotEqual(t, CPU, cp.From, "copy %+v brings back a unit that is recomputed", cp)
	}
	st := c.Stats()
	require.Equal(t, before.Onboards, st.Onboards)
	require.Equal(t, before.Tier(CPU).Hits, st.Tier(CPU).Hits)
	require.Equal(t, before.Tier(CPU).Misses+4, st.Tier(CPU).Misses)
	// The recompute is written into a private copy; committing it releases
	// the CPU copies, reported dropped, then restored on the GPU, so that a
	// router knows where each unit is.
	require.NoError(t, c.Commit(r.Seq, 8))
	var kinds []string
	for _, e := range events {
		if e.Slice == 0 && what(e) != "offloaded" && e.Kind != BlockMoved {
			kinds = append(kinds, what(e))
		}
	}
	require.Equal(t, []string{"dropped", "restored", "dropped", "restored"}, kinds)
	for b := range 2 {
		loc, err := c.Locate(r.Seq, b, 0)
		require.NoError(t, err)
		require.Equal(t, GPU, loc.Tier)
	}
	require.NoError(t, c.checkInvariants())
}

// TestBlockTableShowsOnlyPinnedUnits: a block table gives a slot only for
// the units the sequence pins now; a unit still cached on the GPU but not
// pinned (a sparse sequence's unselected blocks, blocks out of a window)
// gives -1, since any later call may evict it and reuse its slot.
func TestBlockTableShowsOnlyPinnedUnits(t *testing.T) {
	l := tinyLayout(t, layout.BSA, nil) // 4 units per block: (layer, KV head)
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: 64}, Capacity{})})
	require.NoError(t, err)
	prompt := seqTokens(16, 0) // 4 blocks
	p, err := c.Acquire(Request{Tokens: prompt, Sparse: true})
	require.NoError(t, err)
	for i := 0; i < 16; i += 4 {
		_, err := c.Append(p.Seq, prompt[i:i+4]...)
		require.NoError(t, err)
	}
	_, err = c.Append(p.Seq, 99) // block 4, pinned by this Append
	require.NoError(t, err)
	slot := func(block, sl int) int32 {
		loc, err := c.Locate(p.Seq, block, sl)
		require.NoError(t, err)
		require.Equal(t, GPU, loc.Tier) // everything fits on the GPU
		return loc.Slot
	}
	for sl := range 4 {
		table, err := c.BlockTable(nil, p.Seq, sl)
		require.NoError(t, err)
		require.Equal(t, []int32{-1, -1, -1, -1, slot(4, sl)}, table, "slice %d", sl)
	}
	var res SparseResult
	// Layer 1: query heads 0 and 1 read KV head 0, heads 2 and 3 KV head 1.
	require.NoError(t, c.SparseAccess(p.Seq, byQueryHeads(c.Layout(), 1, [][]int64{{0}, {3}, {2}, {2}}), &res))
	require.Equal(t, 3, res.Hits)
	h0, h1 := res.Units[0].Slice, res.Units[2].Slice
	require.Equal(t, []int{0, 3}, []int{res.Units[0].Block, res.Units[1].Block})
	table, err := c.BlockTable(nil, p.Seq, h0)
	require.NoError(t, err)
	require.Equal(t, []int32{slot(0, h0), -1, -1, slot(3, h0), slot(4, h0)}, table)
	table, err = c.BlockTable(nil, p.Seq, h1)
	require.NoError(t, err)
	require.Equal(t, []int32{-1, -1, slot(2, h1), -1, slot(4, h1)}, table)

	// A dense sequence's block out of a sliding window: cached, not pinned.
	lw := tinyLayout(t, layout.PagedLayer, []int{4, 0}) // layer 0: window of 4 tokens
	cw, err := New(Config{Layout: lw, Tiers: GPUAndCPU(Capacity{Units: 16}, Capacity{})})
	require.NoError(t, err)
	d, err := cw.Acquire(Request{Tokens: seqTokens(8, 0)})
	require.NoError(t, err)
	_, err = cw.Append(d.Seq, 8)
	require.NoError(t, err)
	loc, err := cw.Locate(d.Seq, 0, 0)
	require.NoError(t, err)
	require.Equal(t, GPU, loc.Tier)
	require.False(t, loc.Pinned)
	table, err = cw.BlockTable(nil, d.Seq, 0)
	require.NoError(t, err)
	require.Equal(t, int32(-1), table[0])
	require.NotEqual(t, int32(-1), table[1])
	table, err = cw.BlockTable(nil, d.Seq, 1) // full attention keeps block 0
	require.NoError(t, err)
	require.NotContains(t, table, int32(-1))
}

// TestSparseRecomputeCountsTokens: a SparseAccess that gives dropped units
// fresh slots adds their blocks' tokens to Stats.RecomputedTokens, once per
// block however many of its units (heads) the call recomputes.
func TestSparseRecomputeCountsTokens(t *testing.T) {
	l := tinyLayout(t, layout.BSA, nil)                                                 // 4 units per block: (layer, KV head)
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: 12}, Capacity{})}) // no CPU: victims drop
	require.NoError(t, err)
	prompt := seqTokens(16, 0) // 4 blocks, 16 units
	p, err := c.Acquire(Request{Tokens: prompt, Sparse: true})
	require.NoError(t, err)
	for i := 0; i < 16; i += 4 {
		_, err := c.Append(p.Seq, prompt[i:i+4]...)
		require.NoError(t, err)
	}
	_, err = c.Append(p.Seq, 99) // block 4: block 0 (the oldest) is dropped
	require.NoError(t, err)
	for sl := range 4 {
		loc, err := c.Locate(p.Seq, 0, sl)
		require.NoError(t, err)
		require.Equal(t, Dropped, loc.Tier)
	}
	before := c.Stats().RecomputedTokens
	var res SparseResult
	// Every query head of layer 0 selects block 0: both KV heads' units.
	require.NoError(t, c.SparseAccess(p.Seq, byQueryHeads(c.Layout(), 0, [][]int64{{0}, {0}, {0}, {0}}), &res))
	require.Equal(t, 2, res.Computed)
	require.Equal(t, int64(4), c.Stats().RecomputedTokens-before, "block 0's 4 tokens, once")
	// The same selection again hits: nothing more to recompute.
	require.NoError(t, c.SparseAccess(p.Seq, byQueryHeads(c.Layout(), 0, [][]int64{{0}, {0}, {0}, {0}}), &res))
	require.Zero(t, res.Computed)
	require.Equal(t, int64(4), c.Stats().RecomputedTokens-before)
}

// TestTruncateDoesNotOffloadTheDiscardedBlock: the private partial block a
// Truncate cuts off is evictable during the Truncate; if its units are
// chosen as victims they are dropped, not copied to the CPU, since the
// block is freed right after.
func TestTruncateDoesNotOffloadTheDiscardedBlock(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil) // 2 units per block
	gpu, cpu := Capacity{Units: 6}, Capacity{Units: 8}
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(gpu, cpu)})
	require.NoError(t, err)
	a, err := c.Acquire(Request{Tokens: seqTokens(8, 0)}) // blocks 0, 1
	require.NoError(t, err)
	_, err = c.Append(a.Seq, 8, 9) // private partial block 2: the GPU is full
	require.NoError(t, err)
	b, err := c.Acquire(Request{Tokens: seqTokens(8, 0)}) // shares blocks 0 and 1
	require.NoError(t, err)
	require.Equal(t, 4, b.Hits)
	// Cutting into shared block 1 copies it on write: 2 slots, which only
	// the cut-off block 2 can give.
	p, err := c.Truncate(a.Seq, 3)
	require.NoError(t, err)
	require.Equal(t, 2, p.Copied)
	require.Zero(t, p.Offloaded)
	require.Equal(t, 2, p.Dropped)
	require.Len(t, p.Executed, 2)
	for _, cp := range p.Executed {
		require.Equal(t, Copy{Pool: 0, From: GPU, FromSlot: cp.FromSlot, To: GPU, ToSlot: cp.ToSlot}, cp)
	}
	st := c.Stats()
	require.Zero(t, st.Offloads)
	require.Zero(t, st.Tier(CPU).Capacity-st.Tier(CPU).Free)
	require.NoError(t, c.checkInvariants())
}

// TestVictimOfPartlyDroppedBlockIsDropped: once a unit of a cached block
// has no bytes, the next dense Acquire recomputes the block whole and frees
// its CPU copies, so the block's other units are dropped when evicted
// instead of being offloaded (a copy no one would read), even though the
// cost model would offload them on their own.
func TestVictimOfPartlyDroppedBlockIsDropped(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil) // 2 units (layers) per block, 32 bytes each
	// As in TestRecomputedBlockIsNotOnboarded: alone, layer 0's units
	// would be offloaded (48 ns to recompute, 32 ns to copy back) and
	// layer 1's dropped (24 ns). The retention policy, priced with the
	// same weights, evicts the cheaper layer 1 first.
	rc := &costmodel.Recompute{Beta: 48e-9, PositionWeight: costmodel.Flat}
	clock := &eviction.ManualClock{}
	var events []Event
	c, err := New(Config{Layout: l, Tiers: linked(tiersOf(Capacity{Units: 4}, Capacity{Units: 8}, RetentionPolicy(), nil), costmodel.Link{BytesPerSecond: 1e9}),
		Recompute: rc, Clock: clock, Events: func(e Event) { events = append(events, e) }})
	require.NoError(t, err)
	prompt := seqTokens(8, 0) // 2 blocks, 4 units: the whole GPU
	p, err := c.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	finish(t, c, p.Seq)
	clock.Advance(time.Second)
	events = events[:0]
	q, err := c.Acquire(Request{Tokens: seqTokens(8, 100)})
	require.NoError(t, err)
	// Victims in order: both layer-1 units (dropped by the cost model),
	// then both layer-0 units, whose blocks have lost a unit already.
	var victims []int
	for _, e := range events {
		if what(e) == "dropped" {
			victims = append(victims, e.Slice)
		}
	}
	require.Equal(t, []int{1, 1, 0, 0}, victims)
	require.Zero(t, q.Offloaded)
	require.Equal(t, 4, q.Dropped)
	require.Empty(t, q.Executed)
	require.NoError(t, c.Commit(q.Seq, 8))
	st := c.Stats()
	require.Zero(t, st.Offloads)
	require.Zero(t, st.Tier(CPU).Cached)
	// Blocks with no bytes left are forgotten: the tree holds q's only.
	require.Equal(t, 2, st.Blocks)
	require.NoError(t, c.checkInvariants())
}

// TestSparseSequenceKeepsOffloadingPartlyDroppedBlocks: a block that a live
// sparse sequence holds is the exception to the rule above, because
// SparseAccess restores dropped units one at a time and onboards the
// others: the CPU copy of a unit whose block lost another unit is read.
func TestSparseSequenceKeepsOffloadingPartlyDroppedBlocks(t *testing.T) {
	l := tinyLayout(t, layout.BSA, nil) // 4 units per block: (layer, KV head), 16 bytes each
	// Layer 0's units cost 24 ns to recompute, 16 ns to copy back:
	// offloaded; layer 1's cost 12 ns: dropped, and evicted first.
	rc := &costmodel.Recompute{Beta: 24e-9, PositionWeight: costmodel.Flat}
	clock := &eviction.ManualClock{}
	c, err := New(Config{Layout: l, Tiers: linked(tiersOf(Capacity{Units: 12}, Capacity{Units: 16}, RetentionPolicy(), nil), costmodel.Link{BytesPerSecond: 1e9}),
		Recompute: rc, Clock: clock})
	require.NoError(t, err)
	prompt := seqTokens(16, 0) // 4 blocks
	p, err := c.Acquire(Request{Tokens: prompt, Sparse: true})
	require.NoError(t, err)
	require.Equal(t, 16, p.Pending)
	// Each Append pins only its block and unpins the previous one. Block 0
	// is released 10 s before block 1, block 1 1 s before block 2, so
	// block 0's units leave first, layer 1 before layer 0.
	var last Plan
	for i, pause := range []time.Duration{0, 10 * time.Second, time.Second, time.Second} {
		clock.Advance(pause)
		last, err = c.Append(p.Seq, prompt[4*i:4*i+4]...)
		require.NoError(t, err)
	}
	require.Equal(t, 2, last.Dropped)
	require.Equal(t, 2, last.Offloaded)
	var res SparseResult
	// Layer 0 of block 0: both KV heads' units come back from the CPU.
	require.NoError(t, c.SparseAccess(p.Seq, byQueryHeads(c.Layout(), 0, [][]int64{{0}, {0}, {0}, {0}}), &res))
	require.Equal(t, 2, res.Onboarded)
	require.Zero(t, res.Computed)
	require.NoError(t, c.checkInvariants())
}

// finish is a test server ending a request that ran: every token it holds
// was computed, so it commits them all (to be shared) and releases it.
func finish(t testing.TB, c *Cache, id SeqID) {
	t.Helper()
	n, err := c.Len(id)
	require.NoError(t, err)
	require.NoError(t, c.Commit(id, n))
	require.NoError(t, c.Release(id))
}
