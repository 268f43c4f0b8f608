// Package kvcache is the tiered KV cache an inference server talks to on
// every scheduling step. It owns the bookkeeping: which token blocks are
// cached, where each unit's bytes live (GPU, CPU or dropped), which requests
// share which prefix, what to copy, what to recompute and what to evict
// next. The server owns the tensors and the kernels; it reads the block
// tables kvcache gives and executes, through a Mover, the copies kvcache
// plans.
//
// # Vocabulary
//
// A token block is BlockTokens consecutive tokens (the layout's
// TokensPerUnit). A unit is one block's KV for one slice of the model (all
// layers, one layer, or one layer and KV head: see package layout). Each
// tier keeps one slot arena per layout pool (layers with the same unit size
// and window), and one eviction policy per arena, keyed by UnitID.
//
// # The life of a request
//
//	plan, err := c.Acquire(kvcache.Request{Tokens: prompt, Namespace: tenant})
//	// copy nothing: plan.Copies were executed by the Mover already
//	// compute plan.Compute (uncached and recompute ranges) into the slots of
//	// c.BlockTable(nil, plan.Seq, slice), then decode:
//	plan, err = c.Append(plan.Seq, token) // every full block is shared at once
//	c.Release(plan.Seq)                    // units stay cached until evicted
//
// Acquire matches the longest cached prefix (same namespace, LoRA and extra
// keys: different namespaces never share anything), pins every unit the
// request uses on the GPU, copies CPU units back, gives dropped or missing
// units fresh slots and returns the token ranges to compute (a block with a
// dropped unit is recomputed whole, so its CPU units are not copied back).
// Append commits each block as it fills (early reuse). Truncate rolls back speculative
// tokens; Fork shares full blocks and copies the partial one. Admit answers
// how many GPU slots a prompt would still need. Sparse (BSA, MoBA) requests
// keep their blocks referenced but pin only what the current step writes;
// SparseAccess brings the blocks a layer's heads selected to the GPU, so the
// GPU need not hold the whole context.
//
// # Tiers and eviction
//
// Tiers are exclusive: a unit is on the GPU, on the CPU or dropped.
// Offloading copies GPU to CPU and frees the GPU slot; onboarding copies
// back and frees the CPU slot. When a GPU arena needs a slot its policy
// picks an evictable (unpinned) victim: it is offloaded when the CPU arena
// has or can make room and the cost model says copying it back is cheaper
// than recomputing it, and dropped otherwise. A victim whose block already
// lacks a unit's bytes is dropped whatever the cost model says: the block
// will be recomputed whole before anything reads that copy (a dense
// Acquire recomputes it, a sparse one stops before it), sliding-window
// layers included. Only blocks held by a live sparse sequence are exempt,
// since SparseAccess restores units one at a time and onboards the rest
// (see Config.CostModel). CPU victims are dropped.
//
// Eviction respects the prefix tree only through order, as in vLLM and
// TensorRT-LLM: Release unpins a sequence's blocks from its last to its
// first, so a recency policy evicts a released chain from its tail. A unit
// whose descendants are still cached may still be evicted (a FIFO or a
// cost-aware policy may prefer it): it becomes dropped and stays in the
// tree, and a later match reports its block's tokens for recompute while
// later blocks still hit (Pensieve). A tree node is removed (a BlockRemoved
// event) only when none of its units holds bytes, no sequence references
// it and it has no children.
//
// # Failures
//
// Every mutating operation is a transaction: if the GPU cannot supply the
// slots (everything pinned) it fails with ErrNoSpace, and if the Mover fails
// it fails with ErrCopyFailed; either way nothing changed (no pin, slot,
// unit, stat or sequence), except that policies may have reordered the
// victims they had chosen. Bad input returns an error wrapping one of the
// package's sentinels and never panics. A custom eviction policy that
// breaks its contract (its Insert fails where the cache must place a unit,
// its Evict returns a key that is no evictable unit) poisons the cache:
// every later mutating call fails with ErrPolicy.
//
// # Concurrency
//
// A Cache is safe for concurrent use. One mutex serializes all calls
// (policies and the prefix tree are not goroutine-safe) and is held across
// Mover calls, which makes rollback exact; events are queued under the lock
// and delivered in order after it is released. Stats reads counters kept
// up to date under the lock.
package kvcache
