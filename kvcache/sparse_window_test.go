package kvcache

import (
	"errors"
	"testing"

	"github.com/kvtier/kvtier/layout"
	"github.com/stretchr/testify/require"
)

// sparseBlocks returns the blocks of res's units, in order.
func sparseBlocks(res *SparseResult) []int {
	var out []int
	for _, u := range res.Units {
		out = append(out, u.Block)
	}
	return out
}

// TestSparseKeepTouchesTheWindowOfOlderTokens: restoring a unit of block 4
// at a full-attention layer runs positions 32..39 through the layers below,
// and layer 1's 20-token window of position 32 reaches back to block 1: a
// Keep access that names those queries touches blocks 1 to 4, though the
// window of the sequence's last token (position 103) starts at block 10.
func TestSparseKeepTouchesTheWindowOfOlderTokens(t *testing.T) {
	lm := layout.Model{Name: "w", Layers: 3, QueryHeads: 2, KVHeads: 2, HeadDim: 4, ElemBytes: 4, Windows: []int{0, 20, 0}}
	lay, err := layout.New(lm, layout.PagedLayer, 8)
	require.NoError(t, err)
	c, err := New(Config{Layout: lay, Tiers: GPUAndCPU(Capacity{Units: 300}, Capacity{Units: 300})})
	require.NoError(t, err)
	p, err := c.Acquire(Request{Sparse: true})
	require.NoError(t, err)
	for i := range 104 {
		_, err := c.Append(p.Seq, uint32(i%50))
		require.NoError(t, err)
	}
	var res SparseResult
	require.NoError(t, c.SparseAccess(p.Seq, Selection{Layer: 2, Blocks: [][]int{{4}, {4}}}, &res))
	blocks := [][]int{{1, 2, 3, 4}, {1, 2, 3, 4}}
	require.NoError(t, c.SparseAccess(p.Seq, Selection{Layer: 1, Blocks: blocks, Keep: true}, &res))
	require.Empty(t, res.Units, "without Queries, the window is the last token's")
	require.NoError(t, c.SparseAccess(p.Seq, Selection{Layer: 1, Blocks: blocks, Keep: true, Queries: TokenRange{Start: 32, End: 40}}, &res))
	require.Equal(t, []int{1, 2, 3, 4}, sparseBlocks(&res))
	// The layer 2 unit of block 4 is still pinned with them.
	table, err := c.BlockTable(nil, p.Seq, 2)
	require.NoError(t, err)
	require.NotEqual(t, int32(-1), table[4])

	for _, q := range []TokenRange{{Start: -1, End: 3}, {Start: 5, End: 5}, {Start: 100, End: 105}} {
		err := c.SparseAccess(p.Seq, Selection{Layer: 1, Blocks: blocks, Queries: q}, &res)
		require.True(t, errors.Is(err, ErrOutOfRange), "%+v: %v", q, err)
		require.ErrorContains(t, err, "queries")
	}
}

// TestSparseAppendOfSeveralTokensKeepsTheFirstWindow: after an Append of
// tokens 16..23 with a 12-token window, the step's first query (position
// 16) reads positions 5..16, so the layer's access touches block 0.
func TestSparseAppendOfSeveralTokensKeepsTheFirstWindow(t *testing.T) {
	lm := layout.Model{Name: "w", Layers: 2, QueryHeads: 2, KVHeads: 2, HeadDim: 4, ElemBytes: 4, Windows: []int{0, 12}}
	lay, err := layout.New(lm, layout.PagedLayer, 8)
	require.NoError(t, err)
	c, err := New(Config{Layout: lay, Tiers: GPUAndCPU(Capacity{Units: 100}, Capacity{})})
	require.NoError(t, err)
	p, err := c.Acquire(Request{Tokens: make([]uint32, 24), Sparse: true})
	require.NoError(t, err)
	for range 2 {
		_, err := c.Append(p.Seq, make([]uint32, 8)...)
		require.NoError(t, err)
	}
	var res SparseResult
	require.NoError(t, c.SparseAccess(p.Seq, Selection{Layer: 1, Blocks: [][]int{{0, 1}, {0, 1}}}, &res))
	require.Equal(t, []int{0, 1}, sparseBlocks(&res), "tokens 8..15: position 8 reads from position 0")
	_, err = c.Append(p.Seq, make([]uint32, 8)...)
	require.NoError(t, err)
	require.NoError(t, c.SparseAccess(p.Seq, Selection{Layer: 1, Blocks: [][]int{{0, 1, 2}, {0, 1, 2}}}, &res))
	require.Equal(t, []int{0, 1, 2}, sparseBlocks(&res), "tokens 16..23: position 16 reads from position 5")
	_, err = c.Append(p.Seq, 1)
	require.NoError(t, err)
	require.NoError(t, c.SparseAccess(p.Seq, Selection{Layer: 1, Blocks: [][]int{{0, 1, 2}, {0, 1, 2}}}, &res))
	require.Equal(t, []int{1, 2}, sparseBlocks(&res), "token 24 reads from position 13")
}
