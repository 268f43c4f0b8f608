package kvevents

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// indexWorkload draws random batches over a small universe of hashes,
// servers and media, so that stores, removals of what is and is not held,
// orphans and clears all happen.
type indexWorkload struct {
	rng     *rand.Rand
	servers []string
	media   []string
	hashes  int
}

func newIndexWorkload(seed uint64, servers int) *indexWorkload {
	w := &indexWorkload{rng: rand.New(rand.NewPCG(seed, 7)), media: []string{MediumGPU, MediumCPU, "DISK", ""}, hashes: 40}
	for i := range servers {
		w.servers = append(w.servers, fmt.Sprintf("s%02d", i))
	}
	return w
}

func (w *indexWorkload) hash() uint64 { return uint64(w.rng.IntN(w.hashes)) }

func (w *indexWorkload) hashList(n int) []uint64 {
	hs := make([]uint64, n)
	for i := range hs {
		hs[i] = w.hash()
	}
	return hs
}

func (w *indexWorkload) batch(long bool) Batch {
	var b Batch
	for range 1 + w.rng.IntN(4) {
		n := 1 + w.rng.IntN(5)
		if long {
			n = step + w.rng.IntN(2*step)
		}
		medium := w.media[w.rng.IntN(len(w.media))]
		switch r := w.rng.IntN(20); {
		case r < 11:
			e := BlockStored{BlockHashes: w.hashList(n), Medium: medium}
			if w.rng.IntN(2) == 0 {
				p := w.hash()
				e.ParentBlockHash = &p
			}
			if r == 0 {
				b.Events = append(b.Events, &e)
			} else {
				b.Events = append(b.Events, e)
			}
		case r < 18:
			b.Events = append(b.Events, BlockRemoved{BlockHashes: w.hashList(n), Medium: medium})
		case r == 18:
			b.Events = append(b.Events, AllBlocksCleared{})
		default:
			b.Events = append(b.Events, nil, (*BlockRemoved)(nil))
		}
	}
	return b
}

func (w *indexWorkload) weights() Weights {
	switch w.rng.IntN(3) {
	case 0:
		return nil
	case 1:
		return Weights{MediumGPU: 1, MediumCPU: 0.5, "DISK": 0.25}
	}
	return Weights{MediumGPU: w.rng.Float64(), "": -1, "DISK": 2}
}

// requireSameIndex compares every answer of ix with ref's.
func requireSameIndex(t *testing.T, w *indexWorkload, ix *Index, ref *refIndex, msg string) {
	t.Helper()
	var names []string
	for s := range ref.servers {
		names = append(names, s)
	}
	slices.Sort(names)
	require.Equal(t, names, slices.Collect(ix.Servers()), "%s: servers", msg)
	for _, s := range w.servers {
		for h := range uint64(w.hashes) {
			require.Equal(t, ref.servers[s][h], ix.Media(s, h), "%s: Media(%s, %d)", msg, s, h)
		}
		requireSameBlocks(t, ix, ref, s, msg)
	}
	require.Equal(t, ref.orphans, ix.Orphans(), "%s: orphans", msg)
	require.Equal(t, ref.strays, ix.Strays(), "%s: strays", msg)
	for range 5 {
		hs := w.hashList(w.rng.IntN(12))
		for _, s := range w.servers {
			require.Equal(t, ref.match(s, hs), ix.Match(s, hs), "%s: Match(%s, %v)", msg, s, hs)
		}
		wt := w.weights()
		require.Equal(t, ref.score(hs, wt), ix.Score(nil, hs, wt), "%s: Score(%v, %v)", msg, hs, wt)
	}
}

// TestIndexMatchesReference: random batches, clears and Forgets over a
// few servers (and over more servers than a Score's scratch holds
// without allocating), every answer of the Index compared with the plain
// per-server maps after every call.
func TestIndexMatchesReference(t *testing.T) {
	for _, tc := range []struct {
		servers int
		drop    bool
	}{{3, false}, {3, true}, {70, false}} {
		t.Run(fmt.Sprintf("servers=%d/drop=%v", tc.servers, tc.drop), func(t *testing.T) {
			for seed := range uint64(4) {
				w := newIndexWorkload(seed, tc.servers)
				ix := &Index{DropOrphans: tc.drop}
				ref := newRefIndex(tc.drop)
				ops := 300
				if tc.servers > 10 {
					ops = 60
				}
				for op := range ops {
					s := w.servers[w.rng.IntN(len(w.servers))]
					if w.rng.IntN(25) == 0 {
						ix.Forget(s)
						delete(ref.servers, s)
					} else {
						b := w.batch(false)
						ix.Apply(s, b)
						ref.apply(s, b)
					}
					requireSameIndex(t, w, ix, ref, fmt.Sprintf("seed %d op %d", seed, op))
				}
			}
		})
	}
}

// TestIndexLongBatches: batches of more block changes than Apply makes
// without giving its lock up, and Forgets of servers with more blocks
// than a purge deletes in one step, leave the same view.
func TestIndexLongBatches(t *testing.T) {
	w := newIndexWorkload(11, 3)
	w.hashes = 5 * step
	ix, ref := &Index{}, newRefIndex(false)
	for op := range 40 {
		s := w.servers[w.rng.IntN(len(w.servers))]
		if op%9 == 8 {
			ix.Forget(s)
			delete(ref.servers, s)
		} else {
			b := w.batch(true)
			ix.Apply(s, b)
			ref.apply(s, b)
		}
		for _, s := range w.servers {
			require.Equal(t, len(ref.servers[s]), ix.Len(s), "op %d: Len(%s)", op, s)
		}
		hs := w.hashList(3)
		require.Equal(t, ref.score(hs, nil), ix.Score(nil, hs, nil), "op %d", op)
	}
	w.hashes = 40 // requireSameIndex checks Media over the first hashes
	requireSameIndex(t, w, ix, ref, "end")
}

// TestIndexConcurrentUse: writers apply long and short batches to their
// own servers, one of them Forgets and rebuilds its server over and over,
// while readers Score, Match and list the Index. Every Score a reader
// sees is well formed (each server once, best first, prefixes within the
// prompt), and the end state is each server's batches applied alone.
// Run it with -race.
func TestIndexConcurrentUse(t *testing.T) {
	const writers, readers = 3, 3
	ix := &Index{}
	refs := make([]*refIndex, writers)
	var wg sync.WaitGroup
	done := make(chan struct{})
	for i := range writers {
		refs[i] = newRefIndex(false)
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := newIndexWorkload(uint64(100+i), 1)
			w.hashes = 3 * step
			s := fmt.Sprintf("w%d", i)
			for op := range 60 {
				if i == 0 && op%10 == 9 {
					ix.Forget(s)
					delete(refs[i].servers, s)
					continue
				}
				b := w.batch(op%5 == 0)
				ix.Apply(s, b)
				refs[i].apply(s, b)
			}
		}()
	}
	var rg sync.WaitGroup
	for i := range readers {
		rg.Add(1)
		go func() {
			defer rg.Done()
			w := newIndexWorkload(uint64(200+i), 1)
			w.hashes = 3 * step
			var dst []Score
			for n := 0; ; n++ {
				select {
				case <-done:
					return
				default:
				}
				hs := w.hashList(1 + w.rng.IntN(20))
				dst = ix.Score(dst[:0], hs, Weights{MediumGPU: 1, MediumCPU: 0.5})
				seen := map[string]bool{}
				for k, sc := range dst {
					if seen[sc.Server] || sc.Blocks > len(hs) || (k > 0 && compareScores(dst[k-1], sc) > 0) {
						t.Errorf("malformed score %v for %d hashes", dst, len(hs))
						return
					}
					seen[sc.Server] = true
				}
				_ = ix.Match("w1", hs)
				if n%50 == 0 {
					for range ix.Blocks("w2") {
					}
					_ = slices.Collect(ix.Servers())
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	rg.Wait()
	for i, ref := range refs {
		requireSameBlocks(t, ix, ref, fmt.Sprintf("w%d", i), "end")
	}
}

// requireSameBlocks compares server s's Len and Blocks in ix with ref's.
func requireSameBlocks(t *testing.T, ix *Index, ref *refIndex, s, msg string) {
	t.Helper()
	require.Equal(t, len(ref.servers[s]), ix.Len(s), "%s: Len(%s)", msg, s)
	got := map[uint64][]string{}
	for h, m := range ix.Blocks(s) {
		got[h] = m
	}
	want := ref.servers[s]
	if len(want) == 0 {
		want = map[uint64][]string{}
	}
	require.Equal(t, want, got, "%s: Blocks(%s)", msg, s)
}

// TestScoreOrder: the documented order, by Value, then Blocks, then name;
// a medium Weights does not name weighs 1; a block on two media counts
// its better one.
func TestScoreOrder(t *testing.T) {
	var ix Index
	p := uint64(1)
	ix.Apply("gpu", Batch{Events: []Event{BlockStored{BlockHashes: []uint64{1, 2}, Medium: MediumGPU}}})
	ix.Apply("cpu", Batch{Events: []Event{BlockStored{BlockHashes: []uint64{1, 2, 3}, Medium: MediumCPU}}})
	ix.Apply("both", Batch{Events: []Event{
		BlockStored{BlockHashes: []uint64{1}, Medium: MediumCPU},
		BlockStored{BlockHashes: []uint64{1}, Medium: MediumGPU},
		BlockStored{ParentBlockHash: &p, BlockHashes: []uint64{2}, Medium: "DISK"},
	}})
	ix.Apply("none", Batch{Events: []Event{BlockStored{BlockHashes: []uint64{9}, Medium: MediumGPU}}})
	ix.Apply("also-none", Batch{})
	got := ix.Score(nil, []uint64{1, 2, 3, 4}, Weights{MediumGPU: 1, MediumCPU: 0.5})
	require.Equal(t, []Score{
		{Server: "both", Blocks: 2, Value: 2}, // GPU (1) then DISK (unnamed: 1)
		{Server: "gpu", Blocks: 2, Value: 2},
		{Server: "cpu", Blocks: 3, Value: 1.5},
		{Server: "also-none"},
		{Server: "none"},
	}, got)
	// dst is appended to.
	got = ix.Score(got[:1], []uint64{9}, nil)
	require.Len(t, got, 6)
	require.Equal(t, Score{Server: "none", Blocks: 1, Value: 1}, got[1])
}
