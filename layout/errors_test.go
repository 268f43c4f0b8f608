package layout

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestInvalidModels(t *testing.T) {
	ok := SeedModel()
	cases := []struct {
		name   string
		edit   func(*Model)
		target error
		says   string
	}{
		{"zero model", func(m *Model) { *m = Model{} }, ErrInvalidModel, "Layers 0"},
		{"negative layers", func(m *Model) { m.Layers = -1 }, ErrInvalidModel, "Layers -1"},
		{"no query heads", func(m *Model) { m.QueryHeads = 0 }, ErrInvalidModel, "QueryHeads 0"},
		{"no KV heads", func(m *Model) { m.KVHeads = 0 }, ErrInvalidModel, "KVHeads 0"},
		{"no head dim", func(m *Model) { m.HeadDim = 0 }, ErrInvalidModel, "HeadDim 0"},
		{"no element bytes", func(m *Model) { m.ElemBytes = 0 }, ErrInvalidModel, "ElemBytes 0"},
		{"heads not a multiple", func(m *Model) { m.KVHeads = 5 }, ErrInvalidModel, "QueryHeads 16 is not a multiple of KVHeads 5"},
		{"more KV than query heads", func(m *Model) { m.KVHeads = 32 }, ErrInvalidModel, "KVHeads 32"},
		{"negative latent", func(m *Model) { m.MLALatentDims = -1 }, ErrInvalidModel, "latent -1"},
		{"rope without latent", func(m *Model) { m.MLARopeDims = 64 }, ErrInvalidModel, "MLARopeDims 64"},
		{"negative CLA", func(m *Model) { m.CLAFactor = -2 }, ErrInvalidModel, "CLAFactor -2"},
		{"windows of wrong length", func(m *Model) { m.Windows = []int{0, 4096} }, ErrInvalidModel, "2 windows for 28 layers"},
		{"negative window", func(m *Model) { m.Windows = make([]int, 28); m.Windows[3] = -1 }, ErrInvalidModel, "window -1 of layer 3"},
		{"bytes per token overflow", func(m *Model) { m.HeadDim = math.MaxInt / 2 }, ErrOverflow, "bytes per token"},
		{"MLA dims overflow", func(m *Model) { m.MLALatentDims, m.MLARopeDims = math.MaxInt, math.MaxInt }, ErrOverflow, "MLA dims"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := ok
			c.edit(&m)
			err := m.Validate()
			require.ErrorIs(t, err, c.target)
			assert.Contains(t, err.Error(), c.says)
			assert.Contains(t, err.Error(), "layout: ")
			_, err = New(m, PagedLayer, 32)
			require.ErrorIs(t, err, c.target, "New validates the model")
		})
	}
	require.NoError(t, ok.Validate())
}

func TestPresetsAreValid(t *testing.T) {
	for _, m := range []Model{SeedModel(), Llama2_13B(), DeepSeekV2(), Llama31_405B()} {
		require.NoError(t, m.Validate(), m.Name)
	}
}

func TestInvalidLayouts(t *testing.T) {
	for _, tokens := range []int{-32, 0, 1, 3, 12, 48, 1000} {
		_, err := New(SeedModel(), PagedLayer, tokens)
		require.ErrorIs(t, err, ErrInvalidLayout, "tokens %d", tokens)
		assert.Contains(t, err.Error(), "block tokens")
	}
	for _, kind := range []Kind{0, -1, BSA + 1} {
		_, err := New(SeedModel(), kind, 32)
		require.ErrorIs(t, err, ErrInvalidLayout, "kind %d", kind)
	}
	for _, tokens := range []int{2, 4, 1 << 20} {
		_, err := New(SeedModel(), BSA, tokens)
		require.NoError(t, err, "tokens %d", tokens)
	}
}

// TestUnbuiltLayoutDoesNotPanic covers the zero and nil Layout: every
// method answers with ErrInvalidLayout or a zero value.
func TestUnbuiltLayoutDoesNotPanic(t *testing.T) {
	for _, l := range []*Layout{nil, {}} {
		_, err := l.Slice(0)
		require.ErrorIs(t, err, ErrInvalidLayout)
		_, err = l.SliceOf(0, 0)
		require.ErrorIs(t, err, ErrInvalidLayout)
		_, _, err = l.Locate(Element{})
		require.ErrorIs(t, err, ErrInvalidLayout)
		_, err = l.Footprint(1)
		require.ErrorIs(t, err, ErrInvalidLayout)
		_, _, err = l.HeldBlocks(0, 1)
		require.ErrorIs(t, err, ErrInvalidLayout)
		dst, err := l.AppendTouched([]UnitRef{{1, 2}}, Selection{})
		require.ErrorIs(t, err, ErrInvalidLayout)
		assert.Equal(t, []UnitRef{{1, 2}}, dst)
		_, err = l.Touched(Selection{})
		require.ErrorIs(t, err, ErrInvalidLayout)
		got, err := l.AppendKVLayers(nil, 0)
		require.ErrorIs(t, err, ErrInvalidLayout)
		assert.Nil(t, got)
		assert.Zero(t, l.TokensPerUnit())
		assert.Zero(t, l.UnitsPerBlock())
		assert.Zero(t, l.BlockBytes())
		assert.Zero(t, l.Kind())
		assert.Nil(t, l.Pools())
		assert.Equal(t, Strides{}, l.Strides())
		assert.Equal(t, 0, l.Model().Layers)
	}
}

func TestOutOfRange(t *testing.T) {
	m := SeedModel()
	m.CLAFactor = 2 // 14 KV layers
	l := mustNew(t, m, BSA, 32)

	_, err := m.KVLayerOf(28)
	require.ErrorIs(t, err, ErrOutOfRange)
	_, err = m.KVLayerOf(-1)
	require.ErrorIs(t, err, ErrOutOfRange)
	_, _, err = m.ServedLayers(14)
	require.ErrorIs(t, err, ErrOutOfRange)
	_, err = m.KVWindow(-1)
	require.ErrorIs(t, err, ErrOutOfRange)

	for _, i := range []int{-1, 14 * 8} {
		_, err = l.Slice(i)
		require.ErrorIs(t, err, ErrOutOfRange, "slice %d", i)
		_, _, err = l.HeldBlocks(i, 10)
		require.ErrorIs(t, err, ErrOutOfRange)
		_, err = l.AppendKVLayers(nil, i)
		require.ErrorIs(t, err, ErrOutOfRange)
	}
	_, err = l.SliceOf(14, 0)
	require.ErrorIs(t, err, ErrOutOfRange)
	_, err = l.SliceOf(0, 8)
	require.ErrorIs(t, err, ErrOutOfRange)

	good := Element{KVLayer: 13, KVHead: 7, Component: Value, Token: 31, Dim: 1023}
	_, _, err = l.Locate(good)
	require.NoError(t, err)
	bad := []Element{
		{KVLayer: 14}, {KVLayer: -1}, {KVHead: 8}, {KVHead: -1}, {Token: 32}, {Token: -1},
		{Dim: 1024}, {Dim: -1}, {Component: Latent}, {Component: -1}, {Component: 3},
	}
	for _, e := range bad {
		_, _, err = l.Locate(e)
		require.ErrorIs(t, err, ErrOutOfRange, "%+v", e)
	}

	mla := mustNew(t, DeepSeekV2(), PagedLayer, 64)
	_, _, err = mla.Locate(Element{Component: Latent, Dim: 575})
	require.NoError(t, err)
	for _, e := range []Element{{Component: Key}, {Component: Value}, {Component: Latent, Dim: 576}, {Component: Latent, KVHead: 1}} {
		_, _, err = mla.Locate(e)
		require.ErrorIs(t, err, ErrOutOfRange, "%+v", e)
	}
}

func TestInvalidSelections(t *testing.T) {
	m := Model{Layers: 2, QueryHeads: 4, KVHeads: 2, HeadDim: 8, ElemBytes: 2}
	l := mustNew(t, m, BSA, 4)
	good := func() Selection {
		return Selection{Tokens: 16, Blocks: [][][]int64{{{0}, {1}, {2}, {3}}, {{}, {}, {}, {3}}}}
	}
	_, err := l.Touched(good())
	require.NoError(t, err)

	shape := []func(*Selection){
		func(s *Selection) { s.Blocks = s.Blocks[:1] },
		func(s *Selection) { s.Blocks[1] = s.Blocks[1][:3] },
		func(s *Selection) { s.Tokens = -1 },
		func(s *Selection) { s.BlockTokens = -4 },
		func(s *Selection) { s.Blocks = nil },
	}
	for i, edit := range shape {
		sel := good()
		edit(&sel)
		_, err := l.Touched(sel)
		require.ErrorIs(t, err, ErrInvalidSelection, "case %d", i)
	}
	blocks := []func(*Selection){
		func(s *Selection) { s.Blocks[1][3] = []int64{4} },
		func(s *Selection) { s.Blocks[0][0] = []int64{-1} },
		func(s *Selection) { s.Tokens = 13 }, // 4 blocks still: block 3 holds token 12
		func(s *Selection) { s.Tokens = 12 }, // block 3 no longer exists
		func(s *Selection) { s.Tokens = 0 },
		func(s *Selection) { s.BlockTokens = 8 }, // only blocks 0 and 1
	}
	wantErr := []bool{true, true, false, true, true, true}
	for i, edit := range blocks {
		sel := good()
		edit(&sel)
		prefix := []UnitRef{{Slice: 99, Block: 99}}
		got, err := l.AppendTouched(prefix, sel)
		if !wantErr[i] {
			require.NoError(t, err, "case %d", i)
			continue
		}
		require.ErrorIs(t, err, ErrOutOfRange, "case %d", i)
		assert.Equal(t, prefix, got, "dst is left unchanged on error")
		assert.Contains(t, err.Error(), "selects block")
	}
	_, err = l.Footprint(-1)
	require.ErrorIs(t, err, ErrOutOfRange)
	_, _, err = l.HeldBlocks(0, -1)
	require.ErrorIs(t, err, ErrOutOfRange)
}

func TestSentinelsAreDistinct(t *testing.T) {
	all := []error{ErrInvalidModel, ErrInvalidLayout, ErrInvalidSelection, ErrOutOfRange, ErrOverflow}
	for i, a := range all {
		for j, b := range all {
			assert.Equal(t, i == j, errors.Is(a, b), "%v vs %v", a, b)
		}
		assert.Contains(t, a.Error(), "layout: ")
	}
}
