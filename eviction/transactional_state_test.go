package eviction

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvtier/kvtier/costmodel"
	"github.com/stretchr/testify/require"
)

// The tests of this file look inside the policies: after a Rollback every
// field a later call reads must be as it was at Begin, not merely give the
// same next victim. The exceptions, which the state functions below leave
// out, are a heap's layout (its items are compared as a set: no two are
// equal, so the set decides the order they pop in) and Retention's
// tournament above its leaves (a cache of the winner, rebuilt).

// txPolicy is a policy of this package, with its transactions.
type txPolicy interface {
	Policy[int]
	Transactional
}

// txCase builds one kind of policy for the tests of this file.
type txCase struct {
	name  string
	build func(t *testing.T, clock Clock) txPolicy
}

func txCases() []txCase {
	dense := func(t *testing.T) *DenseIndex[int] {
		idx, err := NewDenseIndex(255)
		require.NoError(t, err)
		return idx
	}
	// Costs proportional to the context: the units of randomTxCall have
	// six costs, one of them 0.
	retentionCost := costmodel.Recompute{Alpha: 1e-6, LayerWeight: costmodel.Flat, PositionWeight: costmodel.Flat}
	return []txCase{
		{"LRU", func(*testing.T, Clock) txPolicy { return NewLRU[int]() }},
		{"LRU-dense", func(t *testing.T, _ Clock) txPolicy {
			p, err := NewLRUWithIndex[int](dense(t))
			require.NoError(t, err)
			return p
		}},
		{"FIFO", func(*testing.T, Clock) txPolicy { return NewFIFO[int]() }},
		{"FIFO-dense", func(t *testing.T, _ Clock) txPolicy {
			p, err := NewFIFOWithIndex[int](dense(t))
			require.NoError(t, err)
			return p
		}},
		{"PrioritizedLRU", func(_ *testing.T, c Clock) txPolicy { return NewPrioritizedLRU[int](c) }},
		{"PrioritizedLRU-dense", func(t *testing.T, c Clock) txPolicy {
			p, err := NewPrioritizedLRUWithIndex[int](c, dense(t))
			require.NoError(t, err)
			return p
		}},
		{"S3FIFO", func(t *testing.T, _ Clock) txPolicy {
			p, err := NewS3FIFO[int](S3FIFOConfig{Capacity: 40, GhostRatio: 0.3})
			require.NoError(t, err)
			return p
		}},
		{"S3FIFO-dense", func(t *testing.T, _ Clock) txPolicy {
			p, err := NewS3FIFOWithIndex[int](S3FIFOConfig{Capacity: 40, GhostRatio: 0.3}, dense(t))
			require.NoError(t, err)
			return p
		}},
		{"Retention", func(t *testing.T, c Clock) txPolicy {
			p, err := NewRetention[int](c, retentionCost)
			require.NoError(t, err)
			return p
		}},
		{"ARC", func(t *testing.T, _ Clock) txPolicy {
			p, err := NewARC[int](ARCConfig{Capacity: 40})
			require.NoError(t, err)
			return p
		}},
		{"ARC-dense", func(t *testing.T, _ Clock) txPolicy {
			p, err := NewARCWithIndex[int](ARCConfig{Capacity: 40}, dense(t))
			require.NoError(t, err)
			return p
		}},
		// A sketch of 16 keys ages every 160 sightings, then every 80:
		// bursts of calls age it within the transaction.
		{"WTinyLFU", func(t *testing.T, _ Clock) txPolicy {
			p, err := NewWTinyLFU[int](WTinyLFUConfig{Capacity: 40, Keys: 16, WindowRatio: 0.1})
			require.NoError(t, err)
			return p
		}},
		{"WTinyLFU-dense", func(t *testing.T, _ Clock) txPolicy {
			p, err := NewWTinyLFUWithIndex[int](WTinyLFUConfig{Capacity: 40, Keys: 16, WindowRatio: 0.1}, dense(t))
			require.NoError(t, err)
			return p
		}},
	}
}

// slabState is a copy of a slab and of the index into it.
type slabState[M any] struct {
	nodes []linkedNode[int, M]
	free  int32
	index map[int]int32
	len   int
}

func slabStateOf[M any](s *linkedSlab[int, M], x *keyIndex[int]) slabState[M] {
	var nodes []linkedNode[int, M]
	s.nodes.each(func(_ int32, n *linkedNode[int, M]) { nodes = append(nodes, *n) })
	st := slabState[M]{nodes: nodes, free: s.free, index: maps.Clone(x.m), len: x.len()}
	if x.other != nil {
		st.index = map[int]int32{}
		for k, v := range x.other.(*DenseIndex[int]).slots {
			if v != 0 {
				st.index[k] = v - 1
			}
		}
	}
	return st
}

// heapStateOf checks that h is a valid heap whose positions are right, and
// returns its items in the order they would pop.
func heapStateOf(t *testing.T, h *stampHeap) []stampItem {
	t.Helper()
	in := len(sparseNonZero(&h.pos))
	require.Equal(t, h.len(), in, "heap positions")
	var items []stampItem
	h.items.each(func(i int32, it *stampItem) {
		require.Equal(t, i+1, h.pos.get(uint64(it.node)), "heap position of node %d", it.node)
		if i > 0 {
			require.False(t, it.before(*h.items.at((i - 1) / 2)), "heap order at %d", i)
		}
		items = append(items, *it)
	})
	slices.SortFunc(items, func(a, b stampItem) int {
		switch {
		case a.before(b):
			return -1
		case b.before(a):
			return 1
		}
		return 0
	})
	return items
}

// stateOf returns a copy of every field of p that a later call reads.
func stateOf(t *testing.T, p txPolicy) any {
	t.Helper()
	switch p := p.(type) {
	case *LRU[int]:
		return slabStateOf(&p.slab, &p.keys)
	case *FIFO[int]:
		return []any{slabStateOf(&p.slab, &p.keys), heapStateOf(t, &p.reclaimed), p.nextSeq}
	case *PrioritizedLRU[int]:
		return []any{slabStateOf(&p.slab, &p.keys), heapStateOf(t, &p.expiring), p.nonEmpty, p.timers,
			sparseNonZero(&p.durations)}
	case *S3FIFO[int]:
		return []any{slabStateOf(&p.slab, &p.keys), p.bytes, p.count, p.tracked, p.hasEvicted, p.claimed,
			p.absent, p.absentValid}
	case *ARC[int]:
		return []any{slabStateOf(&p.slab, &p.keys), p.bytes, p.count, p.tracked, p.p, p.ghostHit, p.inB1, p.inB2,
			p.claim, p.incoming}
	case *WTinyLFU[int]:
		return []any{slabStateOf(&p.slab, &p.keys), p.bytes, p.count, p.tracked, cloneSlice(p.freq.table),
			cloneSlice(p.freq.door), p.freq.additions}
	case *Retention[int]:
		leaves := cloneSlice(p.tree.nodes[p.tree.size : p.tree.size+len(p.groups)])
		return []any{cloneSlice(p.keys), p.free, cloneSlice(p.groups), cloneSlice(p.freeGroups),
			maps.Clone(p.index), maps.Clone(p.byCost), p.now, p.seq, p.zeroGroup, leaves}
	}
	t.Fatalf("no state for %T", p)
	return nil
}

// txCall is one call to a policy, with the clock it reads.
type txCall struct {
	name string
	do   func(p txPolicy, c *ManualClock)
}

// randomTxCall returns a random call over the keys 0 to 63: Insert (of
// entries with various sizes, priorities, durations and costs), Access,
// Pin, Unpin, Remove, Evict, a clock advance, and S3FIFO's and ARC's
// Admit.
func randomTxCall(rng *rand.Rand) txCall {
	k := rng.IntN(64)
	switch rng.IntN(10) {
	case 0, 1:
		e := Entry{Size: 1 + rng.Int64N(4), Priority: rng.IntN(MaxPriority + 1)}
		if rng.IntN(3) == 0 {
			e.PriorityDuration = time.Duration(1+rng.IntN(4)) * time.Second
		}
		chunk := rng.IntN(6)
		e.Unit = costmodel.Unit{Chunk: chunk, Chunks: 6, ContextTokens: int64(16 * chunk)}
		return txCall{fmt.Sprintf("Insert(%d, %+v)", k, e), func(p txPolicy, _ *ManualClock) { _ = p.Insert(k, e) }}
	case 2:
		return txCall{fmt.Sprintf("Access(%d)", k), func(p txPolicy, _ *ManualClock) { p.Access(k) }}
	case 3:
		return txCall{fmt.Sprintf("Pin(%d)", k), func(p txPolicy, _ *ManualClock) { p.Pin(k) }}
	case 4:
		return txCall{fmt.Sprintf("Unpin(%d)", k), func(p txPolicy, _ *ManualClock) { p.Unpin(k) }}
	case 5:
		return txCall{fmt.Sprintf("Remove(%d)", k), func(p txPolicy, _ *ManualClock) { p.Remove(k) }}
	case 6, 7:
		return txCall{"Evict()", func(p txPolicy, _ *ManualClock) { p.Evict() }}
	case 8:
		d := time.Duration(rng.IntN(1500)) * time.Millisecond
		return txCall{fmt.Sprintf("Advance(%v)", d), func(_ txPolicy, c *ManualClock) { c.Advance(d) }}
	}
	size := 1 + rng.Int64N(6)
	return txCall{fmt.Sprintf("Admit(%d, %d)", k, size), func(p txPolicy, _ *ManualClock) {
		switch p := p.(type) {
		case *S3FIFO[int]:
			p.Admit(k, size)
		case *ARC[int]:
			p.Admit(k, size)
		}
	}}
}

// TestRollbackRestoresEveryField: random bursts of calls (Admit and clock
// advances included), rolled back, leave every field of the policy as it
// was at Begin.
func TestRollbackRestoresEveryField(t *testing.T) {
	for _, tc := range txCases() {
		t.Run(tc.name, func(t *testing.T) {
			for seed := range uint64(4) {
				rng := rand.New(rand.NewPCG(seed, 0x70))
				clock := &ManualClock{}
				p := tc.build(t, clock)
				var log []string
				for round := range 150 {
					for range rng.IntN(12) {
						c := randomTxCall(rng)
						log = append(log, c.name)
						c.do(p, clock)
					}
					before := stateOf(t, p)
					p.Begin()
					burst := []string{"Begin()"}
					for range rng.IntN(30) {
						c := randomTxCall(rng)
						burst = append(burst, c.name)
						c.do(p, clock)
					}
					p.Rollback()
					require.Equal(t, before, stateOf(t, p), "seed %d, round %d; calls before Begin (last 20):\n%s\nburst:\n%s",
						seed, round, strings.Join(log[max(0, len(log)-20):], "\n"), strings.Join(burst, "\n"))
				}
			}
		})
	}
}

// TestCommitKeepsEveryField: calls made between Begin and Commit leave the
// policy exactly as the same calls made without them, field by field, and
// Begin while recording keeps what was recorded so far.
func TestCommitKeepsEveryField(t *testing.T) {
	for _, tc := range txCases() {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 0x71))
			ca, cb := &ManualClock{}, &ManualClock{}
			a, b := tc.build(t, ca), tc.build(t, cb)
			for round := range 200 {
				a.Begin()
				for range rng.IntN(20) {
					c := randomTxCall(rng)
					c.do(a, ca)
					c.do(b, cb)
					if rng.IntN(10) == 0 {
						a.Begin() // keeps the calls so far
					}
				}
				a.Commit()
				require.Equal(t, stateOf(t, b), stateOf(t, a), "round %d", round)
			}
			require.Equal(t, drain(b), drain(a))
		})
	}
}

// TestCommitAndRollbackOutsideATransaction: Commit and Rollback without
// Begin, or after the transaction ended, change nothing.
func TestCommitAndRollbackOutsideATransaction(t *testing.T) {
	for _, tc := range txCases() {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(5, 0x72))
			clock := &ManualClock{}
			p := tc.build(t, clock)
			p.Rollback()
			p.Commit()
			for range 300 {
				randomTxCall(rng).do(p, clock)
			}
			before := stateOf(t, p)
			p.Rollback()
			p.Commit()
			require.Equal(t, before, stateOf(t, p))
			p.Begin()
			randomTxCall(rng).do(p, clock)
			p.Commit()
			after := stateOf(t, p)
			p.Rollback() // the transaction is over: nothing to undo
			require.Equal(t, after, stateOf(t, p))
		})
	}
}

// TestRollbackOfS3FIFOsEvictExactly: one Evict that promotes two hit keys
// from small to main, evicts the next key into a full ghost (dropping the
// oldest ghost entry), and a second that runs main's CLOCK (decrementing a
// hit count) and evicts from main; then a ghost hit and a new key. The
// rollback takes all of it back, field by field.
func TestRollbackOfS3FIFOsEvictExactly(t *testing.T) {
	// Capacity 20: small holds 2, main 18, the ghost 2. Original sends
	// every new key to small.
	p, err := NewS3FIFO[int](S3FIFOConfig{Capacity: 20, GhostRatio: 0.1, Original: true})
	require.NoError(t, err)
	insertAll(t, p, NewEntry(1), 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13)
	p.Access(0)
	p.Access(0)
	require.Equal(t, []int{1, 2}, []int{drainOne(p), drainOne(p)}, "0 moved to main; 1 and 2 fill the ghost")
	p.Access(0) // one hit in main
	for _, k := range []int{3, 3, 4, 4} {
		p.Access(k)
	}
	where := func(k int) uint8 {
		i, ok := p.keys.lookup(k)
		if !ok {
			return 255
		}
		return p.slab.nodes.at(i).meta.queue
	}
	require.Equal(t, []uint8{s3Main, s3Ghost, s3Ghost, s3Small, s3Small}, []uint8{where(0), where(1), where(2), where(3), where(4)})
	before := stateOf(t, p)

	p.Begin()
	require.Equal(t, 5, drainOne(p))
	require.Equal(t, []uint8{s3Main, s3Main, s3Ghost, 255}, []uint8{where(3), where(4), where(5), where(1)},
		"3 and 4 promoted, 5 a ghost, 1 dropped from the ghost")
	for k := 6; k <= 13; k++ {
		p.Pin(k) // small is empty now, so the next Evict runs main's CLOCK
	}
	require.Equal(t, 3, drainOne(p), "0 spends its hit and moves back; 3 goes")
	require.Equal(t, uint8(0), p.slab.nodes.at(mustLookup(t, p, 0)).meta.freq)
	require.NoError(t, p.Insert(2, NewEntry(1))) // a ghost hit: straight to main
	require.Equal(t, uint8(s3Main), where(2))
	require.NoError(t, p.Insert(42, NewEntry(1)))
	p.Rollback()

	require.Equal(t, before, stateOf(t, p))
}

func mustLookup(t *testing.T, p *S3FIFO[int], k int) int32 {
	t.Helper()
	i, ok := p.keys.lookup(k)
	require.True(t, ok, "key %d", k)
	return i
}

// TestRollbackOfAnS3FIFOClaim: a claim that Admit made before Begin, used
// by an Insert that is rolled back, holds again: the next Insert of the
// key goes to main.
func TestRollbackOfAnS3FIFOClaim(t *testing.T) {
	p, err := NewS3FIFO[int](S3FIFOConfig{Capacity: 20, Original: true})
	require.NoError(t, err)
	insertAll(t, p, NewEntry(1), 1, 2, 3)
	require.Equal(t, 1, drainOne(p)) // 1 is a ghost
	makeRoom, insert := p.Admit(1, 1)
	require.True(t, makeRoom && insert)
	before := stateOf(t, p)
	p.Begin()
	require.NoError(t, p.Insert(1, NewEntry(1)))
	require.NoError(t, p.Insert(7, NewEntry(1)))
	p.Rollback()
	require.Equal(t, before, stateOf(t, p))
	require.NoError(t, p.Insert(1, NewEntry(1)))
	i := mustLookup(t, p, 1)
	require.Equal(t, s3Main, p.slab.nodes.at(i).meta.queue, "the claim sent 1 to main")
}

// TestRollbackOfAReclaimedFIFOKey: a parked key unpinned before Begin
// waits in the heap of reclaimed keys; a transaction that evicts it, and
// parks and reclaims others, is undone with the heap holding what it held.
func TestRollbackOfAReclaimedFIFOKey(t *testing.T) {
	p := NewFIFO[int]()
	insertAll(t, p, NewEntry(1), 1, 2, 3, 4, 5)
	p.Pin(1)
	p.Pin(2)
	require.Equal(t, 3, drainOne(p)) // parks 1 and 2
	p.Unpin(2)                       // 2 is reclaimed: the next victim
	before := stateOf(t, p)
	p.Begin()
	require.Equal(t, 2, drainOne(p))
	p.Pin(4)
	require.Equal(t, 5, drainOne(p)) // parks 4
	p.Unpin(4)
	p.Unpin(1)
	require.NoError(t, p.Insert(2, NewEntry(1)))
	p.Rollback()
	require.Equal(t, before, stateOf(t, p))
	p.Unpin(1)
	require.Equal(t, []int{1, 2, 4, 5}, drain(p))
}

// TestRollbackOfARetentionGroup: a transaction that empties a cost group
// (freeing it), creates new ones (growing the tournament) and reuses the
// freed one is undone, tournament leaves included, and the victims after
// it are the twin's.
func TestRollbackOfARetentionGroup(t *testing.T) {
	ca, cb := &ManualClock{}, &ManualClock{}
	cost := costmodel.Recompute{Alpha: 1e-6, LayerWeight: costmodel.Flat, PositionWeight: costmodel.Flat}
	a, err := NewRetention[int](ca, cost)
	require.NoError(t, err)
	b, err := NewRetention[int](cb, cost)
	require.NoError(t, err)
	entry := func(ctx int64) Entry {
		e := NewEntry(1)
		e.Unit = costmodel.Unit{ContextTokens: ctx}
		return e
	}
	for k, ctx := range []int64{100, 200, 200, 0} {
		for _, p := range []*Retention[int]{a, b} {
			require.NoError(t, p.Insert(k, entry(ctx)))
		}
		ca.Advance(time.Second)
		cb.Advance(time.Second)
	}
	before := stateOf(t, a)
	a.Begin()
	require.Equal(t, 3, drainOne(a), "cost 0 goes first")
	a.Remove(0) // the group of cost 100 is freed
	for k, ctx := range []int64{300, 400, 500, 600, 100} {
		require.NoError(t, a.Insert(10+k, entry(ctx)))
		ca.Advance(time.Millisecond)
	}
	a.Access(1)
	a.Rollback()
	require.Equal(t, before, stateOf(t, a))
	ca.Advance(time.Second)
	cb.Advance(time.Second + 5*time.Millisecond) // the time a spent in the transaction
	require.Equal(t, ca.Now(), cb.Now())
	require.Equal(t, drain(b), drain(a))
}

// TestRecordingAllocatesNothingWhenCommitted: a cycle of transactions that
// commit (the policy's keys churn, its journals empty at each Commit)
// allocates nothing once warm, with either index.
func TestRecordingAllocatesNothingWhenCommitted(t *testing.T) {
	for _, tc := range txCases() {
		t.Run(tc.name, func(t *testing.T) {
			clock := &ManualClock{}
			p := tc.build(t, clock)
			e := Entry{Size: 1, Priority: 50, PriorityDuration: time.Second}
			e.Unit = costmodel.Unit{Chunk: 1, Chunks: 6, ContextTokens: 16}
			for k := range 64 {
				require.NoError(t, p.Insert(k, e))
			}
			pin := 0
			tx := func() {
				p.Begin()
				p.Pin(pin)
				p.Access((pin + 5) % 64)
				v1, ok1 := p.Evict()
				v2, ok2 := p.Evict()
				clock.Advance(300 * time.Millisecond)
				if ok1 {
					_ = p.Insert(v1, e)
				}
				if ok2 {
					_ = p.Insert(v2, e)
				}
				p.Unpin(pin)
				p.Commit()
				pin = (pin + 7) % 64
			}
			for range 200 {
				tx()
			}
			require.Zero(t, testing.AllocsPerRun(200, tx))
			require.Equal(t, 64, p.Len())
		})
	}
}

// cloneSlice copies s into a new slice, empty rather than nil when s is
// empty, so that a nil and an empty slice compare equal.
func cloneSlice[T any](s []T) []T { return append([]T{}, s...) }

// sparseNonZero returns the elements of a that are not zero, by index.
func sparseNonZero[T comparable](a *sparse[T]) map[uint64]T {
	out := map[uint64]T{}
	var zero T
	a.s.All(func(i uint64, v T) bool {
		if v != zero {
			out[i] = v
		}
		return true
	})
	return out
}
