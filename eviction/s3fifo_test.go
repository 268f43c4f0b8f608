package eviction_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/eviction/evictiontest"
)

func TestS3FIFOConformance(t *testing.T) {
	for _, threshold := range []int{1, 2} {
		t.Run(fmt.Sprintf("threshold%d", threshold), func(t *testing.T) {
			evictiontest.Run(t, func(cfg evictiontest.Config) eviction.Policy[int] {
				p, err := eviction.NewS3FIFO[int](eviction.S3FIFOConfig{Capacity: cfg.Capacity, MoveToMainThreshold: threshold})
				require.NoError(t, err)
				return p
			})
		})
	}
}

func TestS3FIFOConfigInvalid(t *testing.T) {
	for _, cfg := range []eviction.S3FIFOConfig{
		{Capacity: 0},
		{Capacity: -5},
		{Capacity: 100, SmallRatio: 1},
		{Capacity: 100, SmallRatio: -0.1},
		{Capacity: 100, SmallRatio: 1.5},
		{Capacity: 100, GhostRatio: -1},
		{Capacity: 100, MoveToMainThreshold: -1},
		{Capacity: 100, MoveToMainThreshold: 256},
	} {
		_, err := eviction.NewS3FIFO[int](cfg)
		require.ErrorIs(t, err, eviction.ErrInvalidConfig, "%+v", cfg)
	}
	nan := 0.0
	nan /= nan
	for _, r := range []float64{nan, 1 / nan * 0} {
		_, err := eviction.NewS3FIFO[int](eviction.S3FIFOConfig{Capacity: 100, SmallRatio: r})
		require.ErrorIs(t, err, eviction.ErrInvalidConfig)
	}
	inf := 1.0
	for range 2000 {
		inf *= 2
	}
	_, err := eviction.NewS3FIFO[int](eviction.S3FIFOConfig{Capacity: 100, GhostRatio: inf})
	require.ErrorIs(t, err, eviction.ErrInvalidConfig)
}

// s3Script drives an S3-FIFO of objects (every size 1) of capacity 10: small
// holds 1 key, main 9, ghost 9.
func TestS3FIFOOrder(t *testing.T) {
	newP := func() *eviction.S3FIFO[int] {
		p, err := eviction.NewS3FIFO[int](eviction.S3FIFOConfig{Capacity: 10})
		require.NoError(t, err)
		return p
	}
	evict := func(p *eviction.S3FIFO[int]) int {
		k, ok := p.Evict()
		require.True(t, ok)
		return k
	}
	one := eviction.NewEntry(1)

	t.Run("small is a FIFO once eviction started", func(t *testing.T) {
		p := newP()
		require.NoError(t, p.Insert(1, one))
		require.Equal(t, 1, evict(p))
		for k := 2; k <= 4; k++ {
			require.NoError(t, p.Insert(k, one))
		}
		require.Equal(t, []int{2, 3, 4}, []int{evict(p), evict(p), evict(p)})
	})

	t.Run("warm-up overflows into main", func(t *testing.T) {
		// Before the first Evict, a full small queue sends new keys to
		// main: key 1 fills small (1 slot), 2 and 3 go to main. Main is
		// within its share, so Evict takes small's head first.
		p := newP()
		for k := 1; k <= 3; k++ {
			require.NoError(t, p.Insert(k, one))
		}
		require.Equal(t, 1, evict(p))
		require.Equal(t, 2, evict(p), "small is empty: main's head")
	})

	t.Run("the original version does not overflow", func(t *testing.T) {
		// S3FIFOv0: keys 1..3 all enter small, which evicts in order.
		p, err := eviction.NewS3FIFO[int](eviction.S3FIFOConfig{Capacity: 10, Original: true})
		require.NoError(t, err)
		for k := 1; k <= 3; k++ {
			require.NoError(t, p.Insert(k, one))
		}
		require.Equal(t, []int{1, 2, 3}, []int{evict(p), evict(p), evict(p)})
	})

	t.Run("two hits in small move a key to main", func(t *testing.T) {
		p := newP()
		require.NoError(t, p.Insert(9, one))
		require.Equal(t, 9, evict(p)) // start eviction mode
		require.NoError(t, p.Insert(1, one))
		require.NoError(t, p.Insert(2, one))
		p.Access(1)
		p.Access(1)
		p.Access(2) // one hit is not enough
		require.Equal(t, 2, evict(p), "1 moves to main, 2 is evicted")
		require.Equal(t, 1, evict(p), "then main")
	})

	t.Run("ghost hit goes to main", func(t *testing.T) {
		p := newP()
		require.NoError(t, p.Insert(1, one))
		require.Equal(t, 1, evict(p)) // 1 is now a ghost
		require.Equal(t, 0, p.Len())
		p.Access(1) // a ghost is not tracked: no effect
		require.NoError(t, p.Insert(2, one))
		require.NoError(t, p.Insert(1, one)) // ghost hit: main
		require.Equal(t, 2, evict(p), "small first")
		require.Equal(t, 1, evict(p))
	})

	t.Run("main is a 2-bit clock", func(t *testing.T) {
		p := newP()
		// Fill main through ghost hits: 1..3 in small, evicted to ghost,
		// inserted again into main.
		for k := 1; k <= 3; k++ {
			require.NoError(t, p.Insert(k, one))
			require.Equal(t, k, evict(p))
		}
		for k := 1; k <= 3; k++ {
			require.NoError(t, p.Insert(k, one))
		}
		for range 5 {
			p.Access(1) // saturates at 3
		}
		p.Access(2)
		// Main: 1(3) 2(1) 3(0). Evict: 1 -> tail with 2, 2 -> tail with
		// 0, 3 evicted.
		require.Equal(t, 3, evict(p))
		// Main: 1(2) 2(0): 1 -> tail with 1, 2 evicted.
		require.Equal(t, 2, evict(p))
		require.Equal(t, 1, evict(p))
		_, ok := p.Evict()
		require.False(t, ok)
	})

	t.Run("pinned keys leave their queue and come back at its tail", func(t *testing.T) {
		p := newP()
		require.NoError(t, p.Insert(9, one))
		require.Equal(t, 9, evict(p))
		require.NoError(t, p.Insert(1, one))
		require.NoError(t, p.Insert(2, one))
		p.Pin(1)
		p.Access(1)
		p.Access(1) // counted while pinned
		require.Equal(t, 2, evict(p))
		_, ok := p.Evict()
		require.False(t, ok, "1 is pinned")
		require.Equal(t, 1, p.Len())
		p.Unpin(1)
		require.NoError(t, p.Insert(3, one))
		// Small: 1(2) 3(0): 1 moves to main with its two hits, 3 is evicted.
		require.Equal(t, 3, evict(p))
		require.Equal(t, 1, evict(p))
	})

	t.Run("remove does not remember", func(t *testing.T) {
		p := newP()
		require.NoError(t, p.Insert(1, one))
		require.NoError(t, p.Insert(2, one))
		p.Remove(1)
		require.Equal(t, 2, evict(p))
		require.NoError(t, p.Insert(3, one))
		require.NoError(t, p.Insert(1, one)) // not a ghost: small
		require.Equal(t, 3, evict(p))
		require.Equal(t, 1, evict(p))
	})
}

func TestS3FIFOAdmit(t *testing.T) {
	// Capacity 100: small 10, main 90, ghost 90.
	p, err := eviction.NewS3FIFO[int](eviction.S3FIFOConfig{Capacity: 100})
	require.NoError(t, err)
	type answer struct{ makeRoom, insert bool }
	admit := func(k int, size int64) answer {
		m, i := p.Admit(k, size)
		return answer{m, i}
	}
	require.Equal(t, answer{true, true}, admit(1, 9))
	require.Equal(t, answer{true, false}, admit(1, 10), "libCacheSim makes room, then refuses an object as large as small")
	require.Equal(t, answer{false, false}, admit(1, 11))
	require.Equal(t, answer{false, false}, admit(1, 0))
	require.Equal(t, answer{false, false}, admit(1, 101))

	require.NoError(t, p.Insert(1, eviction.NewEntry(10))) // Insert alone never refuses
	require.Equal(t, answer{false, false}, admit(1, 1), "tracked")
	k, ok := p.Evict()
	require.True(t, ok)
	require.Equal(t, 1, k)

	// Key 2 goes to the ghost; Admit claims it; the claim survives the ghost
	// overflowing, so Insert puts 2 in main.
	require.NoError(t, p.Insert(2, eviction.NewEntry(5)))
	k, _ = p.Evict()
	require.Equal(t, 2, k)
	require.Equal(t, answer{true, true}, admit(2, 10), "a ghost key as large as small is admitted")
	for i := 10; i < 40; i++ { // 30 keys of size 5 pass through small and ghost
		require.NoError(t, p.Insert(i, eviction.NewEntry(5)))
		k, _ := p.Evict()
		require.Equal(t, i, k)
	}
	require.NoError(t, p.Insert(2, eviction.NewEntry(10)))
	require.NoError(t, p.Insert(50, eviction.NewEntry(5)))
	k, _ = p.Evict()
	require.Equal(t, 50, k, "2 is in main, 50 in small")

	// A ghost key refused for its size loses its ghost entry.
	k, _ = p.Evict()
	require.Equal(t, 2, k)
	require.NoError(t, p.Insert(60, eviction.NewEntry(5)))
	k, _ = p.Evict()
	require.Equal(t, 60, k)
	require.Equal(t, answer{false, false}, admit(60, 11))
	require.NoError(t, p.Insert(60, eviction.NewEntry(5)))
	require.NoError(t, p.Insert(61, eviction.NewEntry(1)))
	k, _ = p.Evict()
	require.Equal(t, 60, k, "60 was forgotten, so it went to small")
}

// refS3FIFO is a slow, direct transcription of libCacheSim's S3FIFO as a
// whole cache (S3FIFO_find / can_insert / insert / evict of the December
// 2024 version), queues as slices with the head at index 0. The policy is
// checked against it.
type refS3FIFO struct {
	capacity, smallCap, mainCap, ghostCap int64
	threshold                             int
	small, main, ghost                    []refS3Obj
	hasEvicted, hitOnGhost                bool
}

type refS3Obj struct {
	id   int
	size int64
	freq int
}

// newRefS3FIFO builds the reference; original selects S3FIFOv0.c, whose
// insert never overflows into main (as if has_evicted were always true).
func newRefS3FIFO(capacity int64, smallRatio, ghostRatio float64, threshold int, original bool) *refS3FIFO {
	small := int64(float64(capacity) * smallRatio)
	return &refS3FIFO{
		capacity: capacity, smallCap: small, mainCap: capacity - small,
		ghostCap: int64(float64(capacity) * ghostRatio), threshold: threshold,
		hasEvicted: original,
	}
}

func refBytes(q []refS3Obj) int64 {
	var s int64
	for _, o := range q {
		s += o.size
	}
	return s
}

func refFind(q []refS3Obj, id int) int {
	for i, o := range q {
		if o.id == id {
			return i
		}
	}
	return -1
}

// get is libCacheSim's cache_get_base: it returns whether id hit, and the
// keys evicted to make room.
func (r *refS3FIFO) get(id int, size int64) (hit bool, evicted []int) {
	r.hitOnGhost = false
	if i := refFind(r.small, id); i >= 0 {
		r.small[i].freq++
		return true, nil
	}
	if i := refFind(r.ghost, id); i >= 0 {
		r.ghost = append(r.ghost[:i:i], r.ghost[i+1:]...)
		r.hitOnGhost = true
	}
	if i := refFind(r.main, id); i >= 0 {
		r.main[i].freq++
		return true, nil
	}
	if size > r.smallCap || size > r.capacity {
		return false, nil
	}
	for refBytes(r.small)+refBytes(r.main)+size > r.capacity {
		if k, ok := r.evict(); ok {
			evicted = append(evicted, k)
		}
	}
	switch {
	case r.hitOnGhost:
		r.main = append(r.main, refS3Obj{id, size, 0})
	case size >= r.smallCap:
		// refused after making room
	case !r.hasEvicted && refBytes(r.small) >= r.smallCap:
		r.main = append(r.main, refS3Obj{id, size, 0})
	default:
		r.small = append(r.small, refS3Obj{id, size, 0})
	}
	return false, evicted
}

// evict is one call of S3FIFO_evict: it evicts at most one key.
func (r *refS3FIFO) evict() (int, bool) {
	r.hasEvicted = true
	if refBytes(r.main) > r.mainCap || refBytes(r.small) == 0 {
		for len(r.main) > 0 {
			o := r.main[0]
			r.main = r.main[1:]
			if o.freq >= 1 {
				r.main = append(r.main, refS3Obj{o.id, o.size, min(o.freq, 3) - 1})
				continue
			}
			return o.id, true
		}
		return 0, false
	}
	for len(r.small) > 0 {
		o := r.small[0]
		r.small = r.small[1:]
		if o.freq >= r.threshold {
			r.main = append(r.main, refS3Obj{o.id, o.size, 0})
			continue
		}
		if refFind(r.ghost, o.id) < 0 && o.size <= r.ghostCap {
			for refBytes(r.ghost)+o.size > r.ghostCap {
				r.ghost = r.ghost[1:]
			}
			r.ghost = append(r.ghost, refS3Obj{o.id, o.size, 0})
		}
		return o.id, true
	}
	return 0, false
}

// TestS3FIFOMatchesReference replays random traces (skewed keys, sizes
// from 1 to about a small queue) through the policy used as a classic
// cache, the way package replay does, and through the reference: every
// hit, miss and victim must agree. The policy runs with a map and with a
// DenseIndex.
func TestS3FIFOMatchesReference(t *testing.T) {
	configs := []s3RefCase{
		{100, 0.1, 0.9, 2, 12, false},
		{100, 0.1, 0.9, 1, 12, false},
		{257, 0.25, 0.5, 3, 20, false},
		{64, 0.1, 2.0, 2, 1, false},
		{1000, 0.05, 0.9, 2, 60, false},
		{300, 0.3, 0.9, 5, 10, false},
		{100, 0.1, 0.9, 2, 12, true},
		{500, 0.2, 0.9, 1, 30, true},
	}
	for _, kind := range indexKinds {
		for ci, c := range configs {
			for seed := range uint64(6) {
				c.check(t, fmt.Sprintf("%s/config%d/seed%d", kind, ci, seed), kind, rand.New(rand.NewPCG(seed, uint64(ci))))
			}
		}
	}
}

// s3RefCase is one configuration of TestS3FIFOMatchesReference.
type s3RefCase struct {
	capacity          int64
	small, ghost      float64
	threshold, maxObj int
	original          bool
}

// check replays one random trace drawn from rng through the policy, built
// with an index of kind, and through the reference.
func (c s3RefCase) check(t *testing.T, name, kind string, rng *rand.Rand) {
	t.Helper()
	const maxID = 400
	zipf := rand.NewZipf(rng, 1.1, 4, maxID)
	sizes := map[int]int64{}
	ref := newRefS3FIFO(c.capacity, c.small, c.ghost, c.threshold, c.original)
	p, err := eviction.NewS3FIFOWithIndex(eviction.S3FIFOConfig{
		Capacity: c.capacity, SmallRatio: c.small, GhostRatio: c.ghost, MoveToMainThreshold: c.threshold,
		Original: c.original,
	}, newIndex(kind, maxID))
	require.NoError(t, err)
	resident := map[int]int64{}
	var occupied int64
	for step := range 6000 {
		id := int(zipf.Uint64())
		size, ok := sizes[id]
		if !ok || rng.IntN(50) == 0 { // sizes change now and then
			size = 1 + rng.Int64N(int64(c.maxObj))
			sizes[id] = size
		}
		wantHit, wantEvicted := ref.get(id, size)

		var evicted []int
		_, hit := resident[id]
		if hit {
			p.Access(id)
		} else if makeRoom, insert := p.Admit(id, size); makeRoom {
			for occupied+size > c.capacity {
				k, ok := p.Evict()
				require.True(t, ok, "%s step %d: nothing to evict", name, step)
				occupied -= resident[k]
				delete(resident, k)
				evicted = append(evicted, k)
			}
			if insert {
				require.NoError(t, p.Insert(id, eviction.NewEntry(size)))
				resident[id] = size
				occupied += size
			}
		}
		require.Equal(t, wantHit, hit, "%s step %d: key %d", name, step, id)
		require.Equal(t, wantEvicted, evicted, "%s step %d: key %d size %d", name, step, id, size)
		require.Equal(t, len(resident), p.Len(), "%s step %d", name, step)
	}
}

// TestS3FIFOHugeGhost: a ghost larger than int64 (Capacity × GhostRatio
// past math.MaxInt64) is as large as int64 allows, not a wrapped or
// negative size, and filling it up to math.MaxInt64 bytes still drops the
// oldest ghost keys instead of overflowing the byte count.
func TestS3FIFOHugeGhost(t *testing.T) {
	// victimAfterReturn inserts key 1, evicts it into the ghost, evicts
	// more keys of size sz from small into the ghost, then inserts key 1
	// again and key 1000, and returns the next victim: 1000 when key 1 came
	// back from the ghost into main, 1 when it was no longer a ghost.
	victimAfterReturn := func(cfg eviction.S3FIFOConfig, sz int64, more int) int {
		p, err := eviction.NewS3FIFO[int](cfg)
		require.NoError(t, err)
		for k := 1; k <= 1+more; k++ {
			require.NoError(t, p.Insert(k, eviction.NewEntry(sz)))
			v, ok := p.Evict()
			require.True(t, ok)
			require.Equal(t, k, v)
		}
		require.NoError(t, p.Insert(1, eviction.NewEntry(sz)))
		require.NoError(t, p.Insert(1000, eviction.NewEntry(sz)))
		v, ok := p.Evict()
		require.True(t, ok)
		return v
	}
	// 2^62 × 4 does not fit in an int64: the ghost must still remember.
	require.Equal(t, 1000, victimAfterReturn(eviction.S3FIFOConfig{Capacity: 1 << 62, GhostRatio: 4}, 1, 0))
	// A ghost of math.MaxInt64 bytes holds 23 keys of 4e17 bytes, not 24:
	// the 24th pushes key 1 out.
	const sz = 4e17
	require.Equal(t, 1000, victimAfterReturn(eviction.S3FIFOConfig{Capacity: 1 << 62, GhostRatio: 4}, sz, 22))
	require.Equal(t, 1, victimAfterReturn(eviction.S3FIFOConfig{Capacity: 1 << 62, GhostRatio: 4}, sz, 23))
}
