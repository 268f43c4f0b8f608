package eviction_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/eviction/evictiontest"
)

// indexKinds are the indexes every slab-backed policy is tested with: the
// default Go map (a nil Index), a DenseIndex, and a TaggedIndex with so few
// slot bits (taggedBits) that most keys share a slot with another key and
// go through its overflow map.
var indexKinds = []string{"map", "dense", "tagged"}

const taggedBits = 5

// newIndex returns the index of kind for int keys up to maxKey: nil (the
// map), a new DenseIndex or a new TaggedIndex. It panics on a bad maxKey,
// which the tests never pass: it is called from policy factories that have
// no *testing.T of their own.
func newIndex(kind string, maxKey int) eviction.Index[int] {
	switch kind {
	case "map":
		return nil
	case "tagged":
		return must(eviction.NewTaggedIndex[int](taggedBits))
	}
	idx, err := eviction.NewDenseIndex(maxKey)
	if err != nil {
		panic(err)
	}
	return idx
}

// must returns p, panicking on err (for constructors that fail only on
// arguments the tests never pass).
func must[P any](p P, err error) P {
	if err != nil {
		panic(err)
	}
	return p
}

// indexedPolicy is a slab-backed policy built with a given index, for the
// tests that run every policy with every index.
type indexedPolicy struct {
	name string
	// build returns a new policy reading clock, for a cache of capacity
	// (S3FIFO's queues), indexed by idx.
	build func(clock eviction.Clock, capacity int64, idx eviction.Index[int]) (eviction.Policy[int], error)
}

func indexedPolicies() []indexedPolicy {
	return []indexedPolicy{
		{"LRU", func(_ eviction.Clock, _ int64, idx eviction.Index[int]) (eviction.Policy[int], error) {
			return eviction.NewLRUWithIndex(idx)
		}},
		{"FIFO", func(_ eviction.Clock, _ int64, idx eviction.Index[int]) (eviction.Policy[int], error) {
			return eviction.NewFIFOWithIndex(idx)
		}},
		{"PrioritizedLRU", func(c eviction.Clock, _ int64, idx eviction.Index[int]) (eviction.Policy[int], error) {
			return eviction.NewPrioritizedLRUWithIndex(c, idx)
		}},
		{"S3FIFO", func(_ eviction.Clock, capacity int64, idx eviction.Index[int]) (eviction.Policy[int], error) {
			return eviction.NewS3FIFOWithIndex(eviction.S3FIFOConfig{Capacity: capacity}, idx)
		}},
		{"ARC", func(_ eviction.Clock, capacity int64, idx eviction.Index[int]) (eviction.Policy[int], error) {
			return eviction.NewARCWithIndex(eviction.ARCConfig{Capacity: capacity}, idx)
		}},
		{"WTinyLFU", func(_ eviction.Clock, capacity int64, idx eviction.Index[int]) (eviction.Policy[int], error) {
			return eviction.NewWTinyLFUWithIndex(eviction.WTinyLFUConfig{Capacity: capacity}, idx)
		}},
	}
}

// TestDenseIndexConformance runs the conformance suite on every policy with
// a DenseIndex covering the suite's keys, and with a TaggedIndex.
func TestDenseIndexConformance(t *testing.T) {
	for _, kind := range indexKinds[1:] {
		for _, ip := range indexedPolicies() {
			t.Run(kind+"/"+ip.name, func(t *testing.T) {
				evictiontest.Run(t, func(cfg evictiontest.Config) eviction.Policy[int] {
					return must(ip.build(cfg.Clock, cfg.Capacity, newIndex(kind, evictiontest.MaxKey)))
				})
			})
		}
	}
}

// TestDenseIndexMatchesMap feeds the same random operations, with pins,
// priority durations, sizes and (for S3FIFO) Admit calls, to each policy
// built with a map, a DenseIndex and a TaggedIndex: every victim, Len and
// Admit answer must be the same.
func TestDenseIndexMatchesMap(t *testing.T) {
	const universe, capacity = 300, 120
	for _, ip := range indexedPolicies() {
		for seed := range uint64(8) {
			t.Run(fmt.Sprintf("%s/seed%d", ip.name, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 17))
				var clocks [3]*eviction.ManualClock
				var ps [3]eviction.Policy[int]
				for j, kind := range indexKinds {
					clocks[j] = new(eviction.ManualClock)
					p, err := ip.build(clocks[j], capacity, newIndex(kind, universe-1))
					require.NoError(t, err)
					ps[j] = p
				}
				type admitter interface {
					Admit(k int, size int64) (bool, bool)
				}
				for step := range 5000 {
					k := rng.IntN(universe)
					op := rng.IntN(9)
					e := eviction.NewEntry(1 + rng.Int64N(8))
					e.Priority = rng.IntN(eviction.MaxPriority + 1)
					if rng.IntN(4) == 0 {
						e.PriorityDuration = 100 * time.Millisecond
					}
					var got [3]string
					for j, p := range ps {
						switch op {
						case 0, 1:
							got[j] = fmt.Sprint(p.Insert(k, e) == nil)
						case 2:
							p.Access(k)
						case 3:
							p.Pin(k)
						case 4:
							p.Unpin(k)
						case 5:
							p.Remove(k)
						case 6, 7:
							v, ok := p.Evict()
							got[j] = fmt.Sprint(v, ok)
						case 8:
							if a, ok := p.(admitter); ok {
								m, i := a.Admit(k, e.Size)
								got[j] = fmt.Sprint(m, i)
							}
							clocks[j].Advance(7 * time.Millisecond)
						}
						got[j] += fmt.Sprintf(" len %d", p.Len())
					}
					require.Equal(t, got[0], got[1], "step %d: op %d on key %d: map vs dense", step, op, k)
					require.Equal(t, got[0], got[2], "step %d: op %d on key %d: map vs tagged", step, op, k)
				}
				for j := range ps { // the whole eviction order, pins lifted
					for k := range universe {
						ps[j].Unpin(k)
					}
				}
				for {
					k0, ok0 := ps[0].Evict()
					k1, ok1 := ps[1].Evict()
					k2, ok2 := ps[2].Evict()
					require.Equal(t, fmt.Sprint(k0, ok0), fmt.Sprint(k1, ok1), "drain")
					require.Equal(t, fmt.Sprint(k0, ok0), fmt.Sprint(k2, ok2), "drain")
					if !ok0 {
						break
					}
				}
			})
		}
	}
}

// TestDenseIndexKeyOutOfRange checks that an Insert of a key the DenseIndex
// cannot hold fails with ErrKeyOutOfRange naming the key and changes
// nothing, and that the other calls ignore such keys.
func TestDenseIndexKeyOutOfRange(t *testing.T) {
	const maxKey = 100
	for _, ip := range indexedPolicies() {
		t.Run(ip.name, func(t *testing.T) {
			p, err := ip.build(new(eviction.ManualClock), 1000, newIndex("dense", maxKey))
			require.NoError(t, err)
			twin, err := ip.build(new(eviction.ManualClock), 1000, newIndex("dense", maxKey))
			require.NoError(t, err)
			for _, q := range []eviction.Policy[int]{p, twin} {
				for k := range 10 {
					require.NoError(t, q.Insert(k*10, eviction.NewEntry(1)))
				}
				require.NoError(t, q.Insert(maxKey, eviction.NewEntry(1)), "the maximum key itself fits")
			}
			for _, k := range []int{-1, -1 << 40, maxKey + 1, 1 << 40} {
				err := p.Insert(k, eviction.NewEntry(1))
				require.ErrorIs(t, err, eviction.ErrKeyOutOfRange, "key %d", k)
				require.Contains(t, err.Error(), fmt.Sprint(k))
				p.Access(k)
				p.Pin(k)
				p.Unpin(k)
				p.Remove(k)
			}
			require.Equal(t, 11, p.Len())
			// A refused Insert, as a bad entry, leaves the key insertable.
			require.NoError(t, p.Insert(5, eviction.NewEntry(1)))
			require.NoError(t, twin.Insert(5, eviction.NewEntry(1)))
			for {
				k0, ok0 := p.Evict()
				k1, ok1 := twin.Evict()
				require.Equal(t, fmt.Sprint(k1, ok1), fmt.Sprint(k0, ok0), "the refused keys changed the victims")
				if !ok0 {
					break
				}
			}
		})
	}
}

func TestNewDenseIndexInvalid(t *testing.T) {
	_, err := eviction.NewDenseIndex(-1)
	require.ErrorIs(t, err, eviction.ErrInvalidConfig)
	require.Contains(t, err.Error(), "-1")
	_, err = eviction.NewDenseIndex[int64](eviction.MaxDenseKey + 1)
	require.ErrorIs(t, err, eviction.ErrInvalidConfig)
	_, err = eviction.NewDenseIndex[uint64](1 << 63)
	require.ErrorIs(t, err, eviction.ErrInvalidConfig)
	idx, err := eviction.NewDenseIndex[uint64](eviction.MaxDenseKey)
	require.NoError(t, err)
	require.Equal(t, uint64(eviction.MaxDenseKey), idx.MaxKey())
	require.Zero(t, idx.Len())
}

// TestIndexBelongsToOnePolicy checks that an index cannot be given to two
// policies (they would corrupt each other's lists) and that a nil
// *DenseIndex is refused rather than dereferenced.
func TestIndexBelongsToOnePolicy(t *testing.T) {
	for _, ip := range indexedPolicies() {
		t.Run(ip.name, func(t *testing.T) {
			idx := newIndex("dense", 10)
			_, err := ip.build(nil, 10, idx)
			require.NoError(t, err)
			_, err = ip.build(nil, 10, idx)
			require.ErrorIs(t, err, eviction.ErrInvalidConfig)
			require.Contains(t, err.Error(), "already belongs")

			var nilDense *eviction.DenseIndex[int]
			_, err = ip.build(nil, 10, nilDense)
			require.ErrorIs(t, err, eviction.ErrInvalidConfig)
			require.Contains(t, err.Error(), "nil")
		})
	}
	// A bad S3FIFO config is reported before the index is claimed.
	idx := newIndex("dense", 10)
	_, err := eviction.NewS3FIFOWithIndex(eviction.S3FIFOConfig{}, idx)
	require.ErrorIs(t, err, eviction.ErrInvalidConfig)
	_, err = eviction.NewS3FIFOWithIndex(eviction.S3FIFOConfig{Capacity: 10}, idx)
	require.NoError(t, err)
}

// TestNilIndexIsTheMap checks that a nil Index gives the map, which takes
// any comparable key.
func TestNilIndexIsTheMap(t *testing.T) {
	p, err := eviction.NewLRUWithIndex[string](nil)
	require.NoError(t, err)
	require.NoError(t, p.Insert("b", eviction.NewEntry(1)))
	require.NoError(t, p.Insert("a", eviction.NewEntry(1)))
	k, ok := p.Evict()
	require.True(t, ok)
	require.Equal(t, "b", k)
}

// TestDenseIndexSmallKeyTypes uses key types narrower than int, defined
// types among them: every key of a uint8 fits, and negative int8 keys are
// refused.
func TestDenseIndexSmallKeyTypes(t *testing.T) {
	type blockID uint8
	idx, err := eviction.NewDenseIndex[blockID](255)
	require.NoError(t, err)
	p, err := eviction.NewFIFOWithIndex[blockID](idx)
	require.NoError(t, err)
	for k := range 256 {
		require.NoError(t, p.Insert(blockID(k), eviction.NewEntry(1)))
	}
	require.Equal(t, 256, idx.Len())
	for want := range 256 {
		k, ok := p.Evict()
		require.True(t, ok)
		require.Equal(t, blockID(want), k)
	}
	require.Zero(t, idx.Len())

	signed, err := eviction.NewDenseIndex[int8](127)
	require.NoError(t, err)
	q, err := eviction.NewLRUWithIndex[int8](signed)
	require.NoError(t, err)
	require.ErrorIs(t, q.Insert(-128, eviction.NewEntry(1)), eviction.ErrKeyOutOfRange)
	require.NoError(t, q.Insert(127, eviction.NewEntry(1)))
	require.Equal(t, 1, q.Len())
}

// TestDenseIndexGrowsThenAllocatesNothing inserts keys spread over the
// index's range (so the slots grow several times), then checks that a
// cache cycle over keys already covered allocates nothing, with Len kept
// by the index.
func TestDenseIndexGrowsThenAllocatesNothing(t *testing.T) {
	const maxKey = 100_000
	idx, err := eviction.NewDenseIndex(maxKey)
	require.NoError(t, err)
	p, err := eviction.NewS3FIFOWithIndex(eviction.S3FIFOConfig{Capacity: 1000}, idx)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(3, 4))
	resident := map[int]bool{}
	for len(resident) < 1000 {
		k := rng.IntN(maxKey + 1)
		if !resident[k] {
			require.NoError(t, p.Insert(k, eviction.NewEntry(1)))
			resident[k] = true
		}
	}
	require.NoError(t, p.Insert(maxKey, eviction.NewEntry(1))) // the slots now cover every key
	require.Equal(t, 1001, p.Len())
	keys := make([]int, 0, 4096)
	for range cap(keys) {
		keys = append(keys, rng.IntN(maxKey+1))
	}
	i := 0
	allocs := testing.AllocsPerRun(5000, func() {
		k := keys[i%len(keys)]
		i++
		p.Access(k)
		if v, ok := p.Evict(); ok {
			_ = v
		}
		_ = p.Insert(k, eviction.NewEntry(1)) // fails harmlessly when k is resident
	})
	require.Zero(t, allocs)
	require.GreaterOrEqual(t, idx.Len(), p.Len(), "the index holds the tracked keys and the ghost")
}

// TestDenseIndexErrorsAreDistinct checks that ErrKeyOutOfRange is not
// mistaken for the other Insert errors.
func TestDenseIndexErrorsAreDistinct(t *testing.T) {
	p, err := eviction.NewLRUWithIndex(newIndex("dense", 3))
	require.NoError(t, err)
	err = p.Insert(4, eviction.NewEntry(1))
	require.ErrorIs(t, err, eviction.ErrKeyOutOfRange)
	for _, other := range []error{eviction.ErrInvalidEntry, eviction.ErrKeyExists, eviction.ErrTooManyKeys} {
		require.False(t, errors.Is(err, other), "wraps %v", other)
	}
	require.ErrorIs(t, p.Insert(4, eviction.NewEntry(0)), eviction.ErrInvalidEntry, "the entry is checked first")
}

// TestTaggedIndex checks the TaggedIndex on its own: keys that share their
// low bits (a reused number with a new generation in the high bits) are all
// found, through the overflow map, and leave it when deleted; negative keys
// and keys whose slot is past MaxDenseKey are refused; bad low bits are a
// config error; once its slots cover the keys, a cycle allocates nothing.
func TestTaggedIndex(t *testing.T) {
	_, err := eviction.NewTaggedIndex[uint64](0)
	require.ErrorIs(t, err, eviction.ErrInvalidConfig)
	_, err = eviction.NewTaggedIndex[uint64](64)
	require.ErrorIs(t, err, eviction.ErrInvalidConfig)
	require.Contains(t, err.Error(), "64")

	idx, err := eviction.NewTaggedIndex[uint64](8)
	require.NoError(t, err)
	p, err := eviction.NewLRUWithIndex[uint64](idx)
	require.NoError(t, err)
	gen := func(g, slot uint64) uint64 { return g<<8 | slot }
	// Three generations of slot 7, and slot 9.
	for _, k := range []uint64{gen(0, 7), gen(1, 7), gen(2, 7), gen(0, 9)} {
		require.NoError(t, p.Insert(k, eviction.NewEntry(1)))
	}
	require.Equal(t, 4, idx.Len())
	require.Equal(t, 2, idx.Overflow(), "two keys share slot 7 with the first")
	p.Pin(gen(1, 7))
	p.Remove(gen(0, 7)) // the slot's own key leaves; the others stay in the overflow
	require.Equal(t, 3, p.Len())
	for _, want := range []uint64{gen(2, 7), gen(0, 9)} {
		k, ok := p.Evict()
		require.True(t, ok)
		require.Equal(t, want, k)
	}
	_, ok := p.Evict()
	require.False(t, ok, "the pinned key stays")
	p.Unpin(gen(1, 7))
	k, ok := p.Evict()
	require.True(t, ok)
	require.Equal(t, gen(1, 7), k)
	require.Zero(t, idx.Len())
	require.Zero(t, idx.Overflow())

	signed, err := eviction.NewTaggedIndex[int64](4)
	require.NoError(t, err)
	q, err := eviction.NewFIFOWithIndex[int64](signed)
	require.NoError(t, err)
	require.ErrorIs(t, q.Insert(-3, eviction.NewEntry(1)), eviction.ErrKeyOutOfRange)
	wide, err := eviction.NewTaggedIndex[uint64](40)
	require.NoError(t, err)
	r, err := eviction.NewFIFOWithIndex[uint64](wide)
	require.NoError(t, err)
	err = r.Insert(uint64(eviction.MaxDenseKey)+1, eviction.NewEntry(1))
	require.ErrorIs(t, err, eviction.ErrKeyOutOfRange)
	require.Contains(t, err.Error(), fmt.Sprint(uint64(eviction.MaxDenseKey)+1))
	require.Zero(t, r.Len())

	// Steady state: generations come and go over 1000 slots.
	steady, err := eviction.NewTaggedIndex[uint64](10)
	require.NoError(t, err)
	s, err := eviction.NewLRUWithIndex[uint64](steady)
	require.NoError(t, err)
	for slot := range uint64(1000) {
		require.NoError(t, s.Insert(slot, eviction.NewEntry(1)))
	}
	g := uint64(1)
	allocs := testing.AllocsPerRun(2000, func() {
		v, ok := s.Evict()
		if !ok {
			return
		}
		g++
		_ = s.Insert(v&(1<<10-1)|g<<10, eviction.NewEntry(1))
	})
	require.Zero(t, allocs)
	require.Zero(t, steady.Overflow())
}
