package main

import (
	"fmt"

	"github.com/kvtier/kvtier/layout"
)

// report is everything layoutcalc prints; its JSON form is the -json output.
type report struct {
	Model         modelInfo  `json:"model"`
	BytesPerToken int64      `json:"bytes_per_token"`
	ContextTokens int64      `json:"context_tokens"`
	Kinds         []kindInfo `json:"unit_kinds"`
	WorstCase     worstCase  `json:"worst_case_step"`
}

type modelInfo struct {
	Name          string `json:"name"`
	Layers        int    `json:"layers"`
	KVLayers      int    `json:"kv_layers"`
	QueryHeads    int    `json:"query_heads"`
	KVHeads       int    `json:"kv_heads"`
	HeadDim       int    `json:"head_dim"`
	ElemBytes     int    `json:"elem_bytes"`
	MLALatentDims int    `json:"mla_latent_dims,omitempty"`
	MLARopeDims   int    `json:"mla_rope_dims,omitempty"`
	CLAFactor     int    `json:"cla_factor,omitempty"`
	Window        int    `json:"window,omitempty"`
}

// kindInfo describes one unit kind: its pools (one per window for a
// windowed model) and what the whole context occupies.
type kindInfo struct {
	Kind          string     `json:"kind"`
	TokensPerUnit int        `json:"tokens_per_unit"`
	UnitsPerBlock int        `json:"units_per_block"`
	Pools         []poolInfo `json:"pools"`
	ContextUnits  int64      `json:"context_units"`
	ContextBytes  int64      `json:"context_bytes"`
}

type poolInfo struct {
	UnitBytes     int64 `json:"unit_bytes"`
	Window        int   `json:"window"`
	UnitsPerBlock int   `json:"units_per_block"`
}

// worstCase is the most a MoBA decode step can read: every query head of
// every layer selects TopK blocks, the current one among them, and the
// heads pick disjoint earlier blocks as long as there are any.
type worstCase struct {
	SelectionBlockTokens int         `json:"selection_block_tokens"`
	TopK                 int         `json:"top_k"`
	Paged                stepTraffic `json:"paged"`
	BSA                  stepTraffic `json:"bsa"`
	PagedOverBSA         float64     `json:"paged_over_bsa"`
}

type stepTraffic struct {
	Kind          string `json:"kind"`
	TokensPerUnit int    `json:"tokens_per_unit"`
	Units         int64  `json:"units"`
	Bytes         int64  `json:"bytes"`
}

// buildReport computes the report for cfg through package layout.
func buildReport(cfg config) (report, error) {
	m := cfg.model
	if err := m.Validate(); err != nil {
		return report{}, err
	}
	if cfg.context < 1 {
		return report{}, fmt.Errorf("context %d must be at least 1 token", cfg.context)
	}
	perToken, err := m.BytesPerToken()
	if err != nil {
		return report{}, err
	}
	rep := report{
		Model: modelInfo{
			Name: m.Name, Layers: m.Layers, KVLayers: m.KVLayers(), QueryHeads: m.QueryHeads, KVHeads: m.KVHeads,
			HeadDim: m.HeadDim, ElemBytes: m.ElemBytes, MLALatentDims: m.MLALatentDims, MLARopeDims: m.MLARopeDims,
			CLAFactor: m.CLAFactor,
		},
		BytesPerToken: perToken,
		ContextTokens: cfg.context,
	}
	if len(m.Windows) > 0 {
		rep.Model.Window = m.Windows[0]
	}

	layouts := map[layout.Kind]*layout.Layout{}
	for _, kind := range layout.Kinds() {
		tokens := cfg.pageTokens
		if kind == layout.BSA {
			tokens = cfg.bsaTokens
		}
		l, err := layout.New(m, kind, tokens)
		if err != nil {
			return report{}, fmt.Errorf("%v: %w", kind, err)
		}
		layouts[kind] = l
		fp, err := l.Footprint(cfg.context)
		if err != nil {
			return report{}, fmt.Errorf("%v: %w", kind, err)
		}
		info := kindInfo{Kind: kind.String(), TokensPerUnit: tokens, UnitsPerBlock: l.UnitsPerBlock(),
			ContextUnits: fp.Units, ContextBytes: fp.Bytes}
		for _, p := range l.Pools() {
			info.Pools = append(info.Pools, poolInfo{UnitBytes: p.UnitBytes, Window: p.Window, UnitsPerBlock: p.UnitsPerBlock})
		}
		rep.Kinds = append(rep.Kinds, info)
	}

	sel, err := worstCaseSelection(m, cfg.context, cfg.bsaTokens, cfg.topK)
	if err != nil {
		return report{}, err
	}
	rep.WorstCase = worstCase{SelectionBlockTokens: cfg.bsaTokens, TopK: cfg.topK}
	for _, side := range []struct {
		kind layout.Kind
		out  *stepTraffic
	}{{layout.PagedLayer, &rep.WorstCase.Paged}, {layout.BSA, &rep.WorstCase.BSA}} {
		l := layouts[side.kind]
		u, err := l.Touched(sel)
		if err != nil {
			return report{}, fmt.Errorf("worst case on %v: %w", side.kind, err)
		}
		*side.out = stepTraffic{Kind: side.kind.String(), TokensPerUnit: l.TokensPerUnit(), Units: u.Units, Bytes: u.Bytes}
	}
	if rep.WorstCase.BSA.Bytes > 0 {
		rep.WorstCase.PagedOverBSA = float64(rep.WorstCase.Paged.Bytes) / float64(rep.WorstCase.BSA.Bytes)
	}
	return rep, nil
}

// maxSelectionEntries bounds the worst-case selection's size (layers ×
// query heads × top-k) so a typo cannot exhaust memory.
const maxSelectionEntries = 1 << 24

// worstCaseSelection builds the MoBA selection that reads the most units:
// every query head of every layer picks the current (last) block plus
// topK-1 earlier ones, spread round-robin so that no two heads share an
// earlier block until all are taken. Consecutive heads, which form a GQA
// group, then pick disjoint blocks too, so the union is as large as
// possible both over all heads (paged) and per KV head (BSA).
func worstCaseSelection(m layout.Model, tokens int64, blockTokens, topK int) (layout.Selection, error) {
	if topK < 1 {
		return layout.Selection{}, fmt.Errorf("top-k %d must be at least 1", topK)
	}
	if blockTokens < 1 {
		return layout.Selection{}, fmt.Errorf("selection block %d must be at least 1 token", blockTokens)
	}
	if int64(m.Layers)*int64(m.QueryHeads) > maxSelectionEntries/int64(topK) {
		return layout.Selection{}, fmt.Errorf("selection of %d layers × %d heads × top-%d is too large", m.Layers, m.QueryHeads, topK)
	}
	numBlocks := (tokens-1)/int64(blockTokens) + 1
	current := numBlocks - 1
	others := min(int64(topK-1), current)
	sel := layout.Selection{Tokens: tokens, BlockTokens: blockTokens, Blocks: make([][][]int64, m.Layers)}
	for layer := range sel.Blocks {
		heads := make([][]int64, m.QueryHeads)
		for q := range heads {
			picks := make([]int64, 0, others+1)
			picks = append(picks, current)
			for j := range others {
				picks = append(picks, (int64(q)*others+j)%current)
			}
			heads[q] = picks
		}
		sel.Blocks[layer] = heads
	}
	return sel, nil
}
