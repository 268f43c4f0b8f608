package radix

import "iter"

// Node is one cached token block: its tokens, extra keys and chain hash, its
// place in the tree, and the owner's payload. Nodes are created by
// Tree.Insert and Tree.InsertChild and stay valid handles until removed;
// after removal a node keeps its hash, tokens and keys (what a "removed"
// event needs) but has no parent or children and is rejected by every Tree
// method. Like the Tree, a Node is not safe for concurrent use.
type Node[P any] struct {
	// Value is the owner's payload for this block (slots, reference counts,
	// tier...). The tree never reads or writes it.
	Value P

	hash   uint64
	parent *Node[P] // the tree's root sentinel for a first block; nil once removed
	child  *Node[P] // first child
	next   *Node[P] // next sibling; nil for the last child
	// prev is the previous sibling; the first child's prev is the last
	// child, so appending and unlinking are O(1) with one pointer.
	prev *Node[P]
	meta *nodeMeta
	// tokens is the block's own copy of its tokens; a node never aliases the
	// caller's slice.
	tokens   []uint32
	depth    int32 // 1 for a first block; 0 only for the root sentinel
	children int32
}

// nodeMeta holds what a node stores besides its tokens: the path's keys and
// the block's extra keys. Nodes without extra keys share their path's plain
// meta, so the common node pays one pointer for both.
type nodeMeta struct {
	keys  Keys
	extra []ExtraKey
	plain *nodeMeta // the meta without extra keys shared along the path
}

// Hash returns the block's chain hash, as the tree's Hasher computes it.
func (n *Node[P]) Hash() uint64 { return n.hash }

// Parent returns the node of the previous block, or nil for the first block
// of a sequence and for removed nodes.
func (n *Node[P]) Parent() *Node[P] {
	if n.parent == nil || n.parent.depth == 0 {
		return nil
	}
	return n.parent
}

// ParentHash returns the hash of the previous block and true, or 0 and false
// when there is none (first block or removed node): the parent_block_hash of
// a "stored" event.
func (n *Node[P]) ParentHash() (uint64, bool) {
	if p := n.Parent(); p != nil {
		return p.hash, true
	}
	return 0, false
}

// Tokens returns the block's tokens. The slice is the node's own storage:
// read it, do not modify it.
func (n *Node[P]) Tokens() []uint32 { return n.tokens }

// Extra returns the block's extra keys (with absolute positions), or nil.
// The slice is the node's own storage: read it, do not modify it.
func (n *Node[P]) Extra() []ExtraKey { return n.meta.extra }

// Keys returns the namespace and LoRA of the node's path.
func (n *Node[P]) Keys() Keys { return n.meta.keys }

// Depth returns the number of blocks from the first block of the sequence
// to this one, inclusive: 1 for a first block. The node covers tokens
// [(Depth()-1)*BlockTokens, Depth()*BlockTokens) of every sequence it
// matches.
func (n *Node[P]) Depth() int { return int(n.depth) }

// NumChildren returns the number of cached blocks that continue this one.
func (n *Node[P]) NumChildren() int { return int(n.children) }

// IsLeaf reports whether no cached block continues this one: the only kind
// of node Tree.Remove accepts.
func (n *Node[P]) IsLeaf() bool { return n.child == nil }

// Children iterates over the children in insertion order. The tree must not
// be modified during the iteration.
func (n *Node[P]) Children() iter.Seq[*Node[P]] {
	return func(yield func(*Node[P]) bool) {
		for c := n.child; c != nil; c = c.next {
			if !yield(c) {
				return
			}
		}
	}
}

// State returns the hashing state after this block, from which
// Hasher.Append continues the sequence (the tree's Hasher, or one with the
// same block size and seed).
func (n *Node[P]) State() State { return State{hash: n.hash, blocks: int(n.depth)} }
