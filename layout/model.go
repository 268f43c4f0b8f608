package layout

import "fmt"

// Model is the geometry of a transformer's KV cache.
//
// The zero Model is invalid (it has no layers); fill the fields or start from
// a preset such as SeedModel. Zero values of the optional fields mean "off":
// MLALatentDims 0 means no MLA, CLAFactor 0 (or 1) means no cross-layer
// sharing, a nil Windows means full attention in every layer. A Model is a
// plain value; Validate reports whether it is usable, and New validates it
// again and keeps its own copy of Windows.
type Model struct {
	// Name labels the model in reports; it does not affect any size.
	Name string
	// Layers is the number of attention layers.
	Layers int
	// QueryHeads is the number of query heads per layer.
	QueryHeads int
	// KVHeads is the number of K/V heads per layer: equal to QueryHeads for
	// MHA, 1 for MQA, a divisor of QueryHeads for GQA. Query head q reads KV
	// head q / (QueryHeads/KVHeads), the usual contiguous grouping. With MLA
	// it describes the decompressed attention and does not change the size.
	KVHeads int
	// HeadDim is the dimension of one K or V head vector. With MLA it
	// describes the decompressed attention and does not change the size.
	HeadDim int
	// ElemBytes is the size of one stored element: 2 for fp16/bf16, 1 for
	// fp8, 4 for fp32. Sub-byte formats are not modelled.
	ElemBytes int
	// MLALatentDims turns on multi-head latent attention when positive: each
	// token of each KV layer stores one latent vector of MLALatentDims +
	// MLARopeDims elements instead of a K and a V vector per KV head
	// (DeepSeek-V2: kv_lora_rank 512 + qk_rope_head_dim 64 = 576).
	MLALatentDims int
	// MLARopeDims is the decoupled rotary part stored next to the latent.
	// It must be 0 when MLALatentDims is 0.
	MLARopeDims int
	// CLAFactor is the number of consecutive layers that share one KV
	// (cross-layer attention). 0 and 1 mean no sharing. The model then has
	// ceil(Layers/CLAFactor) KV layers; KV layer k serves layers
	// k*CLAFactor up to min((k+1)*CLAFactor, Layers)-1.
	CLAFactor int
	// Windows holds one attention window per layer, in tokens: a
	// sliding-window layer reads (and a cache needs to keep) only the last
	// Windows[i] tokens; 0 means full attention. nil means full attention
	// everywhere; otherwise len(Windows) must equal Layers. Under CLA a KV
	// layer keeps the widest window of the layers it serves (full wins).
	Windows []int
}

// Validate reports whether m describes a usable geometry. It returns nil, or
// an error matching ErrInvalidModel (impossible geometry, or a size above
// its maximum: see MaxLayers, MaxHeads, MaxVectorDims, MaxElemBytes and
// MaxUnitsPerBlock) or ErrOverflow (the bytes of one token do not fit in an
// int64). Overflow is checked before the maxima, so a model whose sizes are
// both too large and overflowing reports ErrOverflow.
func (m Model) Validate() error {
	positive := []struct {
		name string
		v    int
	}{
		{"Layers", m.Layers},
		{"QueryHeads", m.QueryHeads},
		{"KVHeads", m.KVHeads},
		{"HeadDim", m.HeadDim},
		{"ElemBytes", m.ElemBytes},
	}
	for _, p := range positive {
		if p.v <= 0 {
			return fmt.Errorf("%w: %s %d must be positive", ErrInvalidModel, p.name, p.v)
		}
	}
	if m.QueryHeads%m.KVHeads != 0 {
		return fmt.Errorf("%w: QueryHeads %d is not a multiple of KVHeads %d", ErrInvalidModel, m.QueryHeads, m.KVHeads)
	}
	if m.MLALatentDims < 0 || m.MLARopeDims < 0 {
		return fmt.Errorf("%w: MLA dims (latent %d, rope %d) must not be negative", ErrInvalidModel, m.MLALatentDims, m.MLARopeDims)
	}
	if m.MLALatentDims == 0 && m.MLARopeDims != 0 {
		return fmt.Errorf("%w: MLARopeDims %d needs a positive MLALatentDims", ErrInvalidModel, m.MLARopeDims)
	}
	if m.CLAFactor < 0 {
		return fmt.Errorf("%w: CLAFactor %d must not be negative", ErrInvalidModel, m.CLAFactor)
	}
	if m.Windows != nil && len(m.Windows) != m.Layers {
		return fmt.Errorf("%w: %d windows for %d layers", ErrInvalidModel, len(m.Windows), m.Layers)
	}
	for i, w := range m.Windows {
		if w < 0 {
			return fmt.Errorf("%w: window %d of layer %d must not be negative", ErrInvalidModel, w, i)
		}
	}
	if _, ok := add64(int64(m.MLALatentDims), int64(m.MLARopeDims)); !ok {
		return fmt.Errorf("%w: MLA dims %d + %d", ErrOverflow, m.MLALatentDims, m.MLARopeDims)
	}
	if _, err := m.BytesPerToken(); err != nil {
		return err
	}
	return m.checkMaxima()
}

// checkMaxima reports the first size of m above its maximum. It runs after
// the other checks of Validate, so every size is positive and the sums and
// products below cannot overflow.
func (m Model) checkMaxima() error {
	for _, p := range [...]struct {
		name, maxName string
		v, max        int
	}{
		{"Layers", "MaxLayers", m.Layers, MaxLayers},
		{"QueryHeads", "MaxHeads", m.QueryHeads, MaxHeads}, // KVHeads divides QueryHeads, so it is bounded too
		{"HeadDim", "MaxVectorDims", m.HeadDim, MaxVectorDims},
		{"ElemBytes", "MaxElemBytes", m.ElemBytes, MaxElemBytes},
		{"CLAFactor", "MaxLayers", m.CLAFactor, MaxLayers},
	} {
		if p.v > p.max {
			return fmt.Errorf("%w: %s %d exceeds %s %d", ErrInvalidModel, p.name, p.v, p.maxName, p.max)
		}
	}
	// In int64: the sum, like the product below (up to 2^32), may not fit
	// an int on a 32-bit platform.
	if int64(m.MLALatentDims)+int64(m.MLARopeDims) > MaxVectorDims {
		return fmt.Errorf("%w: MLA dims %d + %d exceed MaxVectorDims %d", ErrInvalidModel, m.MLALatentDims, m.MLARopeDims, MaxVectorDims)
	}
	if n := int64(m.KVLayers()) * int64(m.StoredHeads()); n > MaxUnitsPerBlock {
		return fmt.Errorf("%w: %d KV layers × %d stored heads = %d exceeds MaxUnitsPerBlock %d",
			ErrInvalidModel, m.KVLayers(), m.StoredHeads(), n, MaxUnitsPerBlock)
	}
	return nil
}

// IsMLA reports whether m uses multi-head latent attention.
func (m Model) IsMLA() bool { return m.MLALatentDims > 0 }

// claFactor is CLAFactor with the zero value meaning "no sharing".
func (m Model) claFactor() int {
	if m.CLAFactor <= 1 {
		return 1
	}
	return m.CLAFactor
}

// KVLayers returns the number of layers that store KV: ceil(Layers /
// CLAFactor), or Layers without CLA. It returns 0 when Layers is not
// positive.
func (m Model) KVLayers() int {
	if m.Layers <= 0 {
		return 0
	}
	return int(ceilDiv(int64(m.Layers), int64(m.claFactor())))
}

// StoredHeads returns the number of head vectors stored per token and KV
// layer for each of K and V: KVHeads, or 1 under MLA (the latent is shared
// by every head).
func (m Model) StoredHeads() int {
	if m.IsMLA() {
		return 1
	}
	return m.KVHeads
}

// Components returns how many vectors each stored head keeps per token: 2
// (K and V), or 1 under MLA (the latent stands for both).
func (m Model) Components() int {
	if m.IsMLA() {
		return 1
	}
	return 2
}

// VectorDims returns the elements of one stored vector: HeadDim, or
// MLALatentDims + MLARopeDims under MLA.
func (m Model) VectorDims() int {
	if m.IsMLA() {
		return m.MLALatentDims + m.MLARopeDims
	}
	return m.HeadDim
}

// BytesPerToken returns the KV bytes one token occupies across all KV
// layers when every layer keeps the token (windows ignored):
// KVLayers × Components × StoredHeads × VectorDims × ElemBytes. It returns an
// error matching ErrInvalidModel for a non-positive factor and ErrOverflow
// when the product does not fit in an int64.
func (m Model) BytesPerToken() (int64, error) {
	if m.Layers <= 0 || m.KVHeads <= 0 || m.HeadDim <= 0 || m.ElemBytes <= 0 || m.MLALatentDims < 0 || m.MLARopeDims < 0 {
		return 0, fmt.Errorf("%w: sizes must be positive (layers %d, kv heads %d, head dim %d, elem bytes %d, MLA %d+%d)",
			ErrInvalidModel, m.Layers, m.KVHeads, m.HeadDim, m.ElemBytes, m.MLALatentDims, m.MLARopeDims)
	}
	dims := int64(m.HeadDim)
	if m.IsMLA() {
		dims = int64(m.MLALatentDims) + int64(m.MLARopeDims) // both fit in int, so no int64 overflow
	}
	b, ok := product(int64(m.KVLayers()), int64(m.Components()), int64(m.StoredHeads()), dims, int64(m.ElemBytes))
	if !ok {
		return 0, fmt.Errorf("%w: bytes per token of %d KV layers × %d × %d heads × %d dims × %d bytes",
			ErrOverflow, m.KVLayers(), m.Components(), m.StoredHeads(), dims, m.ElemBytes)
	}
	return b, nil
}

// KVLayerOf returns the KV layer that layer reads (layer / CLAFactor). It
// returns an error matching ErrOutOfRange unless 0 <= layer < Layers.
func (m Model) KVLayerOf(layer int) (int, error) {
	if layer < 0 || layer >= m.Layers {
		return 0, fmt.Errorf("%w: layer %d not in [0, %d)", ErrOutOfRange, layer, m.Layers)
	}
	return layer / m.claFactor(), nil
}

// KVHeadOf returns the stored head that query head q reads:
// q / (QueryHeads/KVHeads) with the usual contiguous grouping, or 0 under
// MLA, whose one latent per token serves every head. It returns an error
// matching ErrOutOfRange unless 0 <= q < QueryHeads, and ErrInvalidModel
// when the head counts do not group (KVHeads not a positive divisor of
// QueryHeads).
func (m Model) KVHeadOf(q int) (int, error) {
	if q < 0 || q >= m.QueryHeads {
		return 0, fmt.Errorf("%w: query head %d not in [0, %d)", ErrOutOfRange, q, m.QueryHeads)
	}
	if m.KVHeads <= 0 || m.QueryHeads%m.KVHeads != 0 {
		return 0, fmt.Errorf("%w: %d query heads do not group over %d KV heads", ErrInvalidModel, m.QueryHeads, m.KVHeads)
	}
	if m.IsMLA() {
		return 0, nil
	}
	return q / (m.QueryHeads / m.KVHeads), nil
}

// ServedLayers returns the model layers that read KV layer kvLayer: count
// consecutive layers starting at first. It returns an error matching
// ErrOutOfRange unless 0 <= kvLayer < KVLayers().
func (m Model) ServedLayers(kvLayer int) (first, count int, err error) {
	if kvLayer < 0 || kvLayer >= m.KVLayers() {
		return 0, 0, fmt.Errorf("%w: KV layer %d not in [0, %d)", ErrOutOfRange, kvLayer, m.KVLayers())
	}
	f := m.claFactor()
	first = kvLayer * f // < Layers, so no overflow
	count = min(f, m.Layers-first)
	return first, count, nil
}

// KVWindow returns the window, in tokens, that KV layer kvLayer must keep:
// 0 (full attention) if any layer it serves attends fully, otherwise the
// widest window among them. It returns an error matching ErrOutOfRange
// unless 0 <= kvLayer < KVLayers().
func (m Model) KVWindow(kvLayer int) (int, error) {
	first, count, err := m.ServedLayers(kvLayer)
	if err != nil {
		return 0, err
	}
	if m.Windows == nil {
		return 0, nil
	}
	if len(m.Windows) < first+count {
		return 0, fmt.Errorf("%w: %d windows for %d layers", ErrInvalidModel, len(m.Windows), m.Layers)
	}
	widest := 0
	for _, w := range m.Windows[first : first+count] {
		if w == 0 {
			return 0, nil
		}
		widest = max(widest, w)
	}
	return widest, nil
}
