package kvcache

import (
	"fmt"
	"math/bits"

	"github.com/kvtier/kvtier/layout"
)

// geometry is what the cache needs of its layout, in the form its hot
// paths read: the block size, the slices of a block and the pool, KV layer
// and KV head of each, and the pools. It is built once by newGeometry and
// never changes, so every part of the cache reads it without a lock of its
// own.
type geometry struct {
	layout *layout.Layout
	// blockTokens is the tokens per token block (the layout's
	// TokensPerUnit).
	blockTokens int
	// slices is the units per block; sliceShift the bits a UnitID gives
	// the slice (see unitIDs).
	slices     int
	sliceShift uint
	// slicePool, sliceLayer and sliceHead give each slice's pool, KV layer
	// (-1 when the unit spans every layer) and stored KV head (-1 when it
	// holds every head of its layer).
	slicePool  []int32
	sliceLayer []int32
	sliceHead  []int32
	// kvLayers and layers count the model's KV layers and layers;
	// storedHeads the KV heads a layer stores (1 under MLA).
	kvLayers, layers, storedHeads int
	// layerKV maps a model layer to the KV layer it reads (CLA shares one
	// among several).
	layerKV []int32
	// sliceFor maps kvLayer*storedHeads+head to the slice holding it.
	sliceFor []int32
	pools    []poolGeom
}

// poolGeom is what the cache keeps of a layout pool.
type poolGeom struct {
	unitBytes     int64
	window        int
	unitsPerBlock int
	// slices lists the pool's slices, ascending.
	slices []int
}

// newGeometry reads l, which must have been built by layout.New.
func newGeometry(l *layout.Layout) (*geometry, error) {
	if l == nil || l.UnitsPerBlock() == 0 {
		return nil, fmt.Errorf("%w: Layout is nil or not built by layout.New", ErrInvalidConfig)
	}
	m := l.Model()
	g := &geometry{
		layout:      l,
		blockTokens: l.TokensPerUnit(),
		slices:      l.UnitsPerBlock(),
		kvLayers:    m.KVLayers(),
		layers:      m.Layers,
		storedHeads: m.StoredHeads(),
	}
	g.sliceShift = uint(bits.Len(uint(g.slices - 1)))
	for i, p := range l.Pools() {
		if p.Index != i {
			return nil, fmt.Errorf("%w: Layout pool %d has index %d", ErrInvalidConfig, i, p.Index)
		}
		g.pools = append(g.pools, poolGeom{unitBytes: p.UnitBytes, window: p.Window, unitsPerBlock: p.UnitsPerBlock})
	}
	g.slicePool = make([]int32, g.slices)
	g.sliceLayer = make([]int32, g.slices)
	g.sliceHead = make([]int32, g.slices)
	for i := range g.slices {
		s, err := l.Slice(i)
		if err != nil {
			return nil, fmt.Errorf("%w: Layout: %w", ErrInvalidConfig, err)
		}
		g.slicePool[i] = int32(s.Pool)
		g.sliceLayer[i] = int32(s.KVLayer)
		g.sliceHead[i] = int32(s.KVHead)
		g.pools[s.Pool].slices = append(g.pools[s.Pool].slices, i)
	}
	g.layerKV = make([]int32, g.layers)
	for layer := range g.layers {
		k, err := m.KVLayerOf(layer)
		if err != nil {
			return nil, fmt.Errorf("%w: Layout: %w", ErrInvalidConfig, err)
		}
		g.layerKV[layer] = int32(k)
	}
	g.sliceFor = make([]int32, g.kvLayers*g.storedHeads)
	for k := range g.kvLayers {
		for h := range g.storedHeads {
			s, err := l.SliceOf(k, h)
			if err != nil {
				return nil, fmt.Errorf("%w: Layout: %w", ErrInvalidConfig, err)
			}
			g.sliceFor[k*g.storedHeads+h] = int32(s)
		}
	}
	return g, nil
}

// numBlocks returns the blocks that n tokens occupy.
func (g *geometry) numBlocks(n int) int { return (n + g.blockTokens - 1) / g.blockTokens }

// poolOfSlice returns the pool of slice s.
func (g *geometry) poolOfSlice(s int) int { return int(g.slicePool[s]) }
