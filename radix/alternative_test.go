package radix

import (
	"runtime"
	"slices"
	"testing"
)

// childMapNode is the design this package did not choose, kept as a
// measured baseline: a child map per node, keyed by chain hash, with token
// verification (a colliding block replaces the old one: good enough for a
// benchmark baseline, not for a cache). Matching must hash every block to
// probe the maps.
type childMapNode struct {
	hash     uint64
	tokens   []uint32
	children map[uint64]*childMapNode
	value    int // the payload, so nodes weigh what the Tree's Node[int] does
}

func (r *childMapNode) insert(h *Hasher, tokens []uint32) {
	var enc encoder
	b := h.blockTokens
	cur := r
	for start := 0; start+b <= len(tokens); start += b {
		blk := tokens[start : start+b]
		hv := h.hashBlock(&enc, cur.hash, cur == r, Keys{}, start, blk, nil)
		next := cur.children[hv]
		if next == nil || !slices.Equal(next.tokens, blk) {
			next = &childMapNode{hash: hv, tokens: slices.Clone(blk), value: start / b}
			if cur.children == nil {
				cur.children = make(map[uint64]*childMapNode)
			}
			cur.children[hv] = next
		}
		cur = next
	}
}

func (r *childMapNode) match(h *Hasher, tokens []uint32, dst []*childMapNode) []*childMapNode {
	var enc encoder
	b := h.blockTokens
	cur := r
	for start := 0; start+b <= len(tokens); start += b {
		blk := tokens[start : start+b]
		next := cur.children[h.hashBlock(&enc, cur.hash, cur == r, Keys{}, start, blk, nil)]
		if next == nil || !slices.Equal(next.tokens, blk) {
			break
		}
		dst = append(dst, next)
		cur = next
	}
	return dst
}

// BenchmarkChildMapBaseline measures the per-node child map design on the
// same 32k-token match and the same 100k-node "chains" memory shape as
// BenchmarkMatch32k and BenchmarkNodeBytes.
func BenchmarkChildMapBaseline(b *testing.B) {
	h := mustHasher(b, benchBlock, 1)
	b.Run("match32k", func(b *testing.B) {
		root := &childMapNode{hash: h.seed}
		for i := range 1000 {
			root.insert(h, seq(benchBlock, func(j int) uint32 { return uint32(1e6 + i*benchBlock + j) }))
		}
		var prompt []uint32
		for p := range 32 {
			prompt = seq(benchPrompt, func(j int) uint32 {
				if j < 1024 {
					return uint32(j)
				}
				return uint32(p<<20 + j)
			})
			root.insert(h, prompt)
		}
		dst := make([]*childMapNode, 0, benchPrompt/benchBlock)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			dst = root.match(h, prompt, dst[:0])
			if len(dst) != benchPrompt/benchBlock {
				b.Fatal(len(dst))
			}
		}
	})
	b.Run("bytes", func(b *testing.B) {
		const nodes = 100_000
		prompts := make([][]uint32, 100)
		for s := range prompts {
			prompts[s] = seq(nodes/100*benchBlock, func(j int) uint32 { return uint32(s<<20 + j) })
		}
		var total float64
		for range b.N {
			before := heapInUse()
			root := &childMapNode{hash: h.seed}
			for _, p := range prompts {
				root.insert(h, p)
			}
			total += float64(heapInUse()-before) / nodes
			runtime.KeepAlive(root)
		}
		b.ReportMetric(total/float64(b.N), "bytes/node")
	})
}
