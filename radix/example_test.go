package radix_test

import (
	"fmt"

	"github.com/kvtier/kvtier/radix"
)

// Hash a prompt into per-block chain hashes, then continue the chain as
// decode fills another block, without rehashing the prompt.
func ExampleHasher() {
	h, err := radix.NewHasher(4, 2024)
	if err != nil {
		panic(err)
	}
	tenant := radix.Keys{Namespace: "tenant-a"}
	prompt := []uint32{101, 102, 103, 104, 105, 106, 107, 108, 109, 110}

	hashes, st, err := h.Append(nil, h.Start(tenant), prompt, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println("full blocks hashed:", st.Blocks(), len(hashes))

	// Decode fills the third block: pass the tokens not yet hashed.
	hashes, st, err = h.Append(hashes, st, []uint32{109, 110, 111, 112}, nil)
	if err != nil {
		panic(err)
	}
	oneShot, _ := h.Hash(nil, tenant, append(prompt, 111, 112), nil)
	fmt.Println("blocks:", st.Blocks(), "same as hashing at once:", fmt.Sprint(hashes) == fmt.Sprint(oneShot))

	other, _ := h.Hash(nil, radix.Keys{Namespace: "tenant-b"}, prompt, nil)
	fmt.Println("another tenant shares a hash:", other[0] == hashes[0])
	// Output:
	// full blocks hashed: 2 2
	// blocks: 3 same as hashing at once: true
	// another tenant shares a hash: false
}

// Insert a prompt, attach a payload to the new blocks, and match a second
// prompt that shares its first block.
func ExampleTree() {
	tree, err := radix.NewTree[string](4, 0)
	if err != nil {
		panic(err)
	}
	first := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	nodes, created, err := tree.Insert(nil, radix.Keys{}, first, nil)
	if err != nil {
		panic(err)
	}
	for i, n := range nodes[len(nodes)-created:] {
		n.Value = fmt.Sprintf("slot %d", i)
	}
	fmt.Println("cached blocks:", tree.Len())

	second := []uint32{1, 2, 3, 4, 50, 60, 70, 80}
	matched, err := tree.Match(nil, radix.Keys{}, second, nil)
	if err != nil {
		panic(err)
	}
	for _, n := range matched {
		fmt.Println("reuse", n.Tokens(), "from", n.Value)
	}
	// Output:
	// cached blocks: 2
	// reuse [1 2 3 4] from slot 0
}

// Find how many tokens of a block that does not fully match agree with a
// cached one (TensorRT-LLM's partial reuse).
func ExampleTree_MatchPartial() {
	tree, err := radix.NewTree[int](4, 0)
	if err != nil {
		panic(err)
	}
	if _, _, err := tree.Insert(nil, radix.Keys{}, []uint32{1, 2, 3, 4, 5, 6, 7, 8}, nil); err != nil {
		panic(err)
	}
	matched, partial, err := tree.MatchPartial(nil, radix.Keys{}, []uint32{1, 2, 3, 4, 5, 6, 9, 9}, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println("whole blocks:", len(matched))
	fmt.Println("next block agrees on", partial.Tokens, "tokens of", partial.Node.Tokens())
	// Output:
	// whole blocks: 1
	// next block agrees on 2 tokens of [5 6 7 8]
}

// Commit blocks one at a time as decode fills them, with what a "stored"
// event for a KV-aware router carries, then evict the newest.
func ExampleTree_InsertChild() {
	tree, err := radix.NewTree[int](2, 0)
	if err != nil {
		panic(err)
	}
	keys := radix.Keys{LoRA: "sql-adapter"}
	var last *radix.Node[int]
	for _, block := range [][]uint32{{10, 11}, {12, 13}, {14, 15}} {
		n, created, err := tree.InsertChild(last, keys, block, nil)
		if err != nil {
			panic(err)
		}
		if created {
			parent, hasParent := n.ParentHash()
			fmt.Printf("stored %x after %x (%t): tokens %v, lora %s\n", n.Hash()&0xffff, parent&0xffff, hasParent, n.Tokens(), n.Keys().LoRA)
		}
		last = n
	}
	removed, err := tree.RemoveSubtree(last, func(n *radix.Node[int]) {
		fmt.Printf("removed %x\n", n.Hash()&0xffff)
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("depth:", last.Depth(), "removed:", removed, "left:", tree.Len())
	// Output:
	// stored 75a9 after 0 (false): tokens [10 11], lora sql-adapter
	// stored e51d after 75a9 (true): tokens [12 13], lora sql-adapter
	// stored 2e after e51d (true): tokens [14 15], lora sql-adapter
	// removed 2e
	// depth: 3 removed: 1 left: 2
}
