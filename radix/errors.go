package radix

import "errors"

// Sentinel errors. Every error this package returns wraps exactly one of them,
// with a message naming the bad value, so callers test with errors.Is.
var (
	// ErrInvalidBlockSize reports a block size that is not a power of two of
	// at least 2 (and at most MaxBlockTokens).
	ErrInvalidBlockSize = errors.New("radix: invalid block size")

	// ErrInvalidBlock reports a block whose token count is not the tree's
	// block size.
	ErrInvalidBlock = errors.New("radix: invalid block")

	// ErrInvalidExtraKey reports extra keys with a negative position or not
	// sorted by position.
	ErrInvalidExtraKey = errors.New("radix: invalid extra key")

	// ErrNotInTree reports a node that is nil, was removed, or belongs to
	// another tree.
	ErrNotInTree = errors.New("radix: node not in tree")

	// ErrNotLeaf reports an attempt to remove a node that still has children
	// with Tree.Remove.
	ErrNotLeaf = errors.New("radix: node is not a leaf")

	// ErrKeysMismatch reports keys (namespace, LoRA) that differ from those of
	// the parent's path.
	ErrKeysMismatch = errors.New("radix: keys do not match")
)
