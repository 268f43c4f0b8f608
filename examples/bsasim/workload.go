package main

import (
	"math/rand/v2"

	"github.com/kvtier/kvtier/layout"
)

// workload is the block selections of every sequence, drawn once and read
// by every configuration, so that layouts, policies and sizes are compared
// on exactly the same attention pattern.
type workload struct {
	cfg          *config
	layers       int
	heads        int
	picksPerHead int       // topK-1: the current block is implicit
	seqs         [][]int32 // per sequence: [step][layer][head][pick], -1 = none
}

// newWorkload draws the selections. Sequence i uses its own random stream
// (seed, i), so adding sequences never changes the earlier ones.
func newWorkload(cfg *config, m layout.Model) (*workload, error) {
	w := &workload{cfg: cfg, layers: m.Layers, heads: m.QueryHeads, picksPerHead: cfg.topK - 1}
	stride := w.picksPerHead
	buf := make([]int32, 0, stride)
	for s := range cfg.sequences {
		rng := rand.New(rand.NewPCG(cfg.seed, uint64(s)))
		sel, err := newSelector(cfg, w.layers, w.heads, rng)
		if err != nil {
			return nil, err
		}
		picks := make([]int32, cfg.steps*w.layers*w.heads*stride)
		for t := range cfg.steps {
			cur := w.currentBlock(t)
			for l := range w.layers {
				for h := range w.heads {
					buf = sel.Pick(buf[:0], l, h, cur, stride)
					out := picks[((t*w.layers+l)*w.heads+h)*stride:][:stride]
					for i := range out {
						out[i] = -1
						if i < len(buf) {
							out[i] = buf[i]
						}
					}
				}
			}
		}
		w.seqs = append(w.seqs, picks)
	}
	return w, nil
}

// tokensAt is the sequence length during decode step t (0-based): the step
// appends one token to the prompt and the t tokens before it.
func (w *workload) tokensAt(t int) int { return w.cfg.prompt() + t + 1 }

// currentBlock is the MoBA block holding the newest token at step t.
func (w *workload) currentBlock(t int) int { return (w.tokensAt(t) - 1) / w.cfg.blockTokens }

// picks returns the earlier blocks head h of layer l picked at step t of
// sequence s (-1 entries mean none).
func (w *workload) picks(s, t, l, h int) []int32 {
	stride := w.picksPerHead
	return w.seqs[s][((t*w.layers+l)*w.heads+h)*stride:][:stride]
}

// unitBlocks appends to dst the cache blocks (the layout's units along the
// sequence) that MoBA block b covers in a sequence of n tokens: one for
// BSA, blockTokens/unitTokens pages for the paged layout, fewer for the
// current, partial block.
func unitBlocks(dst []int64, b, blockTokens, unitTokens, n int) []int64 {
	per := blockTokens / unitTokens
	first := b * per
	end := min(first+per, (n+unitTokens-1)/unitTokens)
	for u := first; u < end; u++ {
		dst = append(dst, int64(u))
	}
	return dst
}

// fillHeads fills, for step t of sequence s and layer l, the cache blocks each
// query head reads: its picks and the current block, expanded to units.
// The lists reuse the buffers in heads.
func (w *workload) fillHeads(heads [][]int64, s, t, l, unitTokens int) [][]int64 {
	n := w.tokensAt(t)
	cur := w.currentBlock(t)
	for h := range heads {
		dst := heads[h][:0]
		for _, b := range w.picks(s, t, l, h) {
			if b >= 0 {
				dst = unitBlocks(dst, int(b), w.cfg.blockTokens, unitTokens, n)
			}
		}
		heads[h] = unitBlocks(dst, cur, w.cfg.blockTokens, unitTokens, n)
	}
	return heads
}

// selection is step t of sequence s as a layout.Selection over MoBA
// blocks, for layout.Touched: an independent count of the units a step
// reads.
func (w *workload) selection(s, t int) layout.Selection {
	sel := layout.Selection{Tokens: int64(w.tokensAt(t)), BlockTokens: w.cfg.blockTokens, Blocks: make([][][]int64, w.layers)}
	cur := int64(w.currentBlock(t))
	for l := range w.layers {
		sel.Blocks[l] = make([][]int64, w.heads)
		for h := range w.heads {
			var bl []int64
			for _, b := range w.picks(s, t, l, h) {
				if b >= 0 {
					bl = append(bl, int64(b))
				}
			}
			sel.Blocks[l][h] = append(bl, cur)
		}
	}
	return sel
}
