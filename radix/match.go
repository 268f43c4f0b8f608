package radix

// Partial describes how far a sequence agrees with a cached block that it
// does not fully match (TensorRT-LLM's partial reuse): the first Tokens
// tokens of the sequence's next block equal those of Node, and so do the
// extra keys attached to them. A server may copy those tokens' KV out of
// Node's block instead of recomputing them. The zero Partial means no cached
// block agrees on even one token.
type Partial[P any] struct {
	// Node is the best partially agreeing block: a child of the last matched
	// block (or a first block when nothing matched). The earliest inserted
	// wins ties.
	Node *Node[P]
	// Tokens is the number of leading tokens Node agrees on; always less
	// than the block size.
	Tokens int
}

// Match finds the longest cached prefix of a sequence in whole blocks: the
// sequence with keys k, tokens (from position 0) and extra keys (sorted by
// absolute position). It appends the matched nodes, first block first, to
// dst and returns it; a trailing partial block never matches. Match
// allocates nothing when dst has room for the result. Unsorted or negative
// extra-key positions return an error wrapping ErrInvalidExtraKey and dst
// unchanged.
//
// Matched blocks need no hashing: their hashes are on the nodes. Match
// hashes a block only to probe the index under a node with many children.
func (t *Tree[P]) Match(dst []*Node[P], k Keys, tokens []uint32, extra []ExtraKey) ([]*Node[P], error) {
	dst, _, err := t.match(dst, k, tokens, extra)
	return dst, err
}

// MatchPartial is Match that also reports how many leading tokens of the
// first unmatched block agree with some cached block (see Partial). That
// costs a scan of the last matched node's children, so it is a separate
// call.
func (t *Tree[P]) MatchPartial(dst []*Node[P], k Keys, tokens []uint32, extra []ExtraKey) ([]*Node[P], Partial[P], error) {
	dst, cursor, err := t.match(dst, k, tokens, extra)
	if err != nil {
		return dst, Partial[P]{}, err
	}
	parent := &t.root
	if len(dst) > 0 {
		parent = dst[len(dst)-1]
	}
	b := t.h.blockTokens
	start := int(parent.depth) * b
	if start >= len(tokens) {
		return dst, Partial[P]{}, nil
	}
	next := tokens[start:min(start+b, len(tokens))]
	bx := takeExtra(extra, &cursor, start, start+b)
	var best Partial[P]
	for c := parent.child; c != nil; c = c.next {
		if parent == &t.root && c.meta.keys != k {
			continue
		}
		if got := agreement(c, next, bx, start); got > best.Tokens {
			best = Partial[P]{Node: c, Tokens: got}
		}
	}
	return dst, best, nil
}

// agreement returns how many leading tokens of next agree with node c,
// counting a token only while the extra keys attached to the tokens before
// it agree too. It is below the block size whenever c did not match.
func agreement[P any](c *Node[P], next []uint32, bx []ExtraKey, start int) int {
	n := 0
	for n < len(next) && c.tokens[n] == next[n] {
		n++
	}
	// The keys agree up to the first key where the lists differ; tokens
	// from that key's offset on carry different KV.
	ce := c.meta.extra
	i := 0
	for i < len(ce) && i < len(bx) && ce[i] == bx[i] {
		i++
	}
	if i < len(ce) {
		n = min(n, ce[i].Pos-start)
	}
	if i < len(bx) {
		n = min(n, bx[i].Pos-start)
	}
	return n
}

// match walks the tree along the sequence's full blocks, appending matched
// nodes to dst. It returns the extra-key cursor after the last matched
// block.
func (t *Tree[P]) match(dst []*Node[P], k Keys, tokens []uint32, extra []ExtraKey) ([]*Node[P], int, error) {
	if err := checkExtra(extra); err != nil {
		return dst, 0, err
	}
	var enc encoder
	b := t.h.blockTokens
	cur := &t.root
	cursor := 0
	for start := 0; start+b <= len(tokens); start += b {
		if cur.child == nil {
			break
		}
		save := cursor
		bx := takeExtra(extra, &cursor, start, start+b)
		c, _, _ := t.find(&enc, cur, k, start, tokens[start:start+b], bx)
		if c == nil {
			cursor = save
			break
		}
		dst = append(dst, c)
		cur = c
	}
	return dst, cursor, nil
}

// find returns the child of parent that holds block blk with extra keys bx
// (and keys k when parent is the root), or nil. When it had to hash the
// block it also returns the hash and true, so an insert can reuse it.
func (t *Tree[P]) find(enc *encoder, parent *Node[P], k Keys, start int, blk []uint32, bx []ExtraKey) (*Node[P], uint64, bool) {
	if parent.children <= t.scanLimit {
		for c := parent.child; c != nil; c = c.next {
			if t.holds(c, parent, k, blk, bx) {
				return c, 0, false
			}
		}
		return nil, 0, false
	}
	h := t.h.hashBlock(enc, parent.hash, parent == &t.root, k, start, blk, bx)
	if c := t.byHash[h]; c != nil && t.holds(c, parent, k, blk, bx) {
		return c, h, true
	}
	if len(t.overflow) != 0 {
		for _, c := range t.overflow[h] {
			if t.holds(c, parent, k, blk, bx) {
				return c, h, true
			}
		}
	}
	return nil, h, true
}

// holds is the verification that makes hash collisions harmless: c is the
// block only if it hangs under the same parent, has the same tokens and
// extra keys, and, for a first block, the same namespace and LoRA. Keys of
// deeper blocks are implied by the parent.
func (t *Tree[P]) holds(c, parent *Node[P], k Keys, blk []uint32, bx []ExtraKey) bool {
	if c.parent != parent || c.tokens[0] != blk[0] {
		return false
	}
	ct := c.tokens[:len(blk)]
	for i, v := range blk {
		if ct[i] != v {
			return false
		}
	}
	if !extraEqual(c.meta.extra, bx) {
		return false
	}
	return parent != &t.root || c.meta.keys == k
}
