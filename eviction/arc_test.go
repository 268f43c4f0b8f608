package eviction_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/eviction/evictiontest"
)

func TestARCConformance(t *testing.T) {
	evictiontest.Run(t, func(cfg evictiontest.Config) eviction.Policy[int] {
		p, err := eviction.NewARC[int](eviction.ARCConfig{Capacity: cfg.Capacity})
		require.NoError(t, err)
		return p
	})
}

func TestARCConfigInvalid(t *testing.T) {
	for _, c := range []int64{0, -3} {
		_, err := eviction.NewARC[int](eviction.ARCConfig{Capacity: c})
		require.ErrorIs(t, err, eviction.ErrInvalidConfig)
		require.ErrorContains(t, err, "Capacity")
	}
	_, err := eviction.NewARCWithIndex[uint64](eviction.ARCConfig{Capacity: 4}, (*eviction.DenseIndex[uint64])(nil))
	require.ErrorIs(t, err, eviction.ErrInvalidConfig)
}

// refARC is ARC stated plainly: each list a slice, oldest first, a key found
// by scanning them, pinned keys in a map beside them. It shares no code with
// ARC, so the differential test below checks ARC's slab, index and sizes.
type refARC struct {
	c        int64
	p        float64
	lists    [4][]refARCItem // T1, T2, B1, B2
	pinned   map[int]refARCItem
	ghostHit bool
	inB1     bool
	inB2     bool
	claim    int
	incoming int64
}

type refARCItem struct {
	key  int
	size int64
	list int // for a pinned key: its list
}

func newRefARC(c int64) *refARC {
	return &refARC{c: c, pinned: map[int]refARCItem{}, incoming: 1}
}

func (r *refARC) sum(l int) int64 {
	var s int64
	for _, it := range r.lists[l] {
		s += it.size
	}
	return s
}

// find returns the list and position of k, or -1.
func (r *refARC) find(k int) (int, int) {
	for l := range r.lists {
		for j, it := range r.lists[l] {
			if it.key == k {
				return l, j
			}
		}
	}
	return -1, -1
}

func (r *refARC) take(l, j int) refARCItem {
	it := r.lists[l][j]
	r.lists[l] = append(r.lists[l][:j:j], r.lists[l][j+1:]...)
	return it
}

func (r *refARC) push(l int, it refARCItem) { r.lists[l] = append(r.lists[l], it) }

func (r *refARC) adapt(l int) {
	b1, b2 := float64(r.sum(2)), float64(r.sum(3))
	r.inB1, r.inB2 = l == 2, l == 3
	if l == 2 {
		r.p = math.Min(r.p+math.Max(b2/b1, 1), float64(r.c))
	} else {
		r.p = math.Max(r.p-math.Max(b1/b2, 1), 0)
	}
}

func (r *refARC) tracked(k int) bool {
	if _, ok := r.pinned[k]; ok {
		return true
	}
	l, _ := r.find(k)
	return l == 0 || l == 1
}

func (r *refARC) insert(k int, size int64) bool {
	if r.tracked(k) {
		return false
	}
	l, j := r.find(k)
	switch {
	case l >= 2:
		r.adapt(l)
		r.take(l, j)
		r.ghostHit, r.inB1, r.inB2 = false, false, false
		r.push(1, refARCItem{key: k, size: size})
	case r.ghostHit && r.claim == k:
		r.ghostHit, r.inB1, r.inB2 = false, false, false
		r.push(1, refARCItem{key: k, size: size})
	default:
		r.ghostHit = false
		r.push(0, refARCItem{key: k, size: size})
	}
	return true
}

func (r *refARC) access(k int) {
	if it, ok := r.pinned[k]; ok {
		r.inB1, r.inB2 = false, false
		it.list = 1
		r.pinned[k] = it
		return
	}
	if l, j := r.find(k); l == 0 || l == 1 {
		r.inB1, r.inB2 = false, false
		r.push(1, r.take(l, j))
	}
}

func (r *refARC) pin(k int) {
	if l, j := r.find(k); l == 0 || l == 1 {
		it := r.take(l, j)
		it.list = l
		r.pinned[k] = it
	}
}

func (r *refARC) unpin(k int) {
	if it, ok := r.pinned[k]; ok {
		delete(r.pinned, k)
		r.push(it.list, it)
	}
}

func (r *refARC) remove(k int) {
	if _, ok := r.pinned[k]; ok {
		delete(r.pinned, k)
		return
	}
	if l, j := r.find(k); l == 0 || l == 1 {
		r.take(l, j)
	}
}

func (r *refARC) forget(k int) {
	if l, j := r.find(k); l >= 2 {
		r.take(l, j)
	}
}

func (r *refARC) admit(k int, size int64) (bool, bool) {
	r.ghostHit = false
	r.incoming = max(size, 1)
	if r.tracked(k) {
		return false, false
	}
	if l, j := r.find(k); l >= 2 {
		r.adapt(l)
		r.take(l, j)
		r.ghostHit, r.claim = true, k
	}
	fits := size >= 1 && size <= r.c
	return fits, fits
}

func (r *refARC) evict() (int, bool) {
	if len(r.lists[0]) == 0 && len(r.lists[1]) == 0 {
		return 0, false
	}
	if !r.ghostHit {
		if r.sum(0)+r.sum(2)+r.incoming > r.c {
			if len(r.lists[2]) == 0 && len(r.lists[0]) > 0 {
				return r.take(0, 0).key, true
			}
			if len(r.lists[2]) > 0 {
				r.take(2, 0)
			}
		} else if r.sum(0)+r.sum(1)+r.sum(2)+r.sum(3) >= 2*r.c && len(r.lists[3]) > 0 {
			r.take(3, 0)
		}
	}
	t1 := r.sum(0)
	from := 1
	if (t1 > 0 && (float64(t1) > r.p || (float64(t1) == r.p && r.inB2))) || r.sum(1) == 0 {
		from = 0
	}
	if len(r.lists[from]) == 0 {
		from = 1 - from
	}
	it := r.take(from, 0)
	r.push(from+2, it)
	return it.key, true
}

func (r *refARC) len() int { return len(r.lists[0]) + len(r.lists[1]) + len(r.pinned) }

// TestARCMatchesReference runs random mixes of every call, the classic
// cache's Admit, evictions and inserts among them, with sizes that change,
// through ARC (with each kind of index) and refARC, comparing every answer.
func TestARCMatchesReference(t *testing.T) {
	for _, kind := range indexKinds {
		for ci, c := range []struct {
			capacity int64
			maxSize  int64
		}{{40, 1}, {100, 12}, {257, 20}, {64, 64}} {
			for seed := range uint64(6) {
				name := fmt.Sprintf("%s/capacity%d/seed%d", kind, c.capacity, seed)
				rng := rand.New(rand.NewPCG(seed, uint64(ci)))
				const maxID = 300
				p, err := eviction.NewARCWithIndex(eviction.ARCConfig{Capacity: c.capacity}, newIndex(kind, maxID))
				require.NoError(t, err)
				ref := newRefARC(c.capacity)
				zipf := rand.NewZipf(rng, 1.1, 4, maxID)
				for step := range 5000 {
					k := int(zipf.Uint64())
					size := 1 + rng.Int64N(c.maxSize)
					switch r := rng.IntN(100); {
					case r < 40: // a classic cache's request
						if ref.tracked(k) {
							p.Access(k)
							ref.access(k)
							break
						}
						m, i := p.Admit(k, size)
						wm, wi := ref.admit(k, size)
						require.Equal(t, [2]bool{wm, wi}, [2]bool{m, i}, "%s step %d: Admit(%d, %d)", name, step, k, size)
						for n := rng.IntN(3); n > 0; n-- {
							got, ok := p.Evict()
							want, wok := ref.evict()
							require.Equal(t, [2]any{want, wok}, [2]any{got, ok}, "%s step %d: Evict", name, step)
						}
						if i {
							require.Equal(t, ref.insert(k, size), p.Insert(k, eviction.NewEntry(size)) == nil, "%s step %d: Insert(%d)", name, step, k)
						}
					case r < 55:
						require.Equal(t, ref.insert(k, size), p.Insert(k, eviction.NewEntry(size)) == nil, "%s step %d: Insert(%d)", name, step, k)
					case r < 65:
						p.Access(k)
						ref.access(k)
					case r < 75:
						p.Pin(k)
						ref.pin(k)
					case r < 85:
						p.Unpin(k)
						ref.unpin(k)
					case r < 88:
						p.Remove(k)
						ref.remove(k)
					case r < 90:
						p.Forget(k)
						ref.forget(k)
					default:
						got, ok := p.Evict()
						want, wok := ref.evict()
						require.Equal(t, [2]any{want, wok}, [2]any{got, ok}, "%s step %d: Evict", name, step)
					}
					require.Equal(t, ref.len(), p.Len(), "%s step %d", name, step)
				}
				for k := range maxID + 1 {
					p.Unpin(k)
					ref.unpin(k)
				}
				for {
					got, ok := p.Evict()
					want, wok := ref.evict()
					require.Equal(t, [2]any{want, wok}, [2]any{got, ok}, "%s: draining", name)
					if !ok {
						break
					}
				}
			}
		}
	}
}
