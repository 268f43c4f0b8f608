package radix

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// chooser is the source of decisions for the randomized harness: a PRNG in
// TestTreeAgainstReference, the fuzz input in FuzzTree.
type chooser interface {
	// intn returns a value in [0, n); n > 0.
	intn(n int) int
	// done reports that the decision source is exhausted.
	done() bool
}

type randChooser struct{ r *rand.Rand }

func (c *randChooser) intn(n int) int { return c.r.IntN(n) }
func (c *randChooser) done() bool     { return false }

type byteChooser struct{ b []byte }

func (c *byteChooser) intn(n int) int {
	if len(c.b) == 0 {
		return 0
	}
	v := int(c.b[0]) % n
	c.b = c.b[1:]
	return v
}
func (c *byteChooser) done() bool { return len(c.b) == 0 }

// refEntry is one cached block in the reference model: a map from the
// string of a whole prefix (keys, tokens, extra keys) to its payload.
type refEntry struct {
	payload int
	parent  string // key of the prefix one block shorter; "" for first blocks
	keys    Keys
	tokens  []uint32
	extra   []ExtraKey
	depth   int
}

// harness drives a Tree and the reference model with the same operations
// and checks they agree after each one.
type harness struct {
	t      testing.TB
	c      chooser
	tree   *Tree[int]
	ref    map[string]*refEntry
	b      int
	nextID int
	seqs   []refSeq // recently used sequences, so matches hit often
	stats  harnessStats
}

type refSeq struct {
	k      Keys
	tokens []uint32
	extra  []ExtraKey
}

// harnessStats counts what a run exercised, so the randomized test can
// assert that it reached the interesting cases.
type harnessStats struct {
	ops, matchedBlocks, partialHits, removed, notLeaf, subtrees, maxLen int
}

var harnessKeys = []Keys{{}, {Namespace: "a"}, {LoRA: "a"}, {Namespace: "a", LoRA: "a"}}

func newHarness(t testing.TB, c chooser, b int, mask uint64, scanLimit int32) *harness {
	h, err := NewHasher(b, 42)
	require.NoError(t, err)
	h.mask = mask
	tr := newTree[int](h)
	tr.scanLimit = scanLimit
	return &harness{t: t, c: c, tree: tr, ref: map[string]*refEntry{}, b: b}
}

// prefixKey is the reference's identity of the first m blocks of a
// sequence: an explicit, unambiguous string of everything that decides KV.
func prefixKey(k Keys, tokens []uint32, extra []ExtraKey, b, m int) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%q|%q|", k.Namespace, k.LoRA)
	for _, v := range tokens[:m*b] {
		fmt.Fprintf(&sb, "%d,", v)
	}
	sb.WriteString("|")
	for _, x := range extra {
		if x.Pos < m*b {
			fmt.Fprintf(&sb, "%d:%d,", x.Pos, x.Value)
		}
	}
	return sb.String()
}

// nodeKey rebuilds the reference key of a node from the tree by walking its
// parents, so the check does not trust the tree's own bookkeeping.
func nodeKey(n *Node[int]) string {
	var path []*Node[int]
	for p := n; p != nil; p = p.Parent() {
		path = append(path, p)
	}
	var tokens []uint32
	var extra []ExtraKey
	for i := len(path) - 1; i >= 0; i-- {
		tokens = append(tokens, path[i].Tokens()...)
		extra = append(extra, path[i].Extra()...)
	}
	return prefixKey(n.Keys(), tokens, extra, len(n.Tokens()), len(path))
}

func (h *harness) randomSequence() (Keys, []uint32, []ExtraKey) {
	k := harnessKeys[h.c.intn(len(harnessKeys))]
	var tokens []uint32
	var extra []ExtraKey
	if len(h.seqs) > 0 && h.c.intn(4) != 0 {
		// Cut and extend a recent sequence so prefixes are shared.
		base := h.seqs[h.c.intn(len(h.seqs))]
		cut := h.c.intn(len(base.tokens) + 1)
		k = base.k
		tokens = append(tokens, base.tokens[:cut]...)
		extra = append(extra, blockExtra(base.extra, 0, cut)...)
	}
	for n := h.c.intn(3*h.b + 1); n > 0; n-- {
		tokens = append(tokens, uint32(h.c.intn(3)))
	}
	if len(tokens) > 0 && h.c.intn(6) == 0 {
		// New keys go after the existing ones to stay sorted.
		from := 0
		if len(extra) > 0 {
			from = extra[len(extra)-1].Pos
		}
		if from < len(tokens) {
			extra = append(extra, ExtraKey{Pos: from + h.c.intn(len(tokens)-from), Value: uint64(7 + h.c.intn(2))})
		}
	}
	s := refSeq{k: k, tokens: tokens, extra: extra}
	if len(h.seqs) < 16 {
		h.seqs = append(h.seqs, s)
	} else {
		h.seqs[h.c.intn(len(h.seqs))] = s
	}
	return k, tokens, extra
}

// refMatch is the reference answer to Match: the number of leading blocks
// whose prefix keys are all present.
func (h *harness) refMatch(k Keys, tokens []uint32, extra []ExtraKey) int {
	m := 0
	for (m+1)*h.b <= len(tokens) {
		if _, ok := h.ref[prefixKey(k, tokens, extra, h.b, m+1)]; !ok {
			break
		}
		m++
	}
	return m
}

func (h *harness) step() {
	h.stats.ops++
	h.stats.maxLen = max(h.stats.maxLen, h.tree.Len())
	switch op := h.c.intn(10); op {
	case 0, 1, 2:
		h.insert()
	case 3:
		h.insertChild()
	case 4, 5:
		h.match()
	case 6:
		h.remove()
	case 7:
		if h.c.intn(3) == 0 {
			h.removeSubtree()
		} else {
			h.insert()
		}
	case 8:
		h.checkAll()
	case 9:
		if h.c.intn(20) == 0 {
			h.clear()
		} else {
			h.insert()
		}
	}
}

func (h *harness) insert() {
	k, tokens, extra := h.randomSequence()
	want := h.refMatch(k, tokens, extra)
	nodes, created, err := h.tree.Insert(nil, k, tokens, extra)
	require.NoError(h.t, err)
	full := len(tokens) / h.b
	require.Len(h.t, nodes, full)
	require.Equal(h.t, full-want, created, "created nodes")
	hashes, err := h.tree.Hasher().Hash(nil, k, tokens, extra)
	require.NoError(h.t, err)
	for i, n := range nodes {
		key := prefixKey(k, tokens, extra, h.b, i+1)
		if i >= want {
			h.nextID++
			n.Value = h.nextID
			parent := ""
			if i > 0 {
				parent = prefixKey(k, tokens, extra, h.b, i)
			}
			h.ref[key] = &refEntry{
				payload: h.nextID, parent: parent, keys: k, depth: i + 1,
				tokens: tokens[i*h.b : (i+1)*h.b],
				extra:  blockExtra(extra, i*h.b, (i+1)*h.b),
			}
		}
		require.Equal(h.t, h.ref[key].payload, n.Value, "payload of block %d", i)
		require.Equal(h.t, i+1, n.Depth())
		require.Equal(h.t, hashes[i], n.Hash(), "node hash equals the hasher's")
	}
}

func blockExtra(extra []ExtraKey, start, end int) []ExtraKey {
	var out []ExtraKey
	for _, x := range extra {
		if x.Pos >= start && x.Pos < end {
			out = append(out, x)
		}
	}
	return out
}

// pickNode returns a random live node (via a match of a random sequence),
// or nil.
func (h *harness) pickNode() *Node[int] {
	for range 4 {
		k, tokens, extra := h.randomSequence()
		nodes, err := h.tree.Match(nil, k, tokens, extra)
		require.NoError(h.t, err)
		if len(nodes) > 0 {
			return nodes[h.c.intn(len(nodes))]
		}
	}
	return nil
}

func (h *harness) insertChild() {
	parent := h.pickNode()
	if parent != nil && h.c.intn(4) == 0 {
		parent = nil
	}
	k := harnessKeys[h.c.intn(len(harnessKeys))]
	parentKey := ""
	depth := 0
	var prefTokens []uint32
	var prefExtra []ExtraKey
	if parent != nil {
		k = parent.Keys()
		parentKey = nodeKey(parent)
		depth = parent.Depth()
		for p := parent; p != nil; p = p.Parent() {
			prefTokens = append(append([]uint32(nil), p.Tokens()...), prefTokens...)
			prefExtra = append(append([]ExtraKey(nil), p.Extra()...), prefExtra...)
		}
	}
	block := make([]uint32, h.b)
	for i := range block {
		block[i] = uint32(h.c.intn(3))
	}
	var extra []ExtraKey
	if h.c.intn(4) == 0 {
		// Keys outside the block must be ignored: add one before and after.
		extra = append(extra, ExtraKey{Pos: depth*h.b + h.c.intn(h.b), Value: 7})
		extra = append(extra, ExtraKey{Pos: (depth + 1) * h.b, Value: 9})
	}
	n, created, err := h.tree.InsertChild(parent, k, block, extra)
	require.NoError(h.t, err)
	fullTokens := append(prefTokens, block...)
	fullExtra := append(prefExtra, blockExtra(extra, depth*h.b, (depth+1)*h.b)...)
	key := prefixKey(k, fullTokens, fullExtra, h.b, depth+1)
	_, existed := h.ref[key]
	require.Equal(h.t, !existed, created)
	if created {
		h.nextID++
		n.Value = h.nextID
		h.ref[key] = &refEntry{payload: h.nextID, parent: parentKey, keys: k, depth: depth + 1,
			tokens: block, extra: blockExtra(extra, depth*h.b, (depth+1)*h.b)}
	}
	require.Equal(h.t, h.ref[key].payload, n.Value)
	require.Equal(h.t, key, nodeKey(n))
	require.Equal(h.t, depth+1, n.Depth())
}

func (h *harness) match() {
	k, tokens, extra := h.randomSequence()
	want := h.refMatch(k, tokens, extra)
	nodes, part, err := h.tree.MatchPartial(nil, k, tokens, extra)
	require.NoError(h.t, err)
	require.Len(h.t, nodes, want)
	h.stats.matchedBlocks += want
	for i, n := range nodes {
		require.Equal(h.t, h.ref[prefixKey(k, tokens, extra, h.b, i+1)].payload, n.Value)
	}
	plain, err := h.tree.Match(nil, k, tokens, extra)
	require.NoError(h.t, err)
	require.Equal(h.t, nodes, plain)

	// Partial: the best agreement over the reference children of the
	// matched prefix, by brute force over prefix lengths.
	start := want * h.b
	best := 0
	parentKey := ""
	if want > 0 {
		parentKey = prefixKey(k, tokens, extra, h.b, want)
	}
	var next []uint32
	if start < len(tokens) {
		next = tokens[start:min(start+h.b, len(tokens))]
	}
	bx := blockExtra(extra, start, start+h.b)
	refAgree := func(e *refEntry) int {
		n := 0
		for n < len(next) && e.tokens[n] == next[n] {
			n++
		}
		for ; n > 0; n-- {
			if fmt.Sprint(blockExtra(e.extra, start, start+n)) == fmt.Sprint(blockExtra(bx, start, start+n)) {
				break
			}
		}
		return n
	}
	for _, e := range h.ref {
		if e.depth == want+1 && e.parent == parentKey && e.keys == k {
			best = max(best, refAgree(e))
		}
	}
	require.Equal(h.t, best, part.Tokens, "partial agreement")
	require.Less(h.t, part.Tokens, h.b)
	if best == 0 {
		require.Nil(h.t, part.Node)
		return
	}
	require.NotNil(h.t, part.Node)
	h.stats.partialHits++
	e := h.ref[nodeKey(part.Node)]
	require.NotNil(h.t, e)
	require.Equal(h.t, parentKey, e.parent)
	require.Equal(h.t, best, refAgree(e))
}

// hasExtension reports whether the reference holds a block below key.
func (h *harness) hasExtension(key string) bool {
	for _, e := range h.ref {
		if e.parent == key {
			return true
		}
	}
	return false
}

func (h *harness) remove() {
	n := h.pickNode()
	if n == nil {
		require.ErrorIs(h.t, h.tree.Remove(nil), ErrNotInTree)
		return
	}
	key := nodeKey(n)
	err := h.tree.Remove(n)
	if h.hasExtension(key) {
		require.ErrorIs(h.t, err, ErrNotLeaf)
		h.stats.notLeaf++
		return
	}
	require.NoError(h.t, err)
	h.stats.removed++
	delete(h.ref, key)
	require.ErrorIs(h.t, h.tree.Remove(n), ErrNotInTree, "second removal")
	_, _, err = h.tree.InsertChild(n, n.Keys(), make([]uint32, h.b), nil)
	require.ErrorIs(h.t, err, ErrNotInTree, "insert under a removed node")
}

// subtreeKeys returns key and the keys of all reference blocks below it.
func (h *harness) subtreeKeys(key string) map[string]bool {
	out := map[string]bool{key: true}
	for grew := true; grew; {
		grew = false
		for k, e := range h.ref {
			if out[e.parent] && !out[k] {
				out[k] = true
				grew = true
			}
		}
	}
	return out
}

func (h *harness) removeSubtree() {
	n := h.pickNode()
	if n == nil {
		return
	}
	keys := h.subtreeKeys(nodeKey(n))
	seen := map[string]bool{}
	removed, err := h.tree.RemoveSubtree(n, func(x *Node[int]) {
		require.True(h.t, x.IsLeaf(), "callback sees leaves")
		k := nodeKey(x)
		require.True(h.t, keys[k], "removed node is in the subtree")
		require.False(h.t, seen[k])
		seen[k] = true
		require.Equal(h.t, h.ref[k].payload, x.Value)
	})
	require.NoError(h.t, err)
	require.Equal(h.t, len(keys), removed)
	require.Len(h.t, seen, len(keys))
	h.stats.subtrees++
	for k := range keys {
		delete(h.ref, k)
	}
}

func (h *harness) clear() {
	count := 0
	removed := h.tree.Clear(func(*Node[int]) { count++ })
	require.Equal(h.t, len(h.ref), removed)
	require.Equal(h.t, removed, count)
	clear(h.ref)
	require.Zero(h.t, h.tree.Len())
}

// checkAll compares the whole tree with the reference.
func (h *harness) checkAll() {
	require.Equal(h.t, len(h.ref), h.tree.Len())
	seen := map[*Node[int]]bool{}
	count := 0
	for n := range h.tree.All() {
		count++
		if p := n.Parent(); p != nil {
			require.True(h.t, seen[p], "parent before child")
			require.Equal(h.t, p.Depth()+1, n.Depth())
		} else {
			require.Equal(h.t, 1, n.Depth())
		}
		seen[n] = true
		e := h.ref[nodeKey(n)]
		require.NotNil(h.t, e, "tree node missing from reference")
		require.Equal(h.t, e.payload, n.Value)
		kids := 0
		for c := range n.Children() {
			require.Same(h.t, n, c.Parent())
			kids++
		}
		require.Equal(h.t, kids, n.NumChildren())
		require.Equal(h.t, kids == 0, n.IsLeaf())
		require.True(h.t, h.tree.owns(n))
	}
	require.Equal(h.t, len(h.ref), count)
	indexed := len(h.tree.byHash)
	for _, ov := range h.tree.overflow {
		require.NotEmpty(h.t, ov)
		indexed += len(ov)
	}
	require.Equal(h.t, count, indexed, "hash index holds every node once")
}

// run performs operations until the chooser is exhausted or maxOps is
// reached (0: no limit).
func (h *harness) run(maxOps int) {
	for !h.c.done() && (maxOps == 0 || h.stats.ops < maxOps) {
		h.step()
	}
	h.checkAll()
}

// TestTreeAgainstReference runs thousands of random operations with a
// three-token alphabet, under hash masks that force collisions and under
// every lookup strategy, against the reference model.
func TestTreeAgainstReference(t *testing.T) {
	for _, mask := range []uint64{^uint64(0), 3, 0} {
		for _, scan := range []int32{0, defaultScanLimit, 1 << 20} {
			for _, b := range []int{2, 4} {
				name := fmt.Sprintf("mask=%#x/scan=%d/block=%d", mask, scan, b)
				t.Run(name, func(t *testing.T) {
					ops := 3000
					if mask == 0 {
						ops = 1500 // every lookup walks one collision list
					}
					seed := uint64(len(name)) ^ mask ^ uint64(scan)<<8 ^ uint64(b)
					c := &randChooser{r: rand.New(rand.NewPCG(seed, 7))}
					h := newHarness(t, c, b, mask, scan)
					h.run(ops)
					st := h.stats
					t.Logf("%+v", st)
					require.Equal(t, ops, st.ops)
					require.Positive(t, st.matchedBlocks)
					require.Positive(t, st.partialHits)
					require.Positive(t, st.removed)
					require.Positive(t, st.notLeaf)
					require.Positive(t, st.subtrees)
					require.Greater(t, st.maxLen, 20)
				})
			}
		}
	}
}

// FuzzTree decodes insert, match and remove sequences from the fuzz input
// and checks the tree against the reference model; it must never panic.
func FuzzTree(f *testing.F) {
	f.Add([]byte{0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{1, 1, 0, 2, 0, 0, 1, 0, 0, 4, 1, 0, 6, 0, 7, 8})
	f.Add(binary.LittleEndian.AppendUint64([]byte{2, 0}, 0x0123456789abcdef))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		masks := []uint64{^uint64(0), 1, 0}
		scans := []int32{0, defaultScanLimit, 1 << 20}
		mask := masks[int(data[0])%len(masks)]
		scan := scans[int(data[0]/3)%len(scans)]
		b := 2 << (data[1] % 2)
		c := &byteChooser{b: data[2:]}
		newHarness(t, c, b, mask, scan).run(0)
	})
}
