package layout

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMillionTokenContextOf405B(t *testing.T) {
	m := Llama31_405B()
	perToken, err := m.BytesPerToken()
	require.NoError(t, err)
	assert.Equal(t, int64(126*2*8*128*2), perToken) // 516,096 bytes
	const tokens = 1 << 20
	for _, kind := range Kinds() {
		l := mustNew(t, m, kind, 64)
		got, err := l.Footprint(tokens)
		require.NoError(t, err)
		assert.Equal(t, perToken*tokens, got.Bytes, "%v", kind) // ≈ 504 GiB
		assert.Equal(t, int64(l.UnitsPerBlock())*tokens/64, got.Units)
	}
}

func TestFootprintOverflow(t *testing.T) {
	l := mustNew(t, Llama31_405B(), PagedLayer, 64)
	_, err := l.Footprint(math.MaxInt64)
	require.ErrorIs(t, err, ErrOverflow)
	assert.Contains(t, err.Error(), "9223372036854775807")

	// The largest token count that fits is accepted and exact.
	perToken, err := Llama31_405B().BytesPerToken()
	require.NoError(t, err)
	tokens := math.MaxInt64 / perToken / 64 * 64
	got, err := l.Footprint(tokens)
	require.NoError(t, err)
	assert.Equal(t, tokens*perToken, got.Bytes)
}

func TestHugeGeometryOverflows(t *testing.T) {
	// Each factor is fine on its own; the products are not.
	m := Model{Layers: 1 << 20, QueryHeads: 1 << 10, KVHeads: 1 << 10, HeadDim: 1 << 30, ElemBytes: 4} // 2^63 bytes per token
	err := m.Validate()
	require.ErrorIs(t, err, ErrOverflow)

	// Bytes per token fit, but a 2^40-token unit does not.
	m = Model{Layers: 1, QueryHeads: 1 << 10, KVHeads: 1 << 10, HeadDim: 1 << 10, ElemBytes: 4}
	require.NoError(t, m.Validate())
	_, err = New(m, BSA, 1<<40)
	require.ErrorIs(t, err, ErrOverflow)

	// A unit fits, a block over every layer does not. (Every size is at
	// its maximum or below; 2^40 layers is an invalid model, see
	// TestAbsurdGeometryIsRejected.)
	m = Model{Layers: 1 << 16, QueryHeads: 1, KVHeads: 1, HeadDim: 1 << 16, ElemBytes: 8}
	require.NoError(t, m.Validate())
	_, err = New(m, PagedLayer, 1<<28)
	require.ErrorIs(t, err, ErrOverflow)
}

func TestSelectionNearInt64Limits(t *testing.T) {
	// One latent element per token: a 2^62-token unit is 2^62 bytes.
	m := Model{Layers: 1, QueryHeads: 1, KVHeads: 1, HeadDim: 1, ElemBytes: 1, MLALatentDims: 1}
	l := mustNew(t, m, PagedLayer, 1<<62)
	// A sequence of MaxInt64 tokens in selection blocks of 2^61: 4 blocks,
	// the last one partial. Block 3 lies in unit 1, block 0 in unit 0.
	sel := Selection{Tokens: math.MaxInt64, BlockTokens: 1 << 61, Blocks: [][][]int64{{{3, 0}}}}
	refs, err := l.AppendTouched(nil, sel)
	require.NoError(t, err)
	assert.Equal(t, []UnitRef{{0, 0}, {0, 1}}, refs)
	sel.Blocks[0][0] = []int64{4}
	_, err = l.AppendTouched(nil, sel)
	require.ErrorIs(t, err, ErrOutOfRange)

	// Two units of 2^62 bytes overflow an int64 byte count.
	sel.Blocks[0][0] = []int64{0, 3}
	_, err = l.Touched(sel)
	require.ErrorIs(t, err, ErrOverflow)
	got, err := l.Footprint(1 << 62)
	require.NoError(t, err)
	assert.Equal(t, Usage{Units: 1, Bytes: 1 << 62}, got)
	_, err = l.Footprint(1<<62 + 1)
	require.ErrorIs(t, err, ErrOverflow)
}

func TestCheckedArithmetic(t *testing.T) {
	_, ok := mul64(math.MaxInt64, 2)
	assert.False(t, ok)
	_, ok = mul64(1<<32, 1<<31)
	assert.False(t, ok)
	v, ok := mul64(1<<31, 1<<31)
	assert.True(t, ok)
	assert.Equal(t, int64(1)<<62, v)
	_, ok = mul64(-1, 1)
	assert.False(t, ok)
	_, ok = add64(math.MaxInt64, 1)
	assert.False(t, ok)
	v, ok = add64(math.MaxInt64-1, 1)
	assert.True(t, ok)
	assert.Equal(t, int64(math.MaxInt64), v)
	assert.Equal(t, int64(math.MaxInt64/2+1), ceilDiv(math.MaxInt64, 2))
}
