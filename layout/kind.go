package layout

import "fmt"

// Kind says how a Layout cuts the KV of a token block into units. The zero
// Kind is invalid.
type Kind int

const (
	// AllLayers keeps every KV layer of a token block in one unit, as
	// TensorRT-LLM does. The unit is shaped [layer][K,V][kv_head][token][dim]
	// (head-major inside a layer, like TensorRT-LLM's block). KV layers with
	// different windows get different units, one per window, the way
	// TensorRT-LLM keeps one pool per window size.
	AllLayers Kind = iota + 1
	// PagedLayer keeps one unit per KV layer, shaped
	// [token][K,V][kv_head][dim] (a page).
	PagedLayer
	// BSA keeps one unit per KV layer and KV head, shaped [token][K,V][dim]
	// (a block of block-sparse attention such as MoBA).
	BSA
)

// Kinds returns every valid Kind in declaration order.
func Kinds() []Kind { return []Kind{AllLayers, PagedLayer, BSA} }

// String returns "all-layers", "paged-layer", "bsa", or "Kind(n)" for an
// invalid value.
func (k Kind) String() string {
	switch k {
	case AllLayers:
		return "all-layers"
	case PagedLayer:
		return "paged-layer"
	case BSA:
		return "bsa"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

func (k Kind) valid() bool { return k >= AllLayers && k <= BSA }
