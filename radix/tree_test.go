package radix

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mustTree(t testing.TB, b int) *Tree[int] {
	t.Helper()
	tr, err := NewTree[int](b, 11)
	require.NoError(t, err)
	return tr
}

// collidingTree returns a tree whose hasher maps every block to hash 0, so
// only token verification separates blocks.
func collidingTree(t testing.TB, b int) *Tree[int] {
	t.Helper()
	h := mustHasher(t, b, 11)
	h.mask = 0
	return newTree[int](h)
}

func values(nodes []*Node[int]) []int {
	out := make([]int, len(nodes))
	for i, n := range nodes {
		out[i] = n.Value
	}
	return out
}

func TestInsertAndMatch(t *testing.T) {
	tr := mustTree(t, 4)
	assert.Equal(t, 4, tr.BlockTokens())
	prompt := seq(14, func(i int) uint32 { return uint32(i) }) // 3 full blocks + 2
	nodes, created, err := tr.Insert(nil, Keys{}, prompt, nil)
	require.NoError(t, err)
	require.Len(t, nodes, 3)
	require.Equal(t, 3, created)
	require.Equal(t, 3, tr.Len())
	for i, n := range nodes {
		n.Value = 100 + i
		assert.Equal(t, i+1, n.Depth())
		assert.Equal(t, prompt[i*4:(i+1)*4], n.Tokens())
	}
	assert.Nil(t, nodes[0].Parent())
	assert.Same(t, nodes[0], nodes[1].Parent())
	_, ok := nodes[0].ParentHash()
	assert.False(t, ok)
	ph, ok := nodes[2].ParentHash()
	assert.True(t, ok)
	assert.Equal(t, nodes[1].Hash(), ph)

	// The node owns its tokens: changing the caller's slice changes nothing.
	prompt[0] = 999
	assert.Equal(t, uint32(0), nodes[0].Tokens()[0])
	prompt[0] = 0

	// A longer prompt sharing two blocks reuses them.
	other := append(slices.Clone(prompt[:8]), 50, 51, 52, 53, 54)
	got, created, err := tr.Insert(nil, Keys{}, other, nil)
	require.NoError(t, err)
	require.Equal(t, 1, created)
	require.Equal(t, []int{100, 101, 0}, values(got))
	assert.Equal(t, 2, nodes[1].NumChildren())

	m, err := tr.Match(nil, Keys{}, prompt, nil)
	require.NoError(t, err)
	assert.Equal(t, []int{100, 101, 102}, values(m))
	m, err = tr.Match(m[:0], Keys{}, prompt[:11], nil)
	require.NoError(t, err)
	assert.Equal(t, []int{100, 101}, values(m), "only whole blocks match")
	m, err = tr.Match(nil, Keys{}, []uint32{0, 1, 2, 9}, nil)
	require.NoError(t, err)
	assert.Empty(t, m)

	hashes, err := tr.Hasher().Hash(nil, Keys{}, prompt, nil)
	require.NoError(t, err)
	for i, n := range nodes {
		assert.Equal(t, hashes[i], n.Hash())
	}
}

func TestInsertChild(t *testing.T) {
	tr := mustTree(t, 2)
	k := Keys{Namespace: "tenant", LoRA: "sql"}
	a, created, err := tr.InsertChild(nil, k, []uint32{1, 2}, nil)
	require.NoError(t, err)
	require.True(t, created)
	b, created, err := tr.InsertChild(a, k, []uint32{3, 4}, []ExtraKey{{Pos: 0, Value: 5}, {Pos: 3, Value: 6}, {Pos: 4, Value: 7}})
	require.NoError(t, err)
	require.True(t, created)
	assert.Equal(t, []ExtraKey{{Pos: 3, Value: 6}}, b.Extra(), "only the block's own keys are kept")
	assert.Equal(t, k, b.Keys())
	again, created, err := tr.InsertChild(a, k, []uint32{3, 4}, []ExtraKey{{Pos: 3, Value: 6}})
	require.NoError(t, err)
	assert.False(t, created)
	assert.Same(t, b, again)

	want, err := tr.Hasher().Hash(nil, k, []uint32{1, 2, 3, 4}, []ExtraKey{{Pos: 3, Value: 6}})
	require.NoError(t, err)
	assert.Equal(t, want, []uint64{a.Hash(), b.Hash()})

	_, _, err = tr.InsertChild(a, k, []uint32{1, 2, 3}, nil)
	require.ErrorIs(t, err, ErrInvalidBlock)
	assert.Contains(t, err.Error(), "3 tokens, want 2")
	_, _, err = tr.InsertChild(a, Keys{Namespace: "tenant"}, []uint32{1, 2}, nil)
	require.ErrorIs(t, err, ErrKeysMismatch)
	_, _, err = tr.InsertChild(a, k, []uint32{1, 2}, []ExtraKey{{Pos: 5}, {Pos: 4}})
	require.ErrorIs(t, err, ErrInvalidExtraKey)

	foreign := mustTree(t, 2)
	fn, _, err := foreign.InsertChild(nil, k, []uint32{1, 2}, nil)
	require.NoError(t, err)
	_, _, err = tr.InsertChild(fn, k, []uint32{1, 2}, nil)
	require.ErrorIs(t, err, ErrNotInTree, "a node of another tree, even one with the same hash")
	assert.Equal(t, fn.Hash(), a.Hash())
	require.Equal(t, 2, tr.Len(), "errors leave the tree unchanged")
}

func TestRemove(t *testing.T) {
	tr := mustTree(t, 2)
	nodes, _, err := tr.Insert(nil, Keys{}, []uint32{1, 2, 3, 4, 5, 6}, nil)
	require.NoError(t, err)

	err = tr.Remove(nodes[1])
	require.ErrorIs(t, err, ErrNotLeaf)
	require.ErrorIs(t, tr.Remove(nil), ErrNotInTree)
	_, err = tr.RemoveSubtree(nil, nil)
	require.ErrorIs(t, err, ErrNotInTree)

	require.NoError(t, tr.Remove(nodes[2]))
	require.ErrorIs(t, tr.Remove(nodes[2]), ErrNotInTree)
	assert.True(t, nodes[1].IsLeaf())
	assert.Equal(t, 2, tr.Len())
	// A removed node keeps what a "removed" event needs.
	assert.Equal(t, []uint32{5, 6}, nodes[2].Tokens())
	assert.Nil(t, nodes[2].Parent())

	m, err := tr.Match(nil, Keys{}, []uint32{1, 2, 3, 4, 5, 6}, nil)
	require.NoError(t, err)
	assert.Len(t, m, 2)

	other := mustTree(t, 2)
	on, _, err := other.Insert(nil, Keys{}, []uint32{1, 2}, nil)
	require.NoError(t, err)
	require.ErrorIs(t, tr.Remove(on[0]), ErrNotInTree)
	assert.Equal(t, 1, other.Len())
}

func TestRemoveSubtree(t *testing.T) {
	tr := mustTree(t, 2)
	a, _, err := tr.Insert(nil, Keys{}, []uint32{1, 1, 2, 2, 3, 3}, nil)
	require.NoError(t, err)
	b, _, err := tr.Insert(nil, Keys{}, []uint32{1, 1, 2, 2, 4, 4, 5, 5}, nil)
	require.NoError(t, err)
	c, _, err := tr.Insert(nil, Keys{}, []uint32{1, 1, 6, 6}, nil)
	require.NoError(t, err)
	_, _, err = tr.Insert(nil, Keys{}, []uint32{9, 9}, nil)
	require.NoError(t, err)
	require.Equal(t, 7, tr.Len())

	var order [][]uint32
	removed, err := tr.RemoveSubtree(a[1], func(n *Node[int]) {
		assert.True(t, n.IsLeaf())
		assert.NotNil(t, n.Parent(), "still attached during the callback")
		order = append(order, n.Tokens())
	})
	require.NoError(t, err)
	assert.Equal(t, 4, removed)
	assert.Equal(t, [][]uint32{{3, 3}, {5, 5}, {4, 4}, {2, 2}}, order, "children before parents, in insertion order")
	assert.Equal(t, 3, tr.Len())
	assert.Equal(t, 1, a[0].NumChildren())
	assert.Same(t, c[1], slices.Collect(a[0].Children())[0])
	_, err = tr.RemoveSubtree(b[3], nil)
	require.ErrorIs(t, err, ErrNotInTree)

	count := 0
	assert.Equal(t, 3, tr.Clear(func(*Node[int]) { count++ }))
	assert.Equal(t, 3, count)
	assert.Zero(t, tr.Len())
	assert.Empty(t, slices.Collect(tr.All()))
	assert.Empty(t, tr.byHash)
	assert.Empty(t, tr.overflow)
}

// TestNamespacesNeverShare checks isolation by namespace and LoRA, with real
// hashes and with every hash forced equal.
func TestNamespacesNeverShare(t *testing.T) {
	for name, tr := range map[string]*Tree[int]{"xxhash": mustTree(t, 2), "colliding": collidingTree(t, 2)} {
		t.Run(name, func(t *testing.T) {
			tokens := []uint32{1, 2, 3, 4}
			keys := []Keys{{}, {Namespace: "a"}, {Namespace: "b"}, {LoRA: "a"}, {Namespace: "a", LoRA: "a"}}
			for i, k := range keys {
				nodes, created, err := tr.Insert(nil, k, tokens, nil)
				require.NoError(t, err)
				require.Equal(t, 2, created, "keys %+v share nothing", k)
				for _, n := range nodes {
					n.Value = i
					assert.Equal(t, k, n.Keys())
				}
			}
			for i, k := range keys {
				m, err := tr.Match(nil, k, tokens, nil)
				require.NoError(t, err)
				require.Equal(t, []int{i, i}, values(m))
				_, p, err := tr.MatchPartial(nil, k, []uint32{1, 9}, nil)
				require.NoError(t, err)
				require.NotNil(t, p.Node)
				assert.Equal(t, i, p.Node.Value, "partial reuse stays in the namespace")
			}
			m, err := tr.Match(nil, Keys{Namespace: "c"}, tokens, nil)
			require.NoError(t, err)
			assert.Empty(t, m)
		})
	}
}

// TestCollisionsNeverAlias forces every hash to 0 and checks that each of
// many distinct sequences matches exactly its own nodes.
func TestCollisionsNeverAlias(t *testing.T) {
	tr := collidingTree(t, 4)
	r := rand.New(rand.NewPCG(8, 9))
	type entry struct {
		tokens []uint32
		extra  []ExtraKey
		id     int
	}
	var entries []entry
	for i := range 300 {
		tokens := seq(4*(1+r.IntN(3)), func(int) uint32 { return uint32(r.IntN(2)) })
		var extra []ExtraKey
		if r.IntN(3) == 0 {
			extra = []ExtraKey{{Pos: r.IntN(len(tokens)), Value: uint64(r.IntN(2))}}
		}
		nodes, _, err := tr.Insert(nil, Keys{}, tokens, extra)
		require.NoError(t, err)
		last := nodes[len(nodes)-1]
		if last.Value == 0 {
			last.Value = i + 1
		}
		entries = append(entries, entry{tokens, extra, last.Value})
	}
	require.Greater(t, len(tr.overflow[0]), 10, "the hasher collides")
	for _, e := range entries {
		m, err := tr.Match(nil, Keys{}, e.tokens, e.extra)
		require.NoError(t, err)
		require.Len(t, m, len(e.tokens)/4)
		last := m[len(m)-1]
		assert.Equal(t, e.id, last.Value)
		// The matched path holds exactly the sequence's tokens.
		var got []uint32
		for _, n := range m {
			got = append(got, n.Tokens()...)
		}
		assert.Equal(t, e.tokens, got)
	}
	// Remove everything leaf-first and check the index empties cleanly.
	for tr.Len() > 0 {
		var leaf *Node[int]
		for n := range tr.All() {
			if n.IsLeaf() {
				leaf = n
			}
		}
		require.NoError(t, tr.Remove(leaf))
	}
	assert.Empty(t, tr.byHash)
	assert.Empty(t, tr.overflow)
}

func TestMatchPartial(t *testing.T) {
	tr := mustTree(t, 4)
	base := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	nodes, _, err := tr.Insert(nil, Keys{}, base, []ExtraKey{{Pos: 6, Value: 9}})
	require.NoError(t, err)
	_, _, err = tr.Insert(nil, Keys{}, []uint32{1, 2, 3, 4, 5, 0, 0, 0}, nil)
	require.NoError(t, err)

	cases := []struct {
		name    string
		tokens  []uint32
		extra   []ExtraKey
		matched int
		node    *Node[int]
		partial int
	}{
		{"tail agrees on 3", []uint32{1, 2, 3, 4, 5, 6, 7}, []ExtraKey{{Pos: 6, Value: 9}}, 1, nodes[1], 3},
		{"tail without the key stops at it", []uint32{1, 2, 3, 4, 5, 6, 7}, nil, 1, nodes[1], 2},
		{"other key value", []uint32{1, 2, 3, 4, 5, 6, 7, 8}, []ExtraKey{{Pos: 6, Value: 1}}, 1, nodes[1], 2},
		{"key earlier than the node's", []uint32{1, 2, 3, 4, 5, 6, 7, 8}, []ExtraKey{{Pos: 5, Value: 9}}, 1, nodes[1], 1},
		{"full block differs at 3", []uint32{1, 2, 3, 4, 5, 6, 7, 0}, []ExtraKey{{Pos: 6, Value: 9}}, 1, nodes[1], 3},
		{"nothing agrees", []uint32{1, 2, 3, 4, 9}, nil, 1, nil, 0},
		{"first block partial", []uint32{1, 2, 9, 9}, nil, 0, nodes[0], 2},
		{"all matched", base, []ExtraKey{{Pos: 6, Value: 9}}, 2, nil, 0},
		{"empty", nil, nil, 0, nil, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, p, err := tr.MatchPartial(nil, Keys{}, c.tokens, c.extra)
			require.NoError(t, err)
			assert.Len(t, m, c.matched)
			assert.Same(t, c.node, p.Node)
			assert.Equal(t, c.partial, p.Tokens)
		})
	}
	_, _, err = tr.MatchPartial(nil, Keys{}, base, []ExtraKey{{Pos: -1}})
	require.ErrorIs(t, err, ErrInvalidExtraKey)
	_, err = tr.Match(nil, Keys{}, base, []ExtraKey{{Pos: 2}, {Pos: 1}})
	require.ErrorIs(t, err, ErrInvalidExtraKey)
}

// TestWalkOrder checks pre-order, insertion order among siblings, and that
// two trees built by the same calls walk identically.
func TestWalkOrder(t *testing.T) {
	build := func() []string {
		tr := mustTree(t, 2)
		for _, p := range [][]uint32{{1, 1, 2, 2}, {3, 3}, {1, 1, 4, 4, 5, 5}, {1, 1, 2, 2, 6, 6}} {
			_, _, err := tr.Insert(nil, Keys{}, p, nil)
			require.NoError(t, err)
		}
		var out []string
		for n := range tr.All() {
			out = append(out, strconv.Itoa(n.Depth())+":"+strconv.Itoa(int(n.Tokens()[0])))
		}
		var roots []uint32
		for n := range tr.Roots() {
			roots = append(roots, n.Tokens()[0])
		}
		assert.Equal(t, []uint32{1, 3}, roots)
		return out
	}
	first := build()
	assert.Equal(t, []string{"1:1", "2:2", "3:6", "2:4", "3:5", "1:3"}, first)
	assert.Equal(t, first, build())
}

func TestMatchAndInsertChildAllocs(t *testing.T) {
	tr := mustTree(t, 16)
	prompt := seq(8192, func(i int) uint32 { return uint32(i) })
	nodes, _, err := tr.Insert(nil, Keys{Namespace: "n"}, prompt, []ExtraKey{{Pos: 40, Value: 1}})
	require.NoError(t, err)
	// Widen a node so the hashed lookup path runs too.
	for i := range 10 {
		_, _, err := tr.InsertChild(nodes[10], Keys{Namespace: "n"}, seq(16, func(int) uint32 { return uint32(i) }), nil)
		require.NoError(t, err)
	}
	dst := make([]*Node[int], 0, len(nodes))
	allocs := testing.AllocsPerRun(20, func() {
		dst, err = tr.Match(dst[:0], Keys{Namespace: "n"}, prompt, []ExtraKey{{Pos: 40, Value: 1}})
	})
	require.NoError(t, err)
	assert.Zero(t, allocs, "Match")
	assert.Len(t, dst, len(nodes))
	allocs = testing.AllocsPerRun(20, func() {
		dst, _, err = tr.MatchPartial(dst[:0], Keys{Namespace: "n"}, prompt[:8190], []ExtraKey{{Pos: 40, Value: 1}})
	})
	assert.Zero(t, allocs, "MatchPartial")
	allocs = testing.AllocsPerRun(20, func() {
		_, _, err = tr.InsertChild(nodes[10], Keys{Namespace: "n"}, prompt[176:192], nil)
	})
	assert.Zero(t, allocs, "InsertChild of a cached block")
}

// TestChild: Child finds what InsertChild would return with false, and
// nil where InsertChild would create a node, without creating it.
func TestChild(t *testing.T) {
	tr := mustTree(t, 2)
	k := Keys{Namespace: "n"}
	nodes, _, err := tr.Insert(nil, k, []uint32{1, 2, 3, 4}, nil)
	require.NoError(t, err)
	got, err := tr.Child(nil, k, []uint32{1, 2}, nil)
	require.NoError(t, err)
	require.Same(t, nodes[0], got)
	got, err = tr.Child(nodes[0], k, []uint32{3, 4}, nil)
	require.NoError(t, err)
	require.Same(t, nodes[1], got)
	got, err = tr.Child(nodes[0], k, []uint32{3, 5}, nil)
	require.NoError(t, err)
	require.Nil(t, got)
	require.Equal(t, 2, tr.Len(), "Child creates nothing")
	_, err = tr.Child(nodes[0], Keys{}, []uint32{3, 4}, nil)
	require.ErrorIs(t, err, ErrKeysMismatch)
	_, err = tr.Child(nodes[0], k, []uint32{3}, nil)
	require.ErrorIs(t, err, ErrInvalidBlock)
}

func TestOwns(t *testing.T) {
	tr, other := mustTree(t, 4), mustTree(t, 4)
	nodes, _, err := tr.Insert(nil, Keys{}, seq(12, func(i int) uint32 { return uint32(i) }), nil)
	require.NoError(t, err)
	require.True(t, tr.Owns(nodes[0]))
	require.True(t, tr.Owns(nodes[2]))
	require.Len(t, nodes, 3)
	require.False(t, other.Owns(nodes[2]), "another tree's node")
	require.False(t, tr.Owns(nil))
	require.NoError(t, tr.Remove(nodes[2]))
	require.False(t, tr.Owns(nodes[2]), "a removed node")
	require.True(t, tr.Owns(nodes[1]))
}
