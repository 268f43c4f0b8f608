package layout

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// randomModel draws a small valid model covering MHA, GQA, MQA, MLA, CLA
// and windows.
func randomModel(rng *rand.Rand) Model {
	kv := 1 + rng.IntN(3)
	m := Model{
		Layers:     1 + rng.IntN(6),
		KVHeads:    kv,
		QueryHeads: kv * (1 + rng.IntN(3)),
		HeadDim:    1 + rng.IntN(5),
		ElemBytes:  []int{1, 2, 4}[rng.IntN(3)],
		CLAFactor:  rng.IntN(4),
	}
	if rng.IntN(4) == 0 {
		m.MLALatentDims, m.MLARopeDims = 1+rng.IntN(4), rng.IntN(3)
	}
	if rng.IntN(2) == 0 {
		m.Windows = make([]int, m.Layers)
		for i := range m.Windows {
			m.Windows[i] = []int{0, 3, 8, 16}[rng.IntN(4)]
		}
	}
	return m
}

// TestLocateMatchesRowMajorShape enumerates each unit in the row-major
// order its kind documents and checks that Locate gives consecutive offsets:
// so offsets lie in [0, unit bytes), never collide, and cover the unit.
func TestLocateMatchesRowMajorShape(t *testing.T) {
	rng := newRand(t)
	for range 300 {
		m := randomModel(rng)
		kind := Kinds()[rng.IntN(3)]
		l := mustNew(t, m, kind, []int{2, 4, 8}[rng.IntN(3)])
		comps := []Component{Key, Value}
		if m.IsMLA() {
			comps = []Component{Latent}
		}
		st := l.Strides()
		seen := map[[2]int64]bool{}
		for i := range l.UnitsPerBlock() {
			s, err := l.Slice(i)
			require.NoError(t, err)
			layers, err := l.AppendKVLayers(nil, i)
			require.NoError(t, err)
			heads := []int{s.KVHead}
			if s.KVHead < 0 {
				heads = heads[:0]
				for h := range m.StoredHeads() {
					heads = append(heads, h)
				}
			}
			next := int64(0)
			check := func(rank, k, h int, c Component, tok, d int) {
				e := Element{KVLayer: k, KVHead: h, Component: c, Token: tok, Dim: d}
				slice, off, err := l.Locate(e)
				require.NoError(t, err)
				require.Equal(t, i, slice, "%v %+v", kind, e)
				require.Equal(t, next, off, "%v %+v in %+v", kind, e, m)
				ci := int64(0)
				if c == Value {
					ci = 1
				}
				hs := int64(h)
				if kind == BSA {
					hs = 0
				}
				byStrides := int64(rank)*st.Layer + ci*st.Component + hs*st.Head + int64(tok)*st.Token + int64(d)*st.Dim
				require.Equal(t, off, byStrides, "strides formula")
				require.False(t, seen[[2]int64{int64(slice), off}])
				seen[[2]int64{int64(slice), off}] = true
				next += int64(m.ElemBytes)
			}
			switch kind {
			case AllLayers: // [layer][comp][head][token][dim]
				for rank, k := range layers {
					for _, c := range comps {
						for _, h := range heads {
							for tok := range l.TokensPerUnit() {
								for d := range m.VectorDims() {
									check(rank, k, h, c, tok, d)
								}
							}
						}
					}
				}
			default: // [token][comp][head][dim]; BSA has one head
				for tok := range l.TokensPerUnit() {
					for _, c := range comps {
						for _, h := range heads {
							for d := range m.VectorDims() {
								check(0, layers[0], h, c, tok, d)
							}
						}
					}
				}
			}
			require.Equal(t, s.UnitBytes, next, "%v slice %d covers its unit", kind, i)
		}
	}
}

func TestSeedStrides(t *testing.T) {
	m := SeedModel()
	assert.Equal(t, Strides{Component: 8 * 1024 * 2, Head: 1024 * 2, Token: 2 * 8 * 1024 * 2, Dim: 2},
		mustNew(t, m, PagedLayer, 32).Strides())
	assert.Equal(t, Strides{Component: 1024 * 2, Token: 2 * 1024 * 2, Dim: 2},
		mustNew(t, m, BSA, 512).Strides())
	assert.Equal(t, Strides{Layer: 2 * 8 * 32 * 1024 * 2, Component: 8 * 32 * 1024 * 2, Head: 32 * 1024 * 2, Token: 1024 * 2, Dim: 2},
		mustNew(t, m, AllLayers, 32).Strides())

	// The last element of the last layer ends exactly at the unit's end.
	l := mustNew(t, m, AllLayers, 32)
	slice, off, err := l.Locate(Element{KVLayer: 27, KVHead: 7, Component: Value, Token: 31, Dim: 1023})
	require.NoError(t, err)
	s, err := l.Slice(slice)
	require.NoError(t, err)
	assert.Equal(t, s.UnitBytes-2, off)
	assert.Equal(t, 28*mib, s.UnitBytes)
}
