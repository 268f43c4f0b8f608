package radix

import "iter"

// defaultScanLimit is the fan-out up to which a lookup compares the tokens
// of each child directly instead of hashing the block and probing the hash
// index: with few children, a pointer walk and a 64-byte compare beat an
// xxhash plus a map probe (see BenchmarkMatch32k in BENCHMARKS.md).
const defaultScanLimit = 4

// Tree is a prefix tree of token blocks with a payload P per block. Each
// node is one block; a node's children are the cached blocks that follow
// it. Lookups go through one hash index keyed by chain hash, and every
// candidate is verified on its parent, tokens, extra keys and (for first
// blocks) namespace and LoRA, so a 64-bit hash collision can never make one
// prefix match another.
//
// A Tree is not safe for concurrent use: its owner serializes every call,
// including reads (matching and iteration). Use NewTree; the zero Tree is
// not valid.
type Tree[P any] struct {
	h *Hasher
	// root is the sentinel parent of first blocks. It is never handed out:
	// Node.Parent reports nil instead.
	root Node[P]
	// byHash indexes every node by chain hash. A second node with a hash
	// already present goes to overflow: collisions are rare, and keeping the
	// chain out of Node saves a pointer per node.
	byHash   map[uint64]*Node[P]
	overflow map[uint64][]*Node[P]
	// plainMeta is shared by every node of the zero Keys without extra
	// keys, the common case, so such first blocks allocate no meta.
	plainMeta *nodeMeta
	nodes     int
	scanLimit int32
}

// NewTree returns an empty tree for blocks of blockTokens tokens hashed with
// seed. blockTokens must be a power of two between 2 and MaxBlockTokens;
// otherwise the error wraps ErrInvalidBlockSize.
func NewTree[P any](blockTokens int, seed uint64) (*Tree[P], error) {
	h, err := NewHasher(blockTokens, seed)
	if err != nil {
		return nil, err
	}
	return newTree[P](h), nil
}

func newTree[P any](h *Hasher) *Tree[P] {
	t := &Tree[P]{
		h:         h,
		byHash:    make(map[uint64]*Node[P]),
		overflow:  make(map[uint64][]*Node[P]),
		scanLimit: defaultScanLimit,
	}
	t.root.hash = h.seed
	t.plainMeta = &nodeMeta{}
	t.plainMeta.plain = t.plainMeta
	return t
}

// Hasher returns the tree's hasher. Node hashes are its hashes; use it to
// hash blocks the tree does not hold yet.
func (t *Tree[P]) Hasher() *Hasher { return t.h }

// BlockTokens returns the number of tokens per block.
func (t *Tree[P]) BlockTokens() int { return t.h.blockTokens }

// Len returns the number of nodes (cached blocks) in the tree.
func (t *Tree[P]) Len() int { return t.nodes }

// Roots iterates over the first blocks of all cached sequences, in
// insertion order. The tree must not be modified during the iteration.
func (t *Tree[P]) Roots() iter.Seq[*Node[P]] { return t.root.Children() }

// All iterates over every node in depth-first pre-order: a node before its
// children, children in insertion order. The order depends only on the
// sequence of calls that built the tree. It uses no recursion and no extra
// memory. The tree must not be modified during the iteration.
func (t *Tree[P]) All() iter.Seq[*Node[P]] {
	return func(yield func(*Node[P]) bool) {
		n := t.root.child
		for n != nil {
			if !yield(n) {
				return
			}
			if n.child != nil {
				n = n.child
				continue
			}
			// Climb until an ancestor (or n itself) has a next sibling.
			for n.next == nil {
				n = n.parent
				if n == &t.root {
					return
				}
			}
			n = n.next
		}
	}
}

// Owns reports whether n is a live node of this tree (not removed, not
// another tree's). A node's ancestors are live while it is: a caller that
// kept the nodes of a matched prefix may check only the last one before
// extending the match from it (InsertChild, Child).
func (t *Tree[P]) Owns(n *Node[P]) bool { return t.owns(n) }

// owns reports whether n is a live node of this tree. The hash index is the
// membership record, so this costs one map probe and no per-node tree
// pointer.
func (t *Tree[P]) owns(n *Node[P]) bool {
	if n == nil || n.parent == nil {
		return false
	}
	if t.byHash[n.hash] == n {
		return true
	}
	for _, c := range t.overflow[n.hash] {
		if c == n {
			return true
		}
	}
	return false
}

func (t *Tree[P]) index(n *Node[P]) {
	if _, taken := t.byHash[n.hash]; taken {
		t.overflow[n.hash] = append(t.overflow[n.hash], n)
		return
	}
	t.byHash[n.hash] = n
}

func (t *Tree[P]) unindex(n *Node[P]) {
	h := n.hash
	ov := t.overflow[h]
	if t.byHash[h] == n {
		if len(ov) == 0 {
			delete(t.byHash, h)
			return
		}
		t.byHash[h] = ov[len(ov)-1]
		ov[len(ov)-1] = nil
		ov = ov[:len(ov)-1]
	} else {
		for i, c := range ov {
			if c == n {
				ov[i] = ov[len(ov)-1]
				ov[len(ov)-1] = nil
				ov = ov[:len(ov)-1]
				break
			}
		}
	}
	if len(ov) == 0 {
		delete(t.overflow, h)
	} else {
		t.overflow[h] = ov
	}
}

// link appends n to p's children.
func link[P any](p, n *Node[P]) {
	n.parent = p
	if p.child == nil {
		p.child = n
		n.prev = n
	} else {
		last := p.child.prev
		last.next = n
		n.prev = last
		p.child.prev = n
	}
	p.children++
}

// unlink detaches the leaf n from its parent and marks it removed.
func unlink[P any](n *Node[P]) {
	p := n.parent
	if p.child == n {
		p.child = n.next
		if n.next != nil {
			n.next.prev = n.prev
		}
	} else {
		n.prev.next = n.next
		if n.next != nil {
			n.next.prev = n.prev
		} else {
			p.child.prev = n.prev
		}
	}
	p.children--
	n.parent, n.next, n.prev = nil, nil, nil
}
