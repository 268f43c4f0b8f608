package layout

import "fmt"

// Component names the vector an element belongs to.
type Component int

const (
	// Key is the K vector of a head (models without MLA).
	Key Component = iota
	// Value is the V vector of a head (models without MLA).
	Value
	// Latent is the single MLA vector that stands for both K and V: under
	// MLA K and V collapse into it, so Key and Value are out of range and
	// Latent is the only valid component.
	Latent
)

// String returns "K", "V", "latent", or "Component(n)".
func (c Component) String() string {
	switch c {
	case Key:
		return "K"
	case Value:
		return "V"
	case Latent:
		return "latent"
	}
	return fmt.Sprintf("Component(%d)", int(c))
}

// Element addresses one stored element of a token block's KV.
type Element struct {
	// KVLayer is the KV layer, 0 <= KVLayer < Model.KVLayers().
	KVLayer int
	// KVHead is the stored KV head, 0 <= KVHead < Model.StoredHeads()
	// (always 0 under MLA).
	KVHead int
	// Component is Key or Value, or Latent under MLA.
	Component Component
	// Token is the token's position inside the token block,
	// 0 <= Token < TokensPerUnit().
	Token int
	// Dim is the position inside the vector, 0 <= Dim < Model.VectorDims().
	Dim int
}

// Strides are the byte distances between neighbouring elements inside one
// unit. The byte offset of an element in its unit is
//
//	rank×Layer + c×Component + KVHead×Head + Token×Token + Dim×Dim
//
// where c is 0 for Key and Latent and 1 for Value, and rank is the KV
// layer's position inside an AllLayers unit (see AppendKVLayers). A stride
// is 0 along an axis the unit does not span: Layer except for AllLayers,
// Component under MLA, Head for BSA (the head picks the unit) and under
// MLA. Locate applies this formula after checking every index.
type Strides struct {
	// Layer is the distance between consecutive KV layers of an AllLayers
	// unit.
	Layer int64
	// Component is the distance between K and V of the same head and token.
	Component int64
	// Head is the distance between consecutive KV heads.
	Head int64
	// Token is the distance between consecutive tokens.
	Token int64
	// Dim is the distance between consecutive elements of a vector: the
	// element size.
	Dim int64
}

// Strides returns the byte strides of l's units; they are the same for
// every slice. It returns the zero Strides for a Layout not built by New.
func (l *Layout) Strides() Strides {
	if !l.ready() {
		return Strides{}
	}
	return l.strides
}

// buildStrides derives the strides from the unit shape of each kind. All
// products are at most the unit size, which New checked.
func (l *Layout) buildStrides() Strides {
	e := l.elem
	d, h, t, c := int64(l.dims), int64(l.heads), int64(l.tokens), int64(l.comps)
	var s Strides
	s.Dim = e
	switch l.kind {
	case AllLayers: // [layer][comp][head][token][dim]
		s.Token = d * e
		s.Head = t * d * e
		s.Component = h * t * d * e
		s.Layer = c * h * t * d * e
	case PagedLayer: // [token][comp][head][dim]
		s.Head = d * e
		s.Component = h * d * e
		s.Token = c * h * d * e
	case BSA: // [token][comp][dim]
		s.Component = d * e
		s.Token = c * d * e
	}
	if l.comps == 1 {
		s.Component = 0
	}
	if l.heads == 1 {
		s.Head = 0
	}
	return s
}

// Locate returns the slice whose unit holds e and the byte offset of e
// inside that unit, in [0, unit bytes). It returns an error matching
// ErrOutOfRange for any index out of range, including Key or Value under
// MLA and Latent without it.
func (l *Layout) Locate(e Element) (slice int, offset int64, err error) {
	if !l.ready() {
		return 0, 0, errNotBuilt()
	}
	if e.KVLayer < 0 || e.KVLayer >= l.kvLayers {
		return 0, 0, fmt.Errorf("%w: KV layer %d not in [0, %d)", ErrOutOfRange, e.KVLayer, l.kvLayers)
	}
	if e.KVHead < 0 || e.KVHead >= l.heads {
		return 0, 0, fmt.Errorf("%w: KV head %d not in [0, %d)", ErrOutOfRange, e.KVHead, l.heads)
	}
	if e.Token < 0 || e.Token >= l.tokens {
		return 0, 0, fmt.Errorf("%w: token %d not in [0, %d)", ErrOutOfRange, e.Token, l.tokens)
	}
	if e.Dim < 0 || e.Dim >= l.dims {
		return 0, 0, fmt.Errorf("%w: dim %d not in [0, %d)", ErrOutOfRange, e.Dim, l.dims)
	}
	var c int64
	switch {
	case l.comps == 1 && e.Component == Latent:
	case l.comps == 2 && (e.Component == Key || e.Component == Value):
		c = int64(e.Component)
	default:
		return 0, 0, fmt.Errorf("%w: component %v (MLA %t)", ErrOutOfRange, e.Component, l.comps == 1)
	}
	slice = l.sliceOf(e.KVLayer, e.KVHead)
	var rank int64
	if l.kind == AllLayers {
		rank = int64(e.KVLayer)
		if l.kvRank != nil {
			rank = int64(l.kvRank[e.KVLayer])
		}
	}
	// Every term is below the unit size, which New checked, so the sum
	// cannot overflow. For BSA Head is 0: the head chose the unit.
	s := &l.strides
	offset = rank*s.Layer + c*s.Component + int64(e.KVHead)*s.Head + int64(e.Token)*s.Token + int64(e.Dim)*s.Dim
	return slice, offset, nil
}
