package eviction

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// refWTinyLFU is W-TinyLFU stated plainly: each list a slice, oldest
// first, pinned keys in a map, and the sketch a byte per counter and a
// bool per doorkeeper bit. It shares with WTinyLFU only the key hash and
// the formulas that place a hash's counters and doorkeeper bits (sketch.slot
// and sketch.doorBits, restated here), so that the same keys collide in
// both; the packing of counters into words, their saturation, aging,
// journaling and the lists are checked.
type refWTinyLFU struct {
	windowCap, mainCap, protectedCap int64
	lists                            [3][]refWTLItem
	pinned                           map[int]refWTLItem

	counters  []uint8 // counter c of word w at w*16 + c
	door      []bool
	words     int
	blockBits uint
	additions int
	sample    int
	hash      func(int) uint64
}

type refWTLItem struct {
	key  int
	size int64
	list int
}

func newRefWTinyLFU(capacity int64, keys int, window, protected float64) *refWTinyLFU {
	n := 16
	for n < keys {
		n *= 2
	}
	blockBits := 0
	for 1<<blockBits < n/8 {
		blockBits++
	}
	w := max(1, int64(float64(capacity)*window))
	m := max(0, capacity-w)
	return &refWTinyLFU{
		windowCap: w, mainCap: m, protectedCap: int64(float64(m) * protected),
		pinned:   map[int]refWTLItem{},
		counters: make([]uint8, n*16), door: make([]bool, n*8), words: n,
		blockBits: uint(blockBits), sample: 10 * max(keys, 16), hash: keyHasher[int](),
	}
}

// place is sketch's spread, restated.
func (r *refWTinyLFU) place(h uint64) uint64 {
	x := h * 0x9ae16a3b2f90404f
	return x ^ x>>29
}

func (r *refWTinyLFU) counter(h uint64, row int) *uint8 {
	x := r.place(h) >> (8 * row)
	block := int(h >> (64 - r.blockBits))
	word := block*8 + 2*row + int(x&1)
	return &r.counters[word*16+int((x>>1)&15)]
}

func (r *refWTinyLFU) doorIndexes(h uint64) []int {
	x := r.place(h)
	word := int(h % uint64(r.words/8))
	return []int{word*64 + int((x>>40)&63), word*64 + int((x>>46)&63), word*64 + int((x>>52)&63)}
}

func (r *refWTinyLFU) inDoor(h uint64) bool {
	for _, b := range r.doorIndexes(h) {
		if !r.door[b] {
			return false
		}
	}
	return true
}

func (r *refWTinyLFU) see(k int) {
	h := r.hash(k)
	added := false
	if !r.inDoor(h) {
		for _, b := range r.doorIndexes(h) {
			r.door[b] = true
		}
		added = true
	} else {
		for row := range 4 {
			if c := r.counter(h, row); *c < 15 {
				*c++
				added = true
			}
		}
	}
	if !added {
		return // every counter saturated: not a sample
	}
	r.additions++
	if r.additions >= r.sample {
		for i := range r.counters {
			r.counters[i] /= 2
		}
		clear(r.door)
		r.additions /= 2
	}
}

func (r *refWTinyLFU) estimate(k int) int {
	h := r.hash(k)
	least := uint8(15)
	for row := range 4 {
		least = min(least, *r.counter(h, row))
	}
	e := int(least)
	if r.inDoor(h) {
		e++
	}
	return e
}

func (r *refWTinyLFU) sum(l int) int64 {
	var s int64
	for _, it := range r.lists[l] {
		s += it.size
	}
	return s
}

func (r *refWTinyLFU) find(k int) (int, int) {
	for l := range r.lists {
		if j := slices.IndexFunc(r.lists[l], func(it refWTLItem) bool { return it.key == k }); j >= 0 {
			return l, j
		}
	}
	return -1, -1
}

func (r *refWTinyLFU) take(l, j int) refWTLItem {
	it := r.lists[l][j]
	r.lists[l] = slices.Delete(r.lists[l], j, j+1)
	return it
}

func (r *refWTinyLFU) push(it refWTLItem) {
	r.lists[it.list] = append(r.lists[it.list], it)
	if it.list == 2 {
		for r.sum(2) > r.protectedCap && len(r.lists[2]) > 0 {
			d := r.take(2, 0)
			d.list = 1
			r.lists[1] = append(r.lists[1], d)
		}
	}
}

func (r *refWTinyLFU) tracked(k int) bool {
	_, ok := r.pinned[k]
	l, _ := r.find(k)
	return ok || l >= 0
}

func (r *refWTinyLFU) insert(k int, size int64) bool {
	if r.tracked(k) {
		return false
	}
	r.see(k)
	r.push(refWTLItem{key: k, size: size})
	return true
}

func (r *refWTinyLFU) access(k int) {
	if it, ok := r.pinned[k]; ok {
		r.see(k)
		if it.list == 1 {
			it.list = 2
			r.pinned[k] = it
		}
		return
	}
	l, j := r.find(k)
	if l < 0 {
		return
	}
	r.see(k)
	it := r.take(l, j)
	if it.list == 1 {
		it.list = 2
	}
	r.push(it)
}

func (r *refWTinyLFU) pin(k int) {
	if l, j := r.find(k); l >= 0 {
		r.pinned[k] = r.take(l, j)
	}
}

func (r *refWTinyLFU) unpin(k int) {
	if it, ok := r.pinned[k]; ok {
		delete(r.pinned, k)
		r.push(it)
	}
}

func (r *refWTinyLFU) remove(k int) {
	delete(r.pinned, k)
	if l, j := r.find(k); l >= 0 {
		r.take(l, j)
	}
}

func (r *refWTinyLFU) evict() (int, bool) {
	if r.len() == len(r.pinned) {
		return 0, false
	}
	cand := -1 // the candidate's list: 0 or 1
	for r.sum(0) > r.windowCap && len(r.lists[0]) > 0 {
		it := r.take(0, 0)
		it.list = 1
		r.push(it)
		if cand < 0 {
			cand = it.key
		}
	}
	var c *refWTLItem
	if cand >= 0 {
		_, j := r.find(cand)
		c = &r.lists[1][j]
	} else if len(r.lists[0]) > 0 {
		c = &r.lists[0][0]
	}
	var v *refWTLItem
	if len(r.lists[1]) > 0 {
		v = &r.lists[1][0]
	}
	evict := func(it *refWTLItem) (int, bool) {
		k := it.key
		l, j := r.find(k)
		r.take(l, j)
		return k, true
	}
	switch {
	case c == nil && v == nil:
		return evict(&r.lists[2][0])
	case c == nil:
		return evict(v)
	case v == nil, c.key == v.key, c.size > r.windowCap+r.mainCap:
		return evict(c)
	case r.estimate(c.key) > r.estimate(v.key):
		return evict(v)
	default:
		return evict(c)
	}
}

func (r *refWTinyLFU) len() int {
	return len(r.lists[0]) + len(r.lists[1]) + len(r.lists[2]) + len(r.pinned)
}

// TestWTinyLFUMatchesReference runs random mixes of every call, with a
// Zipf popularity and sizes that change, through WTinyLFU (with each kind
// of index) and refWTinyLFU, comparing every answer and, now and then,
// every estimate; the small sketches age many times in each run.
func TestWTinyLFUMatchesReference(t *testing.T) {
	const maxID = 300
	for ci, c := range []struct {
		capacity int64
		keys     int
		maxSize  int64
		window   float64
	}{{50, 0, 1, 0.01}, {100, 20, 8, 0.2}, {300, 64, 20, 0.05}, {40, 40, 40, 0.5}} {
		for _, dense := range []bool{false, true} {
			for seed := range uint64(5) {
				name := fmt.Sprintf("config%d/dense=%v/seed%d", ci, dense, seed)
				var idx Index[int]
				if dense {
					d, err := NewDenseIndex(maxID)
					if err != nil {
						t.Fatal(err)
					}
					idx = d
				}
				p, err := NewWTinyLFUWithIndex(WTinyLFUConfig{Capacity: c.capacity, Keys: c.keys, WindowRatio: c.window}, idx)
				if err != nil {
					t.Fatal(err)
				}
				keys := c.keys
				if keys == 0 {
					keys = int(c.capacity)
				}
				ref := newRefWTinyLFU(c.capacity, keys, c.window, DefaultWTinyLFUProtectedRatio)
				rng := rand.New(rand.NewPCG(seed, uint64(ci)))
				zipf := rand.NewZipf(rng, 1.1, 4, maxID)
				fail := func(step int, format string, args ...any) {
					t.Helper()
					t.Fatalf("%s step %d: %s", name, step, fmt.Sprintf(format, args...))
				}
				for step := range 6000 {
					k := int(zipf.Uint64())
					size := 1 + rng.Int64N(c.maxSize)
					switch r := rng.IntN(100); {
					case r < 30:
						if got, want := p.Insert(k, NewEntry(size)) == nil, ref.insert(k, size); got != want {
							fail(step, "Insert(%d) accepted %v, reference %v", k, got, want)
						}
					case r < 55:
						p.Access(k)
						ref.access(k)
					case r < 65:
						p.Pin(k)
						ref.pin(k)
					case r < 75:
						p.Unpin(k)
						ref.unpin(k)
					case r < 78:
						p.Remove(k)
						ref.remove(k)
					default:
						got, ok := p.Evict()
						want, wok := ref.evict()
						if got != want || ok != wok {
							fail(step, "Evict() = %d, %v; reference %d, %v", got, ok, want, wok)
						}
					}
					if p.Len() != ref.len() {
						fail(step, "Len() = %d, reference %d", p.Len(), ref.len())
					}
					if step%97 == 0 {
						for k := range maxID + 1 {
							if got, want := p.freq.estimate(p.hash(k)), ref.estimate(k); got != want {
								fail(step, "estimate of %d = %d, reference %d", k, got, want)
							}
						}
					}
				}
				for k := range maxID + 1 {
					p.Unpin(k)
					ref.unpin(k)
				}
				for step := 0; ; step++ {
					got, ok := p.Evict()
					want, wok := ref.evict()
					if got != want || ok != wok {
						fail(step, "draining: Evict() = %d, %v; reference %d, %v", got, ok, want, wok)
					}
					if !ok {
						break
					}
				}
			}
		}
	}
}

// TestWTinyLFURollbackAcrossAging: a transaction that ages the sketch
// rolls back exactly: afterwards the policy makes
// the same choices and estimates as a twin that never saw it, and a
// committed one leaves it as the same calls without a transaction would.
func TestWTinyLFURollbackAcrossAging(t *testing.T) {
	// Ages every 10,240 sightings; a doorkeeper of 128 words.
	cfg := WTinyLFUConfig{Capacity: 100, Keys: 1024}
	build := func() *WTinyLFU[int] {
		p, err := NewWTinyLFU[int](cfg)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	run := func(p *WTinyLFU[int], seed uint64, n int) []int {
		rng := rand.New(rand.NewPCG(seed, 7))
		var out []int
		for range n {
			k := rng.IntN(400)
			switch rng.IntN(4) {
			case 0:
				_ = p.Insert(k, NewEntry(1))
			case 1:
				p.Access(k)
			default:
				if p.Len() > 90 {
					v, _ := p.Evict()
					out = append(out, v)
				}
			}
		}
		return out
	}
	for _, commit := range []bool{false, true} {
		a, b := build(), build()
		for _, p := range []*WTinyLFU[int]{a, b} {
			run(p, 1, 1000)
			// The transaction's third sighting ages the sketch, so that
			// most of the doorkeeper is as Begin found it at the aging.
			for k := 1000; p.freq.additions != p.freq.sample-3; k++ {
				_ = p.Insert(k, NewEntry(1))
				p.Remove(k)
			}
		}
		a.Begin()
		run(a, 2, 4000)
		if commit {
			a.Commit()
			run(b, 2, 4000)
		} else {
			a.Rollback()
		}
		for k := range 1400 {
			if a.freq.estimate(a.hash(k)) != b.freq.estimate(b.hash(k)) {
				t.Fatalf("commit=%v: right after the transaction, the estimate of %d differs from a twin's", commit, k)
			}
		}
		if got, want := run(a, 3, 2000), run(b, 3, 2000); !slices.Equal(got, want) {
			t.Fatalf("commit=%v: victims after the transaction differ from a twin's", commit)
		}
		for k := range 400 {
			if a.freq.estimate(a.hash(k)) != b.freq.estimate(b.hash(k)) {
				t.Fatalf("commit=%v: estimate of %d differs from a twin's", commit, k)
			}
		}
		if len(a.freq.tx.writes) != 0 || len(a.freq.tx.saved) != 0 {
			t.Fatalf("commit=%v: the journal holds %d writes and %d saved arrays after the transaction", commit, len(a.freq.tx.writes), len(a.freq.tx.saved))
		}
	}
}
