package main

import (
	"errors"
	"math/rand/v2"
	"slices"

	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/layout"
)

const (
	blockTokens = 16 // tokens per token block
	systems     = 6  // distinct system prompts
	systemLen   = 4 * blockTokens
	maxLive     = 4  // sequences decoding at once
	maxHistory  = 64 // conversations that may get a next turn
	maxPrompt   = 10 * blockTokens
)

// newCache returns a small cache: a 4-layer toy model, one unit per layer
// and block, a GPU of 256 units (64 blocks: enough for maxLive+1 sequences
// of the longest prompt and answer) and a CPU of 1024 units.
func newCache() (*kvcache.Cache, error) {
	l, err := layout.New(layout.Model{Name: "toy", Layers: 4, QueryHeads: 8, KVHeads: 2, HeadDim: 16, ElemBytes: 2}, layout.PagedLayer, blockTokens)
	if err != nil {
		return nil, err
	}
	return kvcache.New(kvcache.Config{
		Layout:      l,
		Tiers:       kvcache.GPUAndCPU(kvcache.Capacity{Units: 256}, kvcache.Capacity{Units: 1024}),
		EventBuffer: 256, // undrained: its depth and drops show in the metrics
	})
}

// workload drives a cache the way a chat server would: each request starts
// with one of a few system prompts, and about a third of them continue an
// earlier conversation, whose history the cache may still hold on the GPU
// or on the CPU. A few sequences are live at once.
type workload struct {
	c       *kvcache.Cache
	rng     *rand.Rand
	systems [][]uint32
	history [][]uint32 // prompts plus answers of recent conversations
	live    []kvcache.SeqID
	next    uint32 // next fresh token
}

func newWorkload(c *kvcache.Cache, seed uint64) *workload {
	w := &workload{c: c, rng: rand.New(rand.NewPCG(seed, seed)), next: 1}
	for range systems {
		w.systems = append(w.systems, w.fresh(systemLen))
	}
	return w
}

// fresh returns n tokens not used before.
func (w *workload) fresh(n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = w.next
		w.next++
	}
	return out
}

// round serves n requests. The last maxLive sequences stay live, decoding,
// into the next round.
func (w *workload) round(n int) error {
	for range n {
		if err := w.request(); err != nil {
			return err
		}
	}
	return nil
}

// request serves one request: prefill, a few decode steps, and the release
// of the oldest live sequence once maxLive are live.
func (w *workload) request() error {
	var prompt []uint32
	if len(w.history) > 0 && w.rng.IntN(3) == 0 {
		i := w.rng.IntN(len(w.history))
		prompt = slices.Concat(w.history[i], w.fresh(8+w.rng.IntN(40)))
		w.history = slices.Delete(w.history, i, i+1)
		if len(prompt) > maxPrompt { // a long conversation starts over
			prompt = slices.Concat(w.systems[w.rng.IntN(systems)], prompt[len(prompt)-blockTokens:])
		}
	} else {
		prompt = slices.Concat(w.systems[w.rng.IntN(systems)], w.fresh(8+w.rng.IntN(72)))
	}
	plan, err := w.c.Acquire(kvcache.Request{Tokens: prompt})
	if errors.Is(err, kvcache.ErrNoSpace) { // the live sequences pin the GPU
		if err := w.releaseAll(); err != nil {
			return err
		}
		plan, err = w.c.Acquire(kvcache.Request{Tokens: prompt})
	}
	if err != nil {
		return err
	}
	answer := w.fresh(4 + w.rng.IntN(24))
	if plan, err = w.c.Append(plan.Seq, answer...); err != nil {
		return err
	}
	if err := w.c.Commit(plan.Seq, plan.Tokens); err != nil {
		return err
	}
	if len(w.history) == maxHistory {
		w.history = slices.Delete(w.history, 0, 1)
	}
	w.history = append(w.history, slices.Concat(prompt, answer))
	w.live = append(w.live, plan.Seq)
	if len(w.live) > maxLive {
		if err := w.c.Release(w.live[0]); err != nil {
			return err
		}
		w.live = slices.Delete(w.live, 0, 1)
	}
	return nil
}

// releaseAll releases every live sequence.
func (w *workload) releaseAll() error {
	for _, id := range w.live {
		if err := w.c.Release(id); err != nil {
			return err
		}
	}
	w.live = w.live[:0]
	return nil
}
