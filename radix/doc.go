// Package radix finds which token blocks of a new sequence are already
// cached: chain hashing of token blocks and a token-verified prefix tree.
//
// # Blocks and hashes
//
// A sequence is cut into blocks of BlockTokens consecutive tokens (a power
// of two, at least 2). A [Hasher] gives each full block a 64-bit chain hash
// (xxhash64) over the previous block's hash, the block's tokens and its
// extra keys; the first block mixes in the hasher's seed and the sequence's
// [Keys] (namespace, or cache salt, and LoRA adapter) instead of a parent
// hash. Equal hashes therefore stand for equal prefixes, with the usual
// 64-bit caveat. [ExtraKey] values carry whatever else a block's KV depends
// on, such as multimodal item hashes. Hashing continues from a [State]
// (after a matched node, or after the blocks a decoding sequence already
// committed) without rehashing the prefix, and allocates nothing beyond the
// destination slice the caller passes.
//
// # The tree
//
// A [Tree] holds one [Node] per cached block, with a generic payload
// (Node.Value) for the owner: slots, tiers, reference counts. Lookups probe
// a single hash index keyed by chain hash, or compare the few children of a
// node directly, and every candidate is verified on its parent, tokens,
// extra keys and, for a first block, its Keys. A hash collision can make a
// lookup slower, never wrong: two different prefixes never share a node, and
// different namespaces never share anything.
//
//   - [Tree.Match] returns the longest cached prefix in whole blocks;
//     [Tree.MatchPartial] also reports how many tokens of the next block
//     agree with a cached block (TensorRT-LLM's partial reuse).
//   - [Tree.Insert] caches a whole sequence; [Tree.InsertChild] caches one
//     block under its parent in constant time, as decode fills blocks.
//   - [Tree.Remove] removes a leaf; [Tree.RemoveSubtree] and [Tree.Clear]
//     remove many, calling back once per node so the owner can free its
//     payload.
//   - [Tree.All], [Tree.Roots], [Node.Children], [Node.Parent],
//     [Node.Depth] and [Node.NumChildren] expose the shape eviction rules
//     need (for example "only leaves leave").
//   - [Node.Hash], [Node.ParentHash], [Node.Tokens] and [Node.Keys] give
//     what "stored" and "removed" events for KV-aware routers carry (an
//     owner such as package kvcache builds its events from them).
//
// # Contracts
//
// A Hasher is immutable and safe for concurrent use. A Tree and its nodes
// are not: the owner serializes every call, reads included. Bad input (a
// block of the wrong size, unsorted extra keys, a node that was removed or
// belongs to another tree, removing a node that has children) returns an
// error wrapping one of the package's sentinel errors and leaves the tree
// unchanged; nothing here panics on input.
//
// The package depends on the standard library and xxhash only; it knows
// nothing of tiers, slots or eviction policies.
package radix
