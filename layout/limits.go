package layout

// The maxima below bound the geometry a Model may describe. Each is far
// above any published model (the largest have a few hundred layers, 128
// heads, head dimensions of a few hundred elements and 2-byte elements) and
// far below what would make the sizes derived from a Layout unusable: a
// consumer that allocates one entry per layer, per (KV layer, stored head)
// pair or per slice allocates at most 2^16 entries, and ids that pack a
// slice index need no more than 16 bits for it. Model.Validate and New
// reject a larger value with an error matching ErrInvalidModel that names
// the field, its value and the maximum.
const (
	// MaxLayers bounds Layers, and CLAFactor (a KV layer cannot serve more
	// layers than a model can have). PagedLayer makes one unit per KV layer,
	// so without CLA this is also MaxUnitsPerBlock.
	MaxLayers = 1 << 16
	// MaxHeads bounds QueryHeads and, since KVHeads divides it, KVHeads.
	MaxHeads = 1 << 16
	// MaxVectorDims bounds HeadDim and the MLA latent vector
	// (MLALatentDims + MLARopeDims): one stored vector has at most this
	// many elements.
	MaxVectorDims = 1 << 16
	// MaxElemBytes bounds ElemBytes: the widest scalar a KV cache stores is
	// a float64.
	MaxElemBytes = 8
	// MaxUnitsPerBlock bounds KVLayers × StoredHeads, the number of head
	// vectors (per component) that one token keeps across the model. BSA
	// makes one unit per KV layer and stored head, and the other kinds make
	// fewer, so every Layout of a valid Model has at most MaxUnitsPerBlock
	// units per token block, whatever its Kind: a slice index always fits
	// in 16 bits.
	MaxUnitsPerBlock = 1 << 16
)
