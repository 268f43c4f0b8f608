package layout

import (
	"fmt"
	"slices"
)

// Layout is a Model cut into units of TokensPerUnit tokens by a Kind. Build
// one with New; the zero Layout is not usable and its methods return
// ErrInvalidLayout or zero values. A Layout never changes after New returns
// it, so it is safe for concurrent use by any number of goroutines.
type Layout struct {
	model    Model
	kind     Kind
	tokens   int
	kvLayers int
	heads    int // stored heads per KV layer (1 under MLA)
	group    int // query heads that read one stored head
	comps    int // 2 (K, V) or 1 (MLA latent)
	dims     int
	elem     int64
	// layerBytes is what one KV layer contributes to a token block in one
	// unit: tokens × comps × heads × dims × elem. It is the PagedLayer unit
	// and one layer of an AllLayers unit.
	layerBytes int64
	strides    Strides
	numSlices  int
	pools      []Pool
	// kvWindow and kvPool are per KV layer; both are nil when the model has
	// no windows (every layer full, one pool). Their length is bounded by
	// len(Model.Windows), which the caller already allocated.
	kvWindow []int
	kvPool   []int
	// AllLayers only: the slice of each KV layer and its position inside
	// that slice's unit, and the KV layers of each slice. nil when there is
	// a single slice holding KV layers 0..kvLayers-1 in order.
	kvGroup     []int
	kvRank      []int
	groupLayers [][]int
}

// Slice describes one slice of a Layout: which KV of a token block its unit
// holds, how big the unit is and which pool it belongs to.
type Slice struct {
	// Index is the slice's position, in [0, UnitsPerBlock()).
	Index int
	// KVLayer is the single KV layer the unit holds, or -1 when it holds
	// several (AllLayers; see AppendKVLayers).
	KVLayer int
	// KVHead is the single stored KV head the unit holds (BSA), or -1 when
	// it holds every KV head of its layers.
	KVHead int
	// KVLayers is the number of KV layers in the unit: 1 unless AllLayers.
	KVLayers int
	// Window is the attention window, in tokens, of the unit's KV layers
	// (0 = full attention).
	Window int
	// Pool is the index of the slice's pool in Pools().
	Pool int
	// UnitBytes is the size of one unit of this slice.
	UnitBytes int64
}

// Pool is a group of slices whose units have the same size and window, so
// that one slot arena can hold them all. A cache keeps one arena per pool.
type Pool struct {
	// Index is the pool's position in Pools().
	Index int
	// UnitBytes is the size of every unit in the pool.
	UnitBytes int64
	// Window is the window, in tokens, of every slice in the pool (0 = full).
	Window int
	// UnitsPerBlock is the number of the pool's slices, which is also the
	// number of its units one fully held token block needs.
	UnitsPerBlock int
}

// New builds the Layout of model m cut by kind into units of blockTokens
// tokens. blockTokens must be a power of two and at least 2 (the
// TensorRT-LLM rule for tokens per block). It returns an error matching
// ErrInvalidModel when m.Validate fails (a size above its maximum
// included), ErrInvalidLayout for a bad kind or blockTokens, and
// ErrOverflow when a unit or a token block does not fit in an int64. A
// Layout that New returns has at most MaxUnitsPerBlock units per token
// block, whatever its kind. blockTokens has no maximum besides that
// overflow check: a Layout also sizes hypothetical blocks, and a consumer
// that allocates per token of a block bounds the block size itself.
func New(m Model, kind Kind, blockTokens int) (*Layout, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	if !kind.valid() {
		return nil, fmt.Errorf("%w: unknown kind %d", ErrInvalidLayout, int(kind))
	}
	if blockTokens < 2 || blockTokens&(blockTokens-1) != 0 {
		return nil, fmt.Errorf("%w: block tokens %d must be a power of two and at least 2", ErrInvalidLayout, blockTokens)
	}
	m.Windows = slices.Clone(m.Windows) // the Layout must not see later edits of the caller's slice
	l := &Layout{
		model:    m,
		kind:     kind,
		tokens:   blockTokens,
		kvLayers: m.KVLayers(),
		heads:    m.StoredHeads(),
		comps:    m.Components(),
		dims:     m.VectorDims(),
		elem:     int64(m.ElemBytes),
	}
	l.group = m.QueryHeads / l.heads
	var ok bool
	l.layerBytes, ok = product(int64(blockTokens), int64(l.comps), int64(l.heads), int64(l.dims), l.elem)
	if !ok {
		return nil, fmt.Errorf("%w: %d tokens × %d × %d heads × %d dims × %d bytes", ErrOverflow, blockTokens, l.comps, l.heads, l.dims, l.elem)
	}
	// A whole token block (every slice) must fit too, so that sums of unit
	// bytes over slices need no further checks.
	if _, ok := mul64(l.layerBytes, int64(l.kvLayers)); !ok {
		return nil, fmt.Errorf("%w: a token block of %d KV layers × %d bytes", ErrOverflow, l.kvLayers, l.layerBytes)
	}
	if err := l.buildWindows(); err != nil {
		return nil, err
	}
	if err := l.buildSlices(); err != nil {
		return nil, err
	}
	l.strides = l.buildStrides()
	return l, nil
}

// buildWindows records the window of every KV layer when the model has any.
func (l *Layout) buildWindows() error {
	if l.model.Windows == nil {
		return nil
	}
	l.kvWindow = make([]int, l.kvLayers)
	for k := range l.kvWindow {
		w, err := l.model.KVWindow(k)
		if err != nil {
			return err
		}
		l.kvWindow[k] = w
	}
	return nil
}

// buildSlices counts the slices and groups them into pools.
func (l *Layout) buildSlices() error {
	switch l.kind {
	case PagedLayer, BSA:
		perLayer := 1
		if l.kind == BSA {
			perLayer = l.heads
		}
		// Model.Validate bounds KV layers × stored heads, so this holds for
		// any model New accepts; it is checked again because the slice
		// count is what consumers size their tables by.
		n, ok := mul64(int64(l.kvLayers), int64(perLayer))
		if !ok || n > MaxUnitsPerBlock {
			return fmt.Errorf("%w: %d KV layers × %d heads slices exceed MaxUnitsPerBlock %d", ErrOverflow, l.kvLayers, perLayer, MaxUnitsPerBlock)
		}
		l.numSlices = int(n)
		if l.kvWindow == nil {
			l.pools = []Pool{{UnitBytes: l.sliceUnitBytes(), UnitsPerBlock: l.numSlices}}
			return nil
		}
		// One pool per distinct window, in order of first appearance.
		l.kvPool = make([]int, l.kvLayers)
		poolOf := map[int]int{}
		for k, w := range l.kvWindow {
			p, seen := poolOf[w]
			if !seen {
				p = len(l.pools)
				poolOf[w] = p
				l.pools = append(l.pools, Pool{Index: p, UnitBytes: l.sliceUnitBytes(), Window: w})
			}
			l.kvPool[k] = p
			l.pools[p].UnitsPerBlock += perLayer
		}
		return nil
	default: // AllLayers
		if l.kvWindow == nil {
			l.numSlices = 1
			l.pools = []Pool{{UnitBytes: l.layerBytes * int64(l.kvLayers), UnitsPerBlock: 1}}
			return nil
		}
		// One slice (and pool) per distinct window, in order of first
		// appearance; a KV layer's rank is its position inside the unit.
		l.kvGroup = make([]int, l.kvLayers)
		l.kvRank = make([]int, l.kvLayers)
		groupOf := map[int]int{}
		for k, w := range l.kvWindow {
			g, seen := groupOf[w]
			if !seen {
				g = len(l.groupLayers)
				groupOf[w] = g
				l.groupLayers = append(l.groupLayers, nil)
				l.pools = append(l.pools, Pool{Index: g, Window: w, UnitsPerBlock: 1})
			}
			l.kvGroup[k] = g
			l.kvRank[k] = len(l.groupLayers[g])
			l.groupLayers[g] = append(l.groupLayers[g], k)
		}
		for g, layers := range l.groupLayers {
			l.pools[g].UnitBytes = l.layerBytes * int64(len(layers)) // ≤ the whole block, checked in New
		}
		l.numSlices = len(l.groupLayers)
		return nil
	}
}

// sliceUnitBytes is the unit size of PagedLayer and BSA, the same for every
// slice: a BSA unit is one head's share of a paged unit.
func (l *Layout) sliceUnitBytes() int64 {
	if l.kind == BSA {
		return l.layerBytes / int64(l.heads)
	}
	return l.layerBytes
}
