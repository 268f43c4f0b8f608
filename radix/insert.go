package radix

import (
	"fmt"
	"slices"
)

// Insert caches every full block of a sequence (keys k, tokens from position
// 0, extra keys sorted by absolute position), reusing the blocks already
// cached. It appends the path, first block first, to dst and returns it with
// the number of nodes it created, which are always the last ones of the
// path: the owner attaches payload to exactly those. A trailing partial
// block is not inserted. Unsorted or negative extra-key positions return an
// error wrapping ErrInvalidExtraKey and leave the tree unchanged.
func (t *Tree[P]) Insert(dst []*Node[P], k Keys, tokens []uint32, extra []ExtraKey) ([]*Node[P], int, error) {
	if err := checkExtra(extra); err != nil {
		return dst, 0, err
	}
	var enc encoder
	b := t.h.blockTokens
	cur := &t.root
	cursor := 0
	created := 0
	for start := 0; start+b <= len(tokens); start += b {
		blk := tokens[start : start+b]
		bx := takeExtra(extra, &cursor, start, start+b)
		var (
			c      *Node[P]
			h      uint64
			hashed bool
		)
		if created == 0 {
			// Once a block is new, none of the rest can exist.
			c, h, hashed = t.find(&enc, cur, k, start, blk, bx)
		}
		if c == nil {
			if !hashed {
				h = t.h.hashBlock(&enc, cur.hash, cur == &t.root, k, start, blk, bx)
			}
			c = t.add(cur, k, blk, bx, h)
			created++
		}
		dst = append(dst, c)
		cur = c
	}
	return dst, created, nil
}

// InsertChild caches one block under parent, or as the first block of a
// sequence when parent is nil: the way a decoding sequence commits each
// block as it fills. It returns the node and whether it was created; an
// equal block already cached under parent is returned with false. Its cost
// does not depend on the size of the tree or the depth of parent.
//
// block must hold exactly BlockTokens tokens (else ErrInvalidBlock); parent
// must be a live node of this tree (else ErrNotInTree); k must be the keys
// of parent's path (else ErrKeysMismatch). extra may hold the keys of the
// whole sequence, sorted by absolute position (else ErrInvalidExtraKey):
// only those inside this block are used. On error the tree is unchanged.
func (t *Tree[P]) InsertChild(parent *Node[P], k Keys, block []uint32, extra []ExtraKey) (*Node[P], bool, error) {
	c, h, hashed, bx, err := t.child(&parent, k, block, extra)
	if err != nil || c != nil {
		return c, false, err
	}
	if !hashed {
		var enc encoder
		start := int(parent.depth) * t.h.blockTokens
		h = t.h.hashBlock(&enc, parent.hash, parent == &t.root, k, start, block, bx)
	}
	return t.add(parent, k, block, bx, h), true, nil
}

// Child returns the cached child of parent (nil: a first block) that holds
// block with keys k and the extra keys of the sequence, or nil when there
// is none, without changing the tree: what InsertChild would return with
// false. It returns the errors InsertChild does.
func (t *Tree[P]) Child(parent *Node[P], k Keys, block []uint32, extra []ExtraKey) (*Node[P], error) {
	c, _, _, _, err := t.child(&parent, k, block, extra)
	return c, err
}

// child checks the arguments of InsertChild and Child, sets *parent to the
// root sentinel when it is nil, and looks the block up: it returns the
// child if cached, else the block's hash when the lookup computed it, and
// the block's extra keys.
func (t *Tree[P]) child(parent **Node[P], k Keys, block []uint32, extra []ExtraKey) (*Node[P], uint64, bool, []ExtraKey, error) {
	if len(block) != t.h.blockTokens {
		return nil, 0, false, nil, fmt.Errorf("%w: %d tokens, want %d", ErrInvalidBlock, len(block), t.h.blockTokens)
	}
	if err := checkExtra(extra); err != nil {
		return nil, 0, false, nil, err
	}
	if *parent == nil {
		*parent = &t.root
	} else {
		p := *parent
		if !t.owns(p) {
			return nil, 0, false, nil, fmt.Errorf("%w: parent %#x is removed or belongs to another tree", ErrNotInTree, p.hash)
		}
		if p.meta.keys != k {
			return nil, 0, false, nil, fmt.Errorf("%w: keys %+v, parent's path has %+v", ErrKeysMismatch, k, p.meta.keys)
		}
	}
	b := t.h.blockTokens
	start := int((*parent).depth) * b
	cursor := 0
	bx := takeExtra(extra, &cursor, start, start+b)
	var enc encoder
	c, h, hashed := t.find(&enc, *parent, k, start, block, bx)
	return c, h, hashed, bx, nil
}

// add creates the child of parent holding blk and links and indexes it.
func (t *Tree[P]) add(parent *Node[P], k Keys, blk []uint32, bx []ExtraKey, h uint64) *Node[P] {
	n := &Node[P]{hash: h, depth: parent.depth + 1, tokens: slices.Clone(blk)}
	var plain *nodeMeta
	switch {
	case parent != &t.root:
		plain = parent.meta.plain
	case k == Keys{}:
		plain = t.plainMeta
	default:
		plain = &nodeMeta{keys: k}
		plain.plain = plain
	}
	n.meta = plain
	if len(bx) > 0 {
		n.meta = &nodeMeta{keys: plain.keys, extra: slices.Clone(bx), plain: plain}
	}
	link(parent, n)
	t.index(n)
	t.nodes++
	return n
}
