package lfu_test

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/eviction/evictiontest"
	"github.com/kvtier/kvtier/examples/custompolicy/lfu"
)

// The conformance suite every kvtier policy passes.
func TestConformance(t *testing.T) {
	evictiontest.Run(t, func(evictiontest.Config) eviction.Policy[int] {
		return lfu.New[int]()
	})
}

// refLFU is the obvious O(n) LFU: a count and the time of the key's last
// arrival in its count's list, scanned on every Evict.
type refLFU struct {
	keys map[int]*refKey
	now  int
}

type refKey struct {
	count, stamp int
	pinned       bool
}

func (r *refLFU) touch(k *refKey) { r.now++; k.stamp = r.now }

func (r *refLFU) insert(k int) { r.keys[k] = &refKey{count: 1}; r.touch(r.keys[k]) }

func (r *refLFU) access(k int) {
	if x, ok := r.keys[k]; ok {
		x.count = min(x.count+1, lfu.MaxCount)
		if !x.pinned {
			r.touch(x)
		}
	}
}

func (r *refLFU) pin(k int) {
	if x, ok := r.keys[k]; ok {
		x.pinned = true
	}
}

func (r *refLFU) unpin(k int) {
	if x, ok := r.keys[k]; ok && x.pinned {
		x.pinned = false
		r.touch(x)
	}
}

func (r *refLFU) evict() (int, bool) {
	best, found := 0, false
	for k, x := range r.keys {
		if x.pinned {
			continue
		}
		if b := r.keys[best]; !found || x.count < b.count || (x.count == b.count && x.stamp < b.stamp) {
			best, found = k, true
		}
	}
	if found {
		delete(r.keys, best)
	}
	return best, found
}

// Random operations, with a few very hot keys so that counts reach
// MaxCount: LFU chooses exactly the reference's victims.
func TestMatchesReference(t *testing.T) {
	for seed := range uint64(5) {
		rng := rand.New(rand.NewPCG(seed, 1))
		p := lfu.New[int]()
		ref := &refLFU{keys: map[int]*refKey{}}
		for step := range 30000 {
			k := rng.IntN(64)
			if rng.IntN(4) == 0 {
				k = rng.IntN(3) // hot keys
			}
			switch op := rng.IntN(10); {
			case op < 2:
				err := p.Insert(k, eviction.NewEntry(1))
				if _, ok := ref.keys[k]; ok {
					require.ErrorIs(t, err, eviction.ErrKeyExists)
				} else {
					require.NoError(t, err)
					ref.insert(k)
				}
			case op < 6:
				p.Access(k)
				ref.access(k)
			case op < 7:
				p.Pin(k)
				ref.pin(k)
			case op < 8:
				p.Unpin(k)
				ref.unpin(k)
			case op < 9:
				p.Remove(k)
				delete(ref.keys, k)
			default:
				got, gok := p.Evict()
				want, wok := ref.evict()
				require.Equal(t, wok, gok, "seed %d step %d", seed, step)
				require.Equal(t, want, got, "seed %d step %d", seed, step)
			}
			require.Equal(t, len(ref.keys), p.Len())
		}
	}
}

// A key used often survives a scan of keys used once; LRU would lose it.
func TestScanResistance(t *testing.T) {
	p, lru := lfu.New[int](), eviction.NewLRU[int]()
	for _, q := range []eviction.Policy[int]{p, lru} {
		require.NoError(t, q.Insert(0, eviction.NewEntry(1)))
		q.Access(0)
		q.Access(0)
		for k := 1; k <= 100; k++ {
			require.NoError(t, q.Insert(k, eviction.NewEntry(1)))
			if q.Len() > 10 {
				_, ok := q.Evict()
				require.True(t, ok)
			}
		}
	}
	p.Pin(0) // still tracked: pinning it succeeds and it is never a victim
	for range p.Len() - 1 {
		k, ok := p.Evict()
		require.True(t, ok)
		assert.NotEqual(t, 0, k)
	}
	_, ok := p.Evict()
	assert.False(t, ok, "only the pinned hot key is left")
	assert.Equal(t, 1, p.Len())
	for range lru.Len() {
		k, _ := lru.Evict()
		assert.NotEqual(t, 0, k, "LRU evicted the hot key during the scan")
	}
}

// Counts stop at MaxCount: past it, keys are ordered by recency only.
func TestCountSaturates(t *testing.T) {
	p := lfu.New[string]()
	require.NoError(t, p.Insert("a", eviction.NewEntry(1)))
	require.NoError(t, p.Insert("b", eviction.NewEntry(1)))
	require.NoError(t, p.Insert("c", eviction.NewEntry(1)))
	for range lfu.MaxCount + 1000 {
		p.Access("a")
	}
	for range lfu.MaxCount + 10 {
		p.Access("b")
	}
	p.Access("c")
	for _, want := range []string{"c", "a", "b"} { // c: 2 uses; a and b saturated, a used less recently
		k, ok := p.Evict()
		require.True(t, ok)
		assert.Equal(t, want, k)
	}
}
