package radix

import "fmt"

// Remove removes the leaf n. A node with children returns an error wrapping
// ErrNotLeaf (remove its subtree with RemoveSubtree instead); a nil,
// removed or foreign node returns one wrapping ErrNotInTree. On error the
// tree is unchanged.
func (t *Tree[P]) Remove(n *Node[P]) error {
	if !t.owns(n) {
		return notInTree(n)
	}
	if n.child != nil {
		return fmt.Errorf("%w: block %#x has %d children", ErrNotLeaf, n.hash, n.children)
	}
	t.drop(n)
	return nil
}

// RemoveSubtree removes n and every block that continues it, and returns how
// many nodes it removed. It calls fn, when not nil, once per node, children
// before their parent (so fn always sees a leaf, still attached, whose
// parent is still reachable), to let the owner free the payload and publish
// "removed" events. fn must not modify the tree. A nil, removed or foreign
// node returns an error wrapping ErrNotInTree and removes nothing.
func (t *Tree[P]) RemoveSubtree(n *Node[P], fn func(*Node[P])) (int, error) {
	if !t.owns(n) {
		return 0, notInTree(n)
	}
	return t.removeSubtree(n, fn), nil
}

// Clear removes every node, calling fn (when not nil) as RemoveSubtree
// does, and returns how many it removed: the "all blocks cleared" event.
func (t *Tree[P]) Clear(fn func(*Node[P])) int {
	removed := 0
	for t.root.child != nil {
		removed += t.removeSubtree(t.root.child, fn)
	}
	return removed
}

// removeSubtree removes n's subtree in post-order without recursion: descend
// to a leaf, remove it, step back to its parent, repeat. Every step down
// enters a node that is removed later, so the walk is linear.
func (t *Tree[P]) removeSubtree(n *Node[P], fn func(*Node[P])) int {
	removed := 0
	cur := n
	for {
		for cur.child != nil {
			cur = cur.child
		}
		p := cur.parent
		if fn != nil {
			fn(cur)
		}
		t.drop(cur)
		removed++
		if cur == n {
			return removed
		}
		cur = p
	}
}

func (t *Tree[P]) drop(n *Node[P]) {
	t.unindex(n)
	unlink(n)
	t.nodes--
}

func notInTree[P any](n *Node[P]) error {
	if n == nil {
		return fmt.Errorf("%w: nil node", ErrNotInTree)
	}
	return fmt.Errorf("%w: block %#x is removed or belongs to another tree", ErrNotInTree, n.hash)
}
