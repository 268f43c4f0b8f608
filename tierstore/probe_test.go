package tierstore

import (
	"context"
	"math/bits"
	"math/rand/v2"
	"testing"

	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/layout"
)

// presenceStore answers Contains from a set of block depths (a block is
// present when its depth is), counting the calls and keys, and checking
// that it is asked about one unit per block, the first, and never about a
// block before from.
type presenceStore struct {
	t           *testing.T
	present     func(block int) bool
	from        int
	calls, keys int
	asked       map[int]bool
	MemStore    // the methods a probe does not call
}

func (s *presenceStore) Contains(_ context.Context, keys []kvcache.UnitKey) ([]bool, error) {
	s.calls++
	s.keys += len(keys)
	have := make([]bool, len(keys))
	for i, k := range keys {
		b := k.Depth - 1
		switch {
		case k.Slice != 0:
			s.t.Fatalf("asked about slice %d of block %d", k.Slice, b)
		case b < s.from:
			s.t.Fatalf("asked about block %d, before the first one to probe (%d)", b, s.from)
		case s.asked[b]:
			s.t.Fatalf("asked about block %d twice", b)
		}
		s.asked[b] = true
		have[i] = s.present(b)
	}
	return have, nil
}

// TestProbeFindsThePrefix checks probe against the answer it must give
// when what the store holds is a prefix: from random prompt lengths (1 to
// 4,000 blocks), first blocks to probe and prefix ends, it finds the end
// exactly, asking at most log2(n)+1 keys in its first round and 16 in each
// of at most log17(n)+1 more; when the store holds blocks with holes, it
// ends at a block that it found present and whose successor it found
// missing (or at the prompt's end).
func TestProbeFindsThePrefix(t *testing.T) {
	l, err := layout.New(layout.Model{Name: "p", Layers: 2, QueryHeads: 2, KVHeads: 1, HeadDim: 2, ElemBytes: 1}, layout.PagedLayer, 4)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kvcache.New(kvcache.Config{Layout: l, Tiers: kvcache.GPUAndCPU(kvcache.Capacity{Units: 8}, kvcache.Capacity{})})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := range 3000 {
		n := 1 + rng.IntN(4000)
		if trial%3 == 0 {
			n = 1 + rng.IntN(40)
		}
		tokens := make([]uint32, 4*n)
		for i := range tokens {
			tokens[i] = uint32(trial<<16 + i)
		}
		pk, err := c.PromptKeys(kvcache.Request{Tokens: tokens})
		if err != nil {
			t.Fatal(err)
		}
		from := rng.IntN(n)
		end := from + rng.IntN(n-from+1)
		holes := trial%4 == 3
		present := func(b int) bool { return b < end }
		if holes {
			hole := map[int]bool{}
			for range 1 + rng.IntN(5) {
				hole[rng.IntN(n)] = true
			}
			present = func(b int) bool { return b < end && !hole[b] }
		}
		s := &presenceStore{t: t, present: present, from: from, asked: map[int]bool{}}
		got, err := probe(context.Background(), s, &pk, from)
		if err != nil {
			t.Fatal(err)
		}
		if !holes && got != end {
			t.Fatalf("trial %d: %d blocks, probe from %d: found the prefix to end at %d, want %d", trial, n, from, got, end)
		}
		if got > from && (!s.asked[got-1] || !s.present(got-1)) {
			t.Fatalf("trial %d: probe ended at %d without finding block %d", trial, got, got-1)
		}
		if got < n && (!s.asked[got] || s.present(got)) {
			t.Fatalf("trial %d: probe ended at %d without finding block %d missing", trial, got, got)
		}
		span := n - from
		rounds := 1
		for w := 1; w < span; w *= probeWidth + 1 {
			rounds++
		}
		first := bits.Len(uint(span)) + 1
		if s.calls > rounds || s.keys > first+probeWidth*(rounds-1) {
			t.Fatalf("trial %d: %d blocks to probe took %d calls and %d keys (at most %d and %d)", trial, span, s.calls, s.keys, rounds, first+probeWidth*(rounds-1))
		}
	}
}
