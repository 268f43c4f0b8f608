package layout

import "testing"

const (
	kib = int64(1) << 10
	mib = int64(1) << 20
	gib = int64(1) << 30
)

// mustNew builds a layout or stops the test.
func mustNew(t testing.TB, m Model, kind Kind, tokens int) *Layout {
	t.Helper()
	l, err := New(m, kind, tokens)
	if err != nil {
		t.Fatalf("New(%+v, %v, %d): %v", m, kind, tokens, err)
	}
	return l
}

// worstCaseSelection builds the MoBA selection that reads the most units: in
// every layer each query head selects topK distinct blocks, always the
// current (last) block plus topK-1 others, and the heads spread their other
// picks round-robin over the earlier blocks so that no two heads repeat a
// block until all earlier blocks are taken. Consecutive heads (one GQA
// group) therefore pick disjoint blocks too, which maximizes both the union
// over all heads (paged) and the union per KV head group (BSA).
func worstCaseSelection(m Model, tokens int64, blockTokens, topK int) Selection {
	numBlocks := (tokens + int64(blockTokens) - 1) / int64(blockTokens)
	current := numBlocks - 1
	others := min(int64(topK-1), current)
	sel := Selection{Tokens: tokens, BlockTokens: blockTokens, Blocks: make([][][]int64, m.Layers)}
	for layer := range sel.Blocks {
		heads := make([][]int64, m.QueryHeads)
		for q := range heads {
			picks := []int64{current}
			for j := range others {
				picks = append(picks, (int64(q)*others+j)%current)
			}
			heads[q] = picks
		}
		sel.Blocks[layer] = heads
	}
	return sel
}
