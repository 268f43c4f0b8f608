package layout

import (
	"fmt"
	"slices"
)

// ready reports whether l was built by New; methods on a nil or zero Layout
// return ErrInvalidLayout (or zero) instead of panicking.
func (l *Layout) ready() bool { return l != nil && l.layerBytes > 0 }

func errNotBuilt() error { return fmt.Errorf("%w: Layout not built by New", ErrInvalidLayout) }

// Model returns a copy of the model l was built from (its Windows are a
// copy too). It returns the zero Model for a Layout not built by New.
func (l *Layout) Model() Model {
	if !l.ready() {
		return Model{}
	}
	m := l.model
	m.Windows = slices.Clone(m.Windows)
	return m
}

// Kind returns how l cuts a token block into units (0 for a Layout not
// built by New).
func (l *Layout) Kind() Kind {
	if !l.ready() {
		return 0
	}
	return l.kind
}

// TokensPerUnit returns the tokens of one unit, which is the block size of
// the token blocks l cuts (0 for a Layout not built by New).
func (l *Layout) TokensPerUnit() int {
	if !l.ready() {
		return 0
	}
	return l.tokens
}

// UnitsPerBlock returns the number of slices, which is the number of units
// one fully held token block needs: 1 per window for AllLayers, KV layers
// for PagedLayer, KV layers × stored KV heads for BSA (0 for a Layout not
// built by New). It is at most MaxUnitsPerBlock.
func (l *Layout) UnitsPerBlock() int {
	if !l.ready() {
		return 0
	}
	return l.numSlices
}

// BlockBytes returns the bytes of one token block over every slice: the sum
// of the unit bytes of all slices (0 for a Layout not built by New). It does
// not depend on the kind.
func (l *Layout) BlockBytes() int64 {
	if !l.ready() {
		return 0
	}
	return l.layerBytes * int64(l.kvLayers) // checked in New
}

// Slice returns slice i. Slices are numbered: AllLayers by window group in
// order of first appearance over KV layers; PagedLayer by KV layer; BSA by
// KV layer then KV head (i = kvLayer×StoredHeads + kvHead). It returns an
// error matching ErrOutOfRange unless 0 <= i < UnitsPerBlock().
func (l *Layout) Slice(i int) (Slice, error) {
	if !l.ready() {
		return Slice{}, errNotBuilt()
	}
	if i < 0 || i >= l.numSlices {
		return Slice{}, fmt.Errorf("%w: slice %d not in [0, %d)", ErrOutOfRange, i, l.numSlices)
	}
	s := Slice{Index: i, KVLayer: -1, KVHead: -1, KVLayers: 1}
	switch l.kind {
	case AllLayers:
		s.KVLayers = l.kvLayers
		if l.groupLayers != nil {
			s.KVLayers = len(l.groupLayers[i])
		}
		s.Pool = i
	case PagedLayer:
		s.KVLayer = i
	case BSA:
		s.KVLayer, s.KVHead = i/l.heads, i%l.heads
	}
	if s.KVLayer >= 0 && l.kvPool != nil {
		s.Pool = l.kvPool[s.KVLayer]
	}
	s.Window = l.pools[s.Pool].Window
	s.UnitBytes = l.pools[s.Pool].UnitBytes
	return s, nil
}

// SliceOf returns the slice whose unit holds KV head kvHead of KV layer
// kvLayer. kvHead counts stored heads: 0 <= kvHead < Model.StoredHeads()
// (always 0 under MLA). It returns an error matching ErrOutOfRange for
// either index out of range.
func (l *Layout) SliceOf(kvLayer, kvHead int) (int, error) {
	if !l.ready() {
		return 0, errNotBuilt()
	}
	if kvLayer < 0 || kvLayer >= l.kvLayers {
		return 0, fmt.Errorf("%w: KV layer %d not in [0, %d)", ErrOutOfRange, kvLayer, l.kvLayers)
	}
	if kvHead < 0 || kvHead >= l.heads {
		return 0, fmt.Errorf("%w: KV head %d not in [0, %d)", ErrOutOfRange, kvHead, l.heads)
	}
	return l.sliceOf(kvLayer, kvHead), nil
}

// sliceOf is SliceOf for indices already checked.
func (l *Layout) sliceOf(kvLayer, kvHead int) int {
	switch l.kind {
	case AllLayers:
		if l.kvGroup == nil {
			return 0
		}
		return l.kvGroup[kvLayer]
	case PagedLayer:
		return kvLayer
	default:
		return kvLayer*l.heads + kvHead
	}
}

// AppendKVLayers appends to dst the KV layers that slice i's unit holds, in
// their order inside the unit, and returns the extended slice. Under CLA
// use Model.ServedLayers to map a KV layer to the model layers that read
// it. It returns dst unchanged and an error matching ErrOutOfRange unless
// 0 <= i < UnitsPerBlock().
func (l *Layout) AppendKVLayers(dst []int, i int) ([]int, error) {
	s, err := l.Slice(i)
	if err != nil {
		return dst, err
	}
	switch {
	case s.KVLayer >= 0:
		return append(dst, s.KVLayer), nil
	case l.groupLayers != nil:
		return append(dst, l.groupLayers[i]...), nil
	default:
		for k := range l.kvLayers {
			dst = append(dst, k)
		}
		return dst, nil
	}
}

// Pools returns the pools of l: slices whose units have equal bytes and
// window share one. PagedLayer and BSA have one pool per distinct window
// (their units all have the same size); AllLayers has one per slice. The
// returned slice is a copy; it is nil for a Layout not built by New.
func (l *Layout) Pools() []Pool {
	if !l.ready() {
		return nil
	}
	return slices.Clone(l.pools)
}
