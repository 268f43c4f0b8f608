package layout

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tinyModel is the smallest valid model: every size 1.
func tinyModel() Model {
	return Model{Name: "tiny", Layers: 1, QueryHeads: 1, KVHeads: 1, HeadDim: 1, ElemBytes: 1}
}

// TestAbsurdGeometryIsRejected: sizes that cannot be real are refused by
// Validate and New with ErrInvalidModel, naming the field, its value and
// the maximum, even when every product fits in an int64.
func TestAbsurdGeometryIsRejected(t *testing.T) {
	cases := []struct {
		name string
		edit func(*Model)
		says string
	}{
		{"2^47 layers", func(m *Model) { m.Layers = 1 << 47 }, fmt.Sprintf("Layers 140737488355328 exceeds MaxLayers %d", MaxLayers)},
		{"one layer too many", func(m *Model) { m.Layers = MaxLayers + 1 }, fmt.Sprintf("Layers %d exceeds MaxLayers %d", MaxLayers+1, MaxLayers)},
		{"query heads", func(m *Model) { m.QueryHeads = MaxHeads * 2 }, fmt.Sprintf("QueryHeads %d exceeds MaxHeads %d", MaxHeads*2, MaxHeads)},
		{"KV heads", func(m *Model) { m.QueryHeads, m.KVHeads = 1<<40, 1<<40 }, fmt.Sprintf("QueryHeads %d exceeds MaxHeads %d", int64(1)<<40, MaxHeads)},
		{"head dim", func(m *Model) { m.HeadDim = MaxVectorDims + 1 }, fmt.Sprintf("HeadDim %d exceeds MaxVectorDims %d", MaxVectorDims+1, MaxVectorDims)},
		{"MLA dims", func(m *Model) { m.MLALatentDims, m.MLARopeDims = MaxVectorDims, 1 }, fmt.Sprintf("MLA dims %d + 1 exceed MaxVectorDims %d", MaxVectorDims, MaxVectorDims)},
		{"element bytes", func(m *Model) { m.ElemBytes = MaxElemBytes + 1 }, fmt.Sprintf("ElemBytes %d exceeds MaxElemBytes %d", MaxElemBytes+1, MaxElemBytes)},
		{"CLA factor", func(m *Model) { m.CLAFactor = math.MaxInt }, fmt.Sprintf("CLAFactor %d exceeds MaxLayers %d", math.MaxInt, MaxLayers)},
		{"stored heads over all KV layers", func(m *Model) { m.Layers, m.QueryHeads, m.KVHeads = 1<<9, 1<<8, 1<<8 },
			fmt.Sprintf("512 KV layers × 256 stored heads = 131072 exceeds MaxUnitsPerBlock %d", MaxUnitsPerBlock)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := tinyModel()
			c.edit(&m)
			err := m.Validate()
			require.ErrorIs(t, err, ErrInvalidModel)
			assert.Contains(t, err.Error(), c.says)
			assert.Contains(t, err.Error(), "layout: ")
			for _, kind := range Kinds() {
				l, err := New(m, kind, 16)
				require.ErrorIs(t, err, ErrInvalidModel, "%v", kind)
				require.Nil(t, l)
			}
		})
	}
}

// TestLargestGeometryIsAccepted: every maximum is itself valid, and the
// units per block of every kind stay within MaxUnitsPerBlock.
func TestLargestGeometryIsAccepted(t *testing.T) {
	models := map[string]Model{
		"layers":        {Layers: MaxLayers, QueryHeads: 1, KVHeads: 1, HeadDim: 1, ElemBytes: 1},
		"CLA":           {Layers: MaxLayers, QueryHeads: 1, KVHeads: 1, HeadDim: 1, ElemBytes: 1, CLAFactor: MaxLayers},
		"heads":         {Layers: 1, QueryHeads: MaxHeads, KVHeads: MaxHeads, HeadDim: 1, ElemBytes: 1},
		"GQA":           {Layers: 1 << 8, QueryHeads: MaxHeads, KVHeads: 1 << 8, HeadDim: 1, ElemBytes: 1},
		"head dim":      {Layers: 1, QueryHeads: 1, KVHeads: 1, HeadDim: MaxVectorDims, ElemBytes: MaxElemBytes},
		"MLA":           {Layers: MaxLayers, QueryHeads: MaxHeads, KVHeads: MaxHeads, HeadDim: 1, ElemBytes: 1, MLALatentDims: MaxVectorDims - 64, MLARopeDims: 64},
		"full windows":  {Layers: 4, QueryHeads: 1, KVHeads: 1, HeadDim: 1, ElemBytes: 1, Windows: []int{math.MaxInt, 0, 1, math.MaxInt}},
		"405B":          Llama31_405B(),
		"DeepSeek-V2":   DeepSeekV2(),
		"Llama-2-13B":   Llama2_13B(),
		"seed document": SeedModel(),
	}
	for name, m := range models {
		require.NoError(t, m.Validate(), name)
		for _, kind := range Kinds() {
			l, err := New(m, kind, 16)
			require.NoError(t, err, "%s %v", name, kind)
			assert.LessOrEqual(t, l.UnitsPerBlock(), MaxUnitsPerBlock, "%s %v", name, kind)
			total := 0
			for _, p := range l.Pools() {
				total += p.UnitsPerBlock
			}
			assert.Equal(t, l.UnitsPerBlock(), total, "%s %v", name, kind)
		}
	}
	l := mustNew(t, models["heads"], BSA, 16)
	assert.Equal(t, MaxUnitsPerBlock, l.UnitsPerBlock(), "the BSA bound is reachable")
	l = mustNew(t, models["layers"], PagedLayer, 16)
	assert.Equal(t, MaxUnitsPerBlock, l.UnitsPerBlock(), "the paged bound is reachable")
}

// TestMaximaKeepProductsInRange: at the maxima, the per-token sizes of the
// package (bytes per token, slices) are far from int64 overflow, so the
// limits, not the overflow checks, are what stops absurd geometry; the
// overflow checks remain for token counts.
func TestMaximaKeepProductsInRange(t *testing.T) {
	m := Model{Layers: MaxLayers, QueryHeads: MaxHeads, KVHeads: 1, HeadDim: MaxVectorDims, ElemBytes: MaxElemBytes}
	require.NoError(t, m.Validate())
	perToken, err := m.BytesPerToken()
	require.NoError(t, err)
	assert.Equal(t, int64(MaxLayers)*2*MaxVectorDims*MaxElemBytes, perToken) // 2^36
	l := mustNew(t, m, AllLayers, 1<<20)
	assert.Equal(t, perToken<<20, l.BlockBytes())
	_, err = New(m, AllLayers, 1<<28)
	require.ErrorIs(t, err, ErrOverflow, "a 2^28-token block of 2^36 bytes per token")
}
