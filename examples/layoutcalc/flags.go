package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/kvtier/kvtier/layout"
)

// config is what one report is computed from.
type config struct {
	model      layout.Model
	pageTokens int   // tokens per page (PagedLayer) and per AllLayers block
	bsaTokens  int   // tokens per BSA block, also the MoBA selection block
	context    int64 // sequence length at the decode step
	topK       int   // blocks each query head selects, the current one included
}

// maxLayers bounds the per-layer window list -window builds, so that a typo
// in -layers cannot exhaust memory.
const maxLayers = 1 << 20

// presetNames lists -preset names to models.
var presetNames = []string{"seed", "llama2-13b", "deepseek-v2", "llama3.1-405b"}

func preset(name string) (layout.Model, error) {
	switch name {
	case "seed":
		return layout.SeedModel(), nil
	case "llama2-13b":
		return layout.Llama2_13B(), nil
	case "deepseek-v2":
		return layout.DeepSeekV2(), nil
	case "llama3.1-405b":
		return layout.Llama31_405B(), nil
	}
	return layout.Model{}, fmt.Errorf("unknown preset %q (want one of %s)", name, strings.Join(presetNames, ", "))
}

// parseFlags reads the command line. Geometry flags start from the preset
// and replace only the fields given explicitly, so "-preset llama2-13b
// -kvheads 8" is Llama-2-13B with GQA.
func parseFlags(args []string, stderr io.Writer) (config, bool, error) {
	fs := flag.NewFlagSet("layoutcalc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	presetName := fs.String("preset", "seed", "base model: "+strings.Join(presetNames, ", "))
	name := fs.String("name", "", "model name in the report")
	layers := fs.Int("layers", 0, "attention layers")
	qHeads := fs.Int("qheads", 0, "query heads per layer")
	kvHeads := fs.Int("kvheads", 0, "KV heads per layer")
	headDim := fs.Int("headdim", 0, "head dimension")
	elem := fs.Int("elem", 0, "bytes per element (2 = fp16/bf16, 1 = fp8)")
	mlaLatent := fs.Int("mla-latent", 0, "MLA latent dims (kv_lora_rank); 0 = no MLA")
	mlaRope := fs.Int("mla-rope", 0, "MLA decoupled RoPE dims")
	cla := fs.Int("cla", 0, "cross-layer attention: layers sharing one KV (0 or 1 = none)")
	window := fs.Int("window", 0, "sliding window of every layer, in tokens (0 = full attention)")
	page := fs.Int("page", 32, "tokens per page (paged-layer and all-layers units)")
	bsa := fs.Int("bsa", 512, "tokens per BSA block, also the MoBA selection block")
	context := fs.Int64("context", 4096, "context length in tokens at the decode step")
	topK := fs.Int("topk", 3, "blocks each query head selects, the current block included")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if err := fs.Parse(args); err != nil {
		return config{}, false, err
	}
	if fs.NArg() > 0 {
		return config{}, false, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	m, err := preset(*presetName)
	if err != nil {
		return config{}, false, err
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "name":
			m.Name = *name
		case "layers":
			m.Layers = *layers
		case "qheads":
			m.QueryHeads = *qHeads
		case "kvheads":
			m.KVHeads = *kvHeads
		case "headdim":
			m.HeadDim = *headDim
		case "elem":
			m.ElemBytes = *elem
		case "mla-latent":
			m.MLALatentDims = *mlaLatent
		case "mla-rope":
			m.MLARopeDims = *mlaRope
		case "cla":
			m.CLAFactor = *cla
		}
	})
	if *window != 0 && m.Layers > 0 {
		if m.Layers > maxLayers {
			return config{}, false, fmt.Errorf("-window supports at most %d layers, got %d", maxLayers, m.Layers)
		}
		m.Windows = slices.Repeat([]int{*window}, m.Layers) // a negative window is left for layout to report
	}
	return config{model: m, pageTokens: *page, bsaTokens: *bsa, context: *context, topK: *topK}, *asJSON, nil
}
