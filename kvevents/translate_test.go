package kvevents_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/kvevents"
	"github.com/kvtier/kvtier/layout"
	"github.com/kvtier/kvtier/radix"
	"github.com/stretchr/testify/require"
)

// index is a router's view built from vLLM events alone: the media each
// block hash is stored on.
type index map[uint64]map[string]bool

func (ix index) apply(t *testing.T, evs []kvevents.Event) {
	for _, e := range evs {
		switch e := e.(type) {
		case kvevents.BlockStored:
			require.Len(t, e.TokenIDs, len(e.BlockHashes)*e.BlockSize)
			for _, h := range e.BlockHashes {
				if ix[h] == nil {
					ix[h] = map[string]bool{}
				}
				ix[h][e.Medium] = true
			}
		case kvevents.BlockRemoved:
			for _, h := range e.BlockHashes {
				require.True(t, ix[h][e.Medium], "block %x removed from %s where it was not stored", h, e.Medium)
				delete(ix[h], e.Medium)
				if len(ix[h]) == 0 {
					delete(ix, h)
				}
			}
		case kvevents.AllBlocksCleared:
			clear(ix)
		}
	}
}

// TestTranslatorRebuildsTheCache: a random workload over a GPU, a CPU and
// a disk tier; after every operation the view rebuilt from the translated
// events alone says, for every block, exactly the medium its units say
// (from the unit-level events), and the batch encodes.
func TestTranslatorRebuildsTheCache(t *testing.T) {
	l, err := layout.New(layout.Model{Name: "tiny", Layers: 2, QueryHeads: 4, KVHeads: 2, HeadDim: 2, ElemBytes: 1}, layout.PagedLayer, 4)
	require.NoError(t, err)
	tiers := []kvcache.TierConfig{{Capacity: kvcache.Capacity{Units: 24}}, {Capacity: kvcache.Capacity{Units: 16}},
		{Name: "disk", Capacity: kvcache.Capacity{Units: 16}}}
	c, err := kvcache.New(kvcache.Config{Layout: l, Tiers: tiers, EventBuffer: 1 << 16})
	require.NoError(t, err)
	tr := kvevents.NewTranslator(c)
	require.Equal(t, "GPU", tr.Medium(kvcache.GPU))
	require.Equal(t, "DISK", tr.Medium(3))
	enc, err := kvevents.NewEncoder(kvevents.EncoderOptions{})
	require.NoError(t, err)

	units := map[uint64][]kvcache.Tier{} // per block, from UnitMoved
	seen := map[string]int{}
	ix := index{}
	rng := rand.New(rand.NewPCG(1, 2))
	var buf []kvcache.Event
	for step := range 400 {
		base := uint32(rng.IntN(8)) * 100
		prompt := make([]uint32, 4*(1+rng.IntN(5)))
		for i := range prompt {
			prompt[i] = base + uint32(i)
		}
		req := kvcache.Request{Tokens: prompt, LoRA: []string{"", "sql"}[rng.IntN(2)]}
		if rng.IntN(4) == 0 {
			req.Extra = []radix.ExtraKey{{Pos: 1, Value: 77}}
		}
		switch {
		case step == 200:
			require.NoError(t, c.Clear())
		default:
			plan, err := c.Acquire(req)
			require.NoError(t, err)
			require.NoError(t, c.Commit(plan.Seq, len(prompt)))
			require.NoError(t, c.Release(plan.Seq))
		}
		var dropped uint64
		buf, dropped, err = c.TakeEvents(buf[:0])
		require.NoError(t, err)
		require.Zero(t, dropped)
		for _, e := range buf {
			switch e.Kind {
			case kvcache.BlockStored:
				units[e.Hash] = make([]kvcache.Tier, l.UnitsPerBlock())
				for i := range units[e.Hash] {
					units[e.Hash][i] = e.To
				}
			case kvcache.UnitMoved:
				units[e.Hash][e.Slice] = e.To
			case kvcache.BlockRemoved:
				delete(units, e.Hash)
			case kvcache.AllCleared:
				clear(units)
			}
		}
		out := tr.Append(nil, buf)
		_, err = enc.Encode(kvevents.Batch{Timestamp: float64(step), Events: out})
		require.NoError(t, err)
		ix.apply(t, out)
		for _, e := range out {
			switch e := e.(type) {
			case kvevents.BlockStored:
				seen["stored on "+e.Medium]++
				if len(e.BlockHashes) > 1 {
					seen["run"]++
				}
			case kvevents.BlockRemoved:
				seen["removed from "+e.Medium]++
			case kvevents.AllBlocksCleared:
				seen["cleared"]++
			}
		}
		for h, us := range units {
			m := kvcache.Medium(us)
			if m == kvcache.Dropped {
				require.Empty(t, ix[h], "step %d: block %x has a dropped unit", step, h)
				continue
			}
			require.Equal(t, map[string]bool{tr.Medium(m): true}, ix[h], "step %d: block %x", step, h)
		}
		for h := range ix {
			_, known := units[h]
			require.True(t, known, "step %d: the view holds block %x the cache forgot", step, h)
		}
	}
	require.NotEmpty(t, ix, fmt.Sprint("blocks at the end: ", len(units)))
	for _, k := range []string{"stored on GPU", "stored on CPU", "stored on DISK", "removed from GPU", "removed from CPU", "removed from DISK", "run", "cleared"} {
		require.Positive(t, seen[k], "%q never happened: %v", k, seen)
	}
}
