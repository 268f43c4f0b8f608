package kvevents_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/kvevents"
	"github.com/kvtier/kvtier/layout"
	"github.com/kvtier/kvtier/radix"
	"github.com/stretchr/testify/require"
)

// reachable returns the blocks of c a router can use, with their media:
// those that hold bytes and whose ancestors all do, computed here from
// Cache.Blocks by a plain walk up every chain; Translator.Reachable must
// say the same.
func reachable(t *testing.T, c *kvcache.Cache, tr *kvevents.Translator) map[uint64]string {
	t.Helper()
	blocks, err := c.Blocks(nil)
	require.NoError(t, err)
	byHash := make(map[uint64]kvcache.CachedBlock, len(blocks))
	for _, b := range blocks {
		byHash[b.Hash] = b
	}
	out := map[uint64]string{}
	for _, b := range blocks {
		ok := true
		for x := b; ok; {
			if x.Medium == kvcache.Dropped {
				ok = false
			} else if !x.HasParent {
				break
			} else {
				x, ok = byHash[x.ParentHash]
			}
		}
		if ok {
			out[b.Hash] = tr.Medium(b.Medium)
		}
	}
	fast, err := tr.Reachable(c)
	require.NoError(t, err)
	require.Equal(t, out, fast, "Translator.Reachable")
	return out
}

// requireView checks that server's view in ix is exactly want.
func requireView(t *testing.T, ix *kvevents.Index, server string, want map[uint64]string, msg string) {
	t.Helper()
	for h, m := range want {
		require.Equal(t, []string{m}, ix.Media(server, h), "%s: block %x", msg, h)
	}
	require.Equal(t, len(want), ix.Len(server), "%s: blocks in the view", msg)
}

// newTieredCache returns a cache over a GPU, a CPU and a disk tier, small
// enough that a random workload moves blocks across all of them, with a
// policy on the disk that strands children (see firstChunkPolicy).
func newTieredCache(t testing.TB) *kvcache.Cache {
	l, err := layout.New(layout.Model{Name: "tiny", Layers: 2, QueryHeads: 4, KVHeads: 2, HeadDim: 2, ElemBytes: 1}, layout.PagedLayer, 4)
	require.NoError(t, err)
	tiers := []kvcache.TierConfig{{Capacity: kvcache.Capacity{Units: 24}}, {Capacity: kvcache.Capacity{Units: 16}},
		{Name: "disk", Capacity: kvcache.Capacity{Units: 16}, Policy: func(kvcache.PoolInfo) (eviction.Policy[kvcache.UnitID], error) {
			return &firstChunkPolicy{}, nil
		}}}
	c, err := kvcache.New(kvcache.Config{Layout: l, Tiers: tiers, EventBuffer: 1 << 16})
	require.NoError(t, err)
	return c
}

// randomRequest returns a prompt of 1-5 blocks of 4 tokens from one of 8
// prefixes, under one of two LoRAs, sometimes with an extra key.
func randomRequest(rng *rand.Rand) kvcache.Request {
	base := uint32(rng.IntN(8)) * 100
	prompt := make([]uint32, 4*(1+rng.IntN(5)))
	for i := range prompt {
		prompt[i] = base + uint32(i)
	}
	req := kvcache.Request{Tokens: prompt, LoRA: []string{"", "sql"}[rng.IntN(2)]}
	if rng.IntN(4) == 0 {
		req.Extra = []radix.ExtraKey{{Pos: 1, Value: 77}}
	}
	return req
}

// serve runs req through c as a server would (acquire, compute, commit,
// release) and returns its plan.
func serve(t testing.TB, c *kvcache.Cache, req kvcache.Request) kvcache.Plan {
	plan, err := c.Acquire(req)
	require.NoError(t, err)
	require.NoError(t, c.Commit(plan.Seq, len(req.Tokens)))
	require.NoError(t, c.Release(plan.Seq))
	return plan
}

// TestTranslatorRebuildsTheCache: a random workload over a GPU, a CPU and
// a disk tier; after every operation the view a strict router rebuilds
// from the translated events alone (one that drops a BlockStored whose
// parent it does not hold) holds exactly the cache's reachable blocks, on
// their media, no event names a parent the router lacks or removes a
// block from where it is not, and the batch encodes and decodes.
func TestTranslatorRebuildsTheCache(t *testing.T) {
	c := newTieredCache(t)
	tr := kvevents.NewTranslator(c)
	require.Equal(t, "GPU", tr.Medium(kvcache.GPU))
	require.Equal(t, "DISK", tr.Medium(3))
	require.Equal(t, "", tr.Medium(4))
	enc, err := kvevents.NewEncoder(kvevents.EncoderOptions{})
	require.NoError(t, err)

	seen := map[string]int{}
	view := kvevents.Index{DropOrphans: true}
	rng := rand.New(rand.NewPCG(1, 2))
	var buf []kvcache.Event
	unreachable, reannounced := 0, 0
	stranded := map[uint64]bool{}
	for step := range 600 {
		if step == 300 {
			require.NoError(t, c.Clear())
		} else {
			serve(t, c, randomRequest(rng))
		}
		var dropped uint64
		buf, dropped, err = c.TakeEvents(buf[:0])
		require.NoError(t, err)
		require.Zero(t, dropped)
		out := tr.Append(nil, buf)
		payload, err := enc.Encode(kvevents.Batch{Timestamp: float64(step), Events: out})
		require.NoError(t, err)
		batch, err := kvevents.Decode(payload)
		require.NoError(t, err)
		view.Apply("s", batch)
		require.Zero(t, view.Orphans(), "step %d: a BlockStored whose parent the router lacks", step)
		require.Zero(t, view.Strays(), "step %d: a removal from where the router did not hold the block", step)
		want := reachable(t, c, tr)
		requireView(t, &view, "s", want, fmt.Sprint("step ", step))
		blocks, err := c.Blocks(nil)
		require.NoError(t, err)
		for h := range stranded {
			if _, ok := want[h]; ok {
				reannounced++ // held while its parent was gone, and now reachable
			}
		}
		clear(stranded)
		for _, b := range blocks {
			if _, ok := want[b.Hash]; !ok && b.Medium != kvcache.Dropped {
				unreachable++
				stranded[b.Hash] = true
			}
		}
		for _, e := range out {
			switch e := e.(type) {
			case kvevents.BlockStored:
				require.Len(t, e.TokenIDs, len(e.BlockHashes)*e.BlockSize)
				seen["stored on "+e.Medium]++
				if len(e.BlockHashes) > 1 {
					seen["run"]++
				}
				if e.ExtraKeys != nil {
					seen["extra keys"]++
				}
			case kvevents.BlockRemoved:
				seen["removed from "+e.Medium]++
			case kvevents.AllBlocksCleared:
				seen["cleared"]++
			}
		}
	}
	require.Positive(t, view.Len("s"))
	require.Positive(t, unreachable, "no block ever held bytes under a parent without: the retraction path is untested")
	require.Positive(t, reannounced, "no stranded block became reachable again: the re-announcement path is untested")
	for _, k := range []string{"stored on GPU", "stored on CPU", "stored on DISK", "removed from GPU", "removed from CPU", "removed from DISK", "run", "cleared", "extra keys"} {
		require.Positive(t, seen[k], "%q never happened: %v", k, seen)
	}
	t.Logf("events %v; block-steps held but unreachable %d, stranded blocks reachable again %d", seen, unreachable, reannounced)
}

// firstChunkPolicy evicts the unpinned unit of the earliest block of its
// sequence (the lowest Entry.Chunk), a parent before its children: a
// policy free to evict any unit may do that.
type firstChunkPolicy struct {
	chunk  map[kvcache.UnitID]int
	pinned map[kvcache.UnitID]bool
}

func (p *firstChunkPolicy) Insert(u kvcache.UnitID, e eviction.Entry) error {
	if p.chunk == nil {
		p.chunk, p.pinned = map[kvcache.UnitID]int{}, map[kvcache.UnitID]bool{}
	}
	p.chunk[u] = e.Chunk
	return nil
}
func (p *firstChunkPolicy) Access(kvcache.UnitID)   {}
func (p *firstChunkPolicy) Pin(u kvcache.UnitID)    { p.pinned[u] = true }
func (p *firstChunkPolicy) Unpin(u kvcache.UnitID)  { delete(p.pinned, u) }
func (p *firstChunkPolicy) Remove(u kvcache.UnitID) { delete(p.chunk, u); delete(p.pinned, u) }
func (p *firstChunkPolicy) Len() int                { return len(p.chunk) - len(p.pinned) }
func (p *firstChunkPolicy) Evict() (kvcache.UnitID, bool) {
	best, ok := kvcache.UnitID(0), false
	for u, c := range p.chunk {
		if !p.pinned[u] && (!ok || c < p.chunk[best] || c == p.chunk[best] && u < best) {
			best, ok = u, true
		}
	}
	if ok {
		p.Remove(best)
	}
	return best, ok
}

// TestTranslatorStrandedChild: a parent evicted before its child
// strands the child: the router is told to
// remove both; when the parent is computed again, both are announced
// again, the parent first.
func TestTranslatorStrandedChild(t *testing.T) {
	l, err := layout.New(layout.Model{Name: "tiny", Layers: 1, QueryHeads: 1, KVHeads: 1, HeadDim: 2, ElemBytes: 1}, layout.PagedLayer, 4)
	require.NoError(t, err)
	firstChunk := func(kvcache.PoolInfo) (eviction.Policy[kvcache.UnitID], error) { return &firstChunkPolicy{}, nil }
	c, err := kvcache.New(kvcache.Config{Layout: l, EventBuffer: 1 << 10,
		Tiers: []kvcache.TierConfig{{Capacity: kvcache.Capacity{Units: 2}, Policy: firstChunk}}})
	require.NoError(t, err)
	tr := kvevents.NewTranslator(c)
	view := kvevents.Index{DropOrphans: true}
	serve := func(tokens ...uint32) []kvevents.Event {
		plan, err := c.Acquire(kvcache.Request{Tokens: tokens})
		require.NoError(t, err)
		require.NoError(t, c.Commit(plan.Seq, len(tokens)))
		require.NoError(t, c.Release(plan.Seq))
		evs, _, err := c.TakeEvents(nil)
		require.NoError(t, err)
		out := tr.Append(nil, evs)
		view.Apply("s", kvevents.Batch{Events: out})
		require.Zero(t, view.Orphans())
		require.Zero(t, view.Strays())
		requireView(t, &view, "s", reachable(t, c, tr), "after a request")
		return out
	}
	a := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	out := serve(a...)
	require.Len(t, out, 1)
	run := out[0].(kvevents.BlockStored)
	require.Len(t, run.BlockHashes, 2)
	parent, child := run.BlockHashes[0], run.BlockHashes[1]

	// A new block needs a slot of the two: the policy evicts the
	// parent's unit.
	out = serve(9, 10, 11, 12)
	blocks, err := c.Blocks(nil)
	require.NoError(t, err)
	media := map[uint64]kvcache.Tier{}
	for _, b := range blocks {
		media[b.Hash] = b.Medium
	}
	require.Equal(t, kvcache.Dropped, media[parent], "the parent was evicted")
	require.Equal(t, kvcache.GPU, media[child], "the child kept its bytes")
	require.Equal(t, []kvevents.Event{
		kvevents.BlockRemoved{BlockHashes: []uint64{child}, Medium: "GPU"},
		kvevents.BlockRemoved{BlockHashes: []uint64{parent}, Medium: "GPU"},
	}, out[:2], "the child is retracted before its parent")
	require.Nil(t, view.Media("s", child))

	// The first block again: the parent is recomputed, the child is
	// reachable again and announced after it, in one run.
	out = serve(1, 2, 3, 4)
	require.Equal(t, kvevents.BlockStored{BlockHashes: []uint64{parent, child}, TokenIDs: a, BlockSize: 4, Medium: "GPU"}, out[len(out)-1])
	require.Equal(t, []string{"GPU"}, view.Media("s", child))
}
