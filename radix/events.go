package radix

import "fmt"

// BlockStored describes a run of consecutive blocks that became reusable, in
// the shape KV-aware routers consume (vLLM's BlockStored, TensorRT-LLM's
// stored event): the hashes of the blocks in order, the hash of the block
// before the first of them, their tokens concatenated, the block size, and
// the keys of their path. Build one with AppendStored; reset it with Reset
// to reuse its slices. The zero value is an empty event.
type BlockStored struct {
	// BlockHashes are the chain hashes of the blocks, first block first.
	BlockHashes []uint64
	// ParentHash is the hash of the block before BlockHashes[0]; valid only
	// when HasParent.
	ParentHash uint64
	// HasParent is false when the run starts a sequence (its first block
	// has no parent).
	HasParent bool
	// TokenIDs are the tokens of all blocks, concatenated.
	TokenIDs []uint32
	// BlockSize is the number of tokens per block.
	BlockSize int
	// Namespace is the cache salt of the blocks' path.
	Namespace string
	// LoRA is the adapter id of the blocks' path.
	LoRA string
}

// Reset empties e, keeping the capacity of its slices.
func (e *BlockStored) Reset() {
	*e = BlockStored{BlockHashes: e.BlockHashes[:0], TokenIDs: e.TokenIDs[:0]}
}

// AppendStored adds node n to event e. The first node sets the event's
// parent hash, block size and keys; each later node must be a child of the
// event's last block (else the error wraps ErrNotContiguous) on the same
// path (else ErrKeysMismatch). On error e is unchanged. It allocates only to
// grow e's slices.
func AppendStored[P any](e *BlockStored, n *Node[P]) error {
	if n == nil {
		return fmt.Errorf("%w: nil node", ErrNotInTree)
	}
	k := n.Keys()
	if len(e.BlockHashes) == 0 {
		e.ParentHash, e.HasParent = n.ParentHash()
		e.BlockSize = len(n.tokens)
		e.Namespace, e.LoRA = k.Namespace, k.LoRA
	} else {
		last := e.BlockHashes[len(e.BlockHashes)-1]
		if k.Namespace != e.Namespace || k.LoRA != e.LoRA {
			return fmt.Errorf("%w: block %#x has keys %+v, event has namespace %q and LoRA %q",
				ErrKeysMismatch, n.hash, k, e.Namespace, e.LoRA)
		}
		if ph, ok := n.ParentHash(); !ok || ph != last {
			return fmt.Errorf("%w: block %#x does not follow block %#x", ErrNotContiguous, n.hash, last)
		}
	}
	e.BlockHashes = append(e.BlockHashes, n.hash)
	e.TokenIDs = append(e.TokenIDs, n.tokens...)
	return nil
}

// BlockRemoved describes blocks that stopped being reusable (vLLM's
// BlockRemoved): their chain hashes. The owner appends Node.Hash of each
// node that Tree.Remove, Tree.RemoveSubtree or Tree.Clear removed; a
// cleared tree may instead be published as one "all blocks cleared" event.
type BlockRemoved struct {
	// BlockHashes are the chain hashes of the removed blocks.
	BlockHashes []uint64
}
