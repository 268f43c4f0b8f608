package layout

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// touchedByTokenScan is the reference for AppendTouched: it visits every
// selected token of every (layer, query head) and marks the unit that holds
// it in the slice that stores that head's KV, unless the token is outside
// the slice's window.
func touchedByTokenScan(t *testing.T, l *Layout, sel Selection) map[UnitRef]bool {
	m := l.Model()
	bt := int64(sel.BlockTokens)
	if bt == 0 {
		bt = int64(l.TokensPerUnit())
	}
	group := m.QueryHeads / m.StoredHeads()
	want := map[UnitRef]bool{}
	for layer, heads := range sel.Blocks {
		k, err := m.KVLayerOf(layer)
		require.NoError(t, err)
		for q, blocks := range heads {
			slice, err := l.SliceOf(k, q/group)
			require.NoError(t, err)
			s, err := l.Slice(slice)
			require.NoError(t, err)
			for _, b := range blocks {
				for pos := b * bt; pos < (b+1)*bt && pos < sel.Tokens; pos++ {
					if s.Window > 0 && pos < sel.Tokens-int64(s.Window) {
						continue
					}
					want[UnitRef{Slice: slice, Block: pos / int64(l.TokensPerUnit())}] = true
				}
			}
		}
	}
	return want
}

func randomSelection(rng *rand.Rand, m Model, unitTokens int) Selection {
	sel := Selection{Tokens: 1 + rng.Int64N(80), Blocks: make([][][]int64, m.Layers)}
	if rng.IntN(3) > 0 {
		sel.BlockTokens = []int{1, 3, 4, 8, 16, 32}[rng.IntN(6)]
	}
	bt := int64(sel.BlockTokens)
	if bt == 0 {
		bt = int64(unitTokens)
	}
	numBlocks := (sel.Tokens + bt - 1) / bt
	for layer := range sel.Blocks {
		sel.Blocks[layer] = make([][]int64, m.QueryHeads)
		for q := range sel.Blocks[layer] {
			for range rng.IntN(4) {
				sel.Blocks[layer][q] = append(sel.Blocks[layer][q], rng.Int64N(numBlocks))
			}
		}
	}
	return sel
}

func TestTouchedAgainstTokenScan(t *testing.T) {
	rng := newRand(t)
	var buf []UnitRef
	for range 500 {
		m := randomModel(rng)
		kind := Kinds()[rng.IntN(3)]
		l := mustNew(t, m, kind, []int{2, 4, 8, 16}[rng.IntN(4)])
		sel := randomSelection(rng, m, l.TokensPerUnit())
		want := touchedByTokenScan(t, l, sel)

		var err error
		buf, err = l.AppendTouched(buf[:0], sel)
		require.NoError(t, err)
		require.Len(t, buf, len(want), "%v %+v %+v", kind, m, sel)
		wantBytes := int64(0)
		for i, r := range buf {
			require.True(t, want[r], "%v: unexpected %+v", kind, r)
			if i > 0 {
				prev := buf[i-1]
				require.True(t, prev.Slice < r.Slice || prev.Slice == r.Slice && prev.Block < r.Block, "ordered and unique")
			}
			s, err := l.Slice(r.Slice)
			require.NoError(t, err)
			wantBytes += s.UnitBytes
		}
		got, err := l.Touched(sel)
		require.NoError(t, err)
		assert.Equal(t, Usage{Units: int64(len(want)), Bytes: wantBytes}, got)
	}
}

// TestUnionRules checks the two union rules on a tiny GQA model with
// one-token units: paged pages are the union over all query heads; BSA
// blocks are the union over each KV head's group only.
func TestUnionRules(t *testing.T) {
	m := Model{Layers: 1, QueryHeads: 4, KVHeads: 2, HeadDim: 1, ElemBytes: 1}
	sel := Selection{Tokens: 8, BlockTokens: 2, Blocks: [][][]int64{{{0}, {0, 1}, {2}, {3, 3}}}}

	paged, err := mustNew(t, m, PagedLayer, 2).AppendTouched(nil, sel)
	require.NoError(t, err)
	assert.Equal(t, []UnitRef{{0, 0}, {0, 1}, {0, 2}, {0, 3}}, paged)

	bsa, err := mustNew(t, m, BSA, 2).AppendTouched(nil, sel)
	require.NoError(t, err)
	assert.Equal(t, []UnitRef{{0, 0}, {0, 1}, {1, 2}, {1, 3}}, bsa)

	// A selection block of 4 tokens over 2-token units touches 2 units; one
	// of 2 tokens over 8-token units touches the unit containing it.
	sel = Selection{Tokens: 8, BlockTokens: 4, Blocks: [][][]int64{{{1}, {}, {}, {}}}}
	got, err := mustNew(t, m, PagedLayer, 2).AppendTouched(nil, sel)
	require.NoError(t, err)
	assert.Equal(t, []UnitRef{{0, 2}, {0, 3}}, got)
	sel = Selection{Tokens: 8, BlockTokens: 2, Blocks: [][][]int64{{{}, {}, {}, {0, 3}}}}
	got, err = mustNew(t, m, PagedLayer, 8).AppendTouched(nil, sel)
	require.NoError(t, err)
	assert.Equal(t, []UnitRef{{0, 0}}, got)
}

func TestTouchedSkipsBlocksOutsideTheWindow(t *testing.T) {
	m := Model{Layers: 2, QueryHeads: 1, KVHeads: 1, HeadDim: 1, ElemBytes: 1, Windows: []int{0, 8}}
	l := mustNew(t, m, PagedLayer, 4)
	// 20 tokens: layer 1 keeps tokens 12..19, so blocks 0..2 are gone.
	sel := Selection{Tokens: 20, Blocks: [][][]int64{{{0, 4}}, {{0, 2, 3, 4}}}}
	got, err := l.AppendTouched(nil, sel)
	require.NoError(t, err)
	assert.Equal(t, []UnitRef{{0, 0}, {0, 4}, {1, 3}, {1, 4}}, got)
}

func TestAppendTouchedReusesItsBuffer(t *testing.T) {
	m := SeedModel()
	l := mustNew(t, m, PagedLayer, 32)
	sel := worstCaseSelection(m, 4096, 512, 3)
	buf, err := l.AppendTouched(nil, sel)
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(20, func() {
		buf, err = l.AppendTouched(buf[:0], sel)
	})
	require.NoError(t, err)
	assert.Zero(t, allocs)
	assert.Len(t, buf, 8*16*28)
}

// TestTouchedLongSequences covers sequences of more than 4096 selection
// blocks, which deduplicate by sorting instead of the on-stack bitmap, and
// checks them against the same token-scan reference.
func TestTouchedLongSequences(t *testing.T) {
	rng := newRand(t)
	for range 30 {
		m := randomModel(rng)
		kind := Kinds()[rng.IntN(3)]
		l := mustNew(t, m, kind, []int{2, 4, 8}[rng.IntN(3)])
		sel := Selection{Tokens: 8193 + rng.Int64N(8000), BlockTokens: 1 + rng.IntN(2), Blocks: make([][][]int64, m.Layers)}
		numBlocks := (sel.Tokens + int64(sel.BlockTokens) - 1) / int64(sel.BlockTokens)
		require.Greater(t, numBlocks, int64(bitmapWords*64))
		for layer := range sel.Blocks {
			sel.Blocks[layer] = make([][]int64, m.QueryHeads)
			for q := range sel.Blocks[layer] {
				for range rng.IntN(6) {
					b := rng.Int64N(numBlocks)
					if rng.IntN(2) == 0 {
						b = numBlocks - 1 - rng.Int64N(20) // near the end, inside windows
					}
					sel.Blocks[layer][q] = append(sel.Blocks[layer][q], b)
				}
			}
		}
		want := touchedByTokenScan(t, l, sel)
		got, err := l.AppendTouched(nil, sel)
		require.NoError(t, err)
		require.Len(t, got, len(want))
		for i, r := range got {
			require.True(t, want[r], "unexpected %+v", r)
			if i > 0 {
				require.True(t, got[i-1].Slice < r.Slice || got[i-1].Slice == r.Slice && got[i-1].Block < r.Block)
			}
		}
		// An out-of-range block is still caught on this path.
		sel.Blocks[0][0] = append(sel.Blocks[0][0], numBlocks)
		prefix := []UnitRef{{7, 7}}
		out, err := l.AppendTouched(prefix, sel)
		require.ErrorIs(t, err, ErrOutOfRange)
		require.Equal(t, prefix, out)
	}
}
