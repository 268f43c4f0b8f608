package eviction_test

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/eviction/evictiontest"
)

func TestLRUConformance(t *testing.T) {
	evictiontest.Run(t, func(evictiontest.Config) eviction.Policy[int] { return eviction.NewLRU[int]() })
}

func TestLRUOrder(t *testing.T) {
	cases := []struct {
		name, script, victims string
	}{
		{"insertion order without accesses", "i1 i2 i3 e e e e", "1 2 3 -"},
		{"access moves to the back", "i1 i2 i3 a1 e e e", "2 3 1"},
		{"access of the newest changes nothing", "i1 i2 a2 e e", "1 2"},
		{"repeated accesses", "i1 i2 i3 a2 a1 a2 e e e", "3 1 2"},
		{"pinned key is skipped", "i1 i2 p1 e e", "2 -"},
		{"unpin makes the key most recent", "i1 i2 i3 p1 u1 e e e", "2 3 1"},
		{"access of a pinned key does not move it past its release", "i1 i2 p1 a1 i3 u1 e e e", "2 3 1"},
		{"unpin of an evictable key does not move it", "i1 i2 u1 e e", "1 2"},
		{"pin twice, unpin once", "i1 i2 p1 p1 u1 e e", "2 1"},
		{"remove from the middle", "i1 i2 i3 r2 e e e", "1 3 -"},
		{"remove a pinned key", "i1 i2 p1 r1 e e", "2 -"},
		{"reinsert after remove is newest", "i1 i2 r1 i1 e e", "2 1"},
		{"reinsert after evict is newest", "i1 i2 e i1 e e", "1 2 1"},
		{"unknown keys are ignored", "i1 a9 p9 u9 r9 i2 e e e", "1 2 -"},
		{"clock and priorities are ignored", "i1:100 +1s i2:0 e e", "1 2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.victims, runScript(t, eviction.NewLRU[int](), new(eviction.ManualClock), c.script))
		})
	}
}

func TestLRUDifferential(t *testing.T) {
	mixes := []struct {
		name string
		w    diffOps
	}{
		{"cache", diffOps{insert: 30, access: 30, pin: 3, unpin: 3, remove: 4, evict: 25, advance: 5}},
		{"pinned", diffOps{insert: 25, access: 15, pin: 25, unpin: 15, remove: 5, evict: 15, advance: 0}},
	}
	for _, kind := range indexKinds {
		for _, m := range mixes {
			for seed := range uint64(10) {
				runDifferential(t, "LRU/"+kind+"/"+m.name, seed, 3000, 64, m.w,
					func(eviction.Clock) eviction.Policy[int] { return must(eviction.NewLRUWithIndex(newIndex(kind, 63))) },
					&refLRU{}, plainEntry)
			}
		}
	}
}

func TestLRUInsertErrorsNameTheProblem(t *testing.T) {
	p := eviction.NewLRU[string]()
	require.NoError(t, p.Insert("a", eviction.NewEntry(1)))
	err := p.Insert("a", eviction.NewEntry(1))
	require.ErrorIs(t, err, eviction.ErrKeyExists)
	require.Contains(t, err.Error(), "a")
	err = p.Insert("b", eviction.NewEntry(0))
	require.ErrorIs(t, err, eviction.ErrInvalidEntry)
	require.Contains(t, err.Error(), "Size 0")
	require.Equal(t, 1, p.Len())
}

// TestLRUFreedNodesAreReused checks that the slab does not grow when keys
// come and go at a constant working size.
func TestLRUFreedNodesAreReused(t *testing.T) {
	p := eviction.NewLRU[int]()
	rng := rand.New(rand.NewPCG(1, 1))
	for k := range 100 {
		require.NoError(t, p.Insert(k, eviction.NewEntry(1)))
	}
	next := 100
	allocs := testing.AllocsPerRun(1000, func() {
		p.Access(rng.IntN(next))
		if _, ok := p.Evict(); ok {
			_ = p.Insert(next, eviction.NewEntry(1))
			next++
		}
	})
	require.Zero(t, allocs)
	require.Equal(t, 100, p.Len())
}
