package main

import (
	"fmt"
	"sort"

	"github.com/kvtier/kvtier/costmodel"
	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/layout"
)

// modelSpec is a model the simulation knows: its KV geometry and its
// parameter count, from which the default recompute coefficients follow.
type modelSpec struct {
	model  layout.Model
	params float64
}

// models returns the models -model accepts. Both are Llama-2 (MHA, fp16),
// the family Pensieve evaluates; with per-layer pages every block has one
// unit per layer, so the seed's layer weight has units to act on.
func models() map[string]modelSpec {
	return map[string]modelSpec{
		"llama2-7b":  {model: layout.Model{Name: "Llama-2-7B", Layers: 32, QueryHeads: 32, KVHeads: 32, HeadDim: 128, ElemBytes: 2}, params: 6.74e9},
		"llama2-13b": {model: layout.Llama2_13B(), params: 13.0e9},
	}
}

// modelNames returns the names -model accepts, sorted.
func modelNames() []string {
	var n []string
	for k := range models() {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// coefficients returns the recompute coefficients of one block (Alpha per
// context token, Beta per block) for config c: the flags when set, else a
// FLOP count at c.FLOPS.
//
// They are assumptions, not measurements. A prefill of one block of B
// tokens costs about 2*params*B FLOPs in the linear layers (Beta), plus, in
// attention, 4*d*L FLOPs per query token per context token (QK^T and AV,
// d = query heads x head dim, over L layers), so Alpha = 4*d*L*B / FLOPS.
// The attention among the block's own tokens is left out.
func coefficients(c config) (alpha, beta float64) {
	m := models()[c.Model]
	b := float64(c.BlockTokens)
	alpha = 4 * float64(m.model.QueryHeads*m.model.HeadDim*m.model.Layers) * b / c.FLOPS
	beta = 2 * m.params * b / c.FLOPS
	if c.Alpha > 0 {
		alpha = c.Alpha
	}
	if c.Beta > 0 {
		beta = c.Beta
	}
	return alpha, beta
}

// costs prices a turn: prefill of the tokens a plan says to compute, and the
// copies back from the CPU it issued.
type costs struct {
	prefill   costmodel.Recompute // flat weights: a recompute rebuilds the whole block
	link      costmodel.Link
	block     int
	unitBytes []int64 // per pool
}

// newCosts builds the pricing of config c for layout l.
func newCosts(c config, l *layout.Layout) (costs, error) {
	alpha, beta := coefficients(c)
	p := costs{
		prefill: costmodel.Recompute{Alpha: alpha, Beta: beta, LayerWeight: costmodel.Flat, PositionWeight: costmodel.Flat},
		link:    costmodel.Link{BytesPerSecond: c.LinkGBps * 1e9},
		block:   l.TokensPerUnit(),
	}
	if err := p.prefill.Validate(); err != nil {
		return p, err
	}
	if err := p.link.Validate(); err != nil {
		return p, err
	}
	for _, pool := range l.Pools() {
		p.unitBytes = append(p.unitBytes, pool.UnitBytes)
	}
	return p, nil
}

// computeSeconds is the prefill time of the token ranges: each block's part
// of a range costs its share of Base(context before the block), so a whole
// block costs Alpha*start + Beta and a partial one proportionally less.
func (p costs) computeSeconds(ranges []kvcache.TokenRange) float64 {
	var s float64
	for _, r := range ranges {
		for t := r.Start; t < r.End; {
			start := t - t%p.block
			end := min(start+p.block, r.End)
			s += p.prefill.Base(int64(start)) * float64(end-t) / float64(p.block)
			t = end
		}
	}
	return s
}

// onboardBytes is the bytes a batch copies from the CPU to the GPU (the
// copies on the critical path of a request; offloads run behind it).
func (p costs) onboardBytes(batch []kvcache.Copy) int64 {
	var n int64
	for _, c := range batch {
		if c.From == kvcache.CPU && c.To == kvcache.GPU {
			n += p.unitBytes[c.Pool]
		}
	}
	return n
}

// onboardSeconds is the time to copy n bytes over the link.
func (p costs) onboardSeconds(n int64) (float64, error) {
	if n == 0 {
		return 0, nil
	}
	s, err := p.link.Seconds(n)
	if err != nil {
		return 0, fmt.Errorf("pricing %d onboard bytes: %w", n, err)
	}
	return s, nil
}
