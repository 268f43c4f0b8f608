// Package kvcache is the tiered KV cache an inference server talks to on
// every scheduling step. It owns the bookkeeping: which token blocks are
// cached, where each unit's bytes live (which tier, or dropped), which requests
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
// and window), and one eviction policy per arena, keyed by UnitID. The
// tiers are an ordered list (Config.Tiers): the GPU first, usually the CPU
// second (GPUAndCPU), and any further tiers below.
//
// # The life of a request
//
//	plan, err := c.Acquire(kvcache.Request{Tokens: prompt, Namespace: tenant})
//	// copy nothing: plan.Executed was done by the Mover already
//	// compute plan.Compute (uncached and recompute ranges) into the slots of
//	// c.BlockTable(nil, plan.Seq, slice), then decode:
//	plan, err = c.Append(plan.Seq, token) // commits the KV computed so far
//	c.BlockTables(&step, ids...)          // every table of the batch, for the kernels
//	c.Commit(plan.Seq, plan.Tokens)       // the last step ran: share it too
//	c.Release(plan.Seq)                   // committed units stay cached
//
// Acquire matches the longest cached prefix (same namespace, LoRA and extra
// keys: different namespaces never share anything), pins every unit the
// request uses on the GPU, copies units back from lower tiers, gives dropped or missing
// units fresh slots and returns the token ranges to compute (a block with a
// dropped unit is recomputed whole, into a private copy, so its units on
// lower tiers are not copied back). Admit answers how many GPU slots a prompt would
// still need. Sparse (BSA, MoBA) requests keep their blocks referenced but
// pin only what the current step writes; SparseAccess brings the blocks a
// layer's heads selected to the GPU, so the GPU need not hold the whole
// context. Truncate rolls back speculative tokens; Fork shares full blocks
// and copies the partial one.
//
// A block is reusable by other requests only once the server has said its
// bytes are written: Commit(seq, upTo) after a chunk of a chunked prefill,
// or implicitly the sequence's next Append or Fork (the forward pass that
// produced the new token wrote every earlier one). Until then it is private
// to its sequence: another request with the same prompt computes its own
// copy (Plan.BeingWrittenTokens tells it how much it could reuse by
// waiting), and a sequence that ends before (Release, Abort: the prefill
// failed, the client went away) or truncates discards it. So the prefix
// tree holds only written KV, and a request never reuses a block whose
// prefill did not run.
//
// # Tiers and eviction
//
// Tiers are exclusive: a unit is on one tier or dropped (with
// write-through, a unit may also have a backup on the write-through tier
// below it).
// When an arena needs a slot its policy picks an evictable (unpinned)
// victim, which the Decider (DefaultDecider unless Config.Decider is
// set) either moves down to the next tier, which makes room the same way,
// or drops; the last tier's victims are dropped. A unit is loaded back to the GPU from
// whichever tier holds it. Config.Recompute is the one cost model: the
// default Decider weighs it against the time to load a victim back over
// the tiers' links (TierConfig.Link), and RetentionPolicy prices units
// with it.
//
// Eviction respects the prefix tree only through order, as in vLLM and
// TensorRT-LLM: Release unpins a sequence's blocks from its last to its
// first, so a recency policy evicts a released chain from its tail. A unit
// whose descendants are still cached may still be evicted (a FIFO or a
// cost-aware policy may prefer it): it becomes dropped and stays in the
// tree, and a later match reports its block's tokens for recompute while
// later blocks still hit (Pensieve). A tree node is removed (a BlockRemoved
// event) when none of its units holds bytes, no sequence references it and
// it has no children, or with the subtree of a hollow ancestor when the
// tree is over its budget (see Metadata).
//
// With Config.BlockKeys a policy tracks one key per block and pool instead
// of one per unit, and a block's units leave a tier together: the policy
// costs per block, which a dense model paged per layer wants.
//
// # Failures
//
// Every mutating operation is a transaction: if the GPU cannot supply the
// slots (everything pinned) it fails with ErrNoSpace before any policy is
// told anything, and if the Mover returns an error it fails with
// ErrCopyFailed; either way nothing changed (no pin, slot, unit, stat or
// sequence), but for the implicit commit with which Append and Fork begin.
// A Mover that panics is the exception described at ErrCopyFailed. A policy
// that implements eviction.Transactional (every policy of package eviction
// does) is rolled back exactly: it chooses the same victims afterwards as
// if the operation had never run; another is compensated call by call
// (victims inserted again, pins undone with Unpin), which may reorder it.
// Bad input returns an error wrapping one of the package's sentinels and
// never panics.
//
// Policies, the Mover, the Decider, the cost model and the event sink are
// user code, and the cache contains them. A policy that breaks its contract (an Insert
// that fails where the cache must place a unit, an Evict that returns a key
// that is no evictable unit of its arena, pinned in either tier, stale or
// garbage, or nothing while units are evictable) or that panics poisons the
// cache: the call returns an error wrapping ErrPolicy, as does every later
// mutating call, the cache's accounting stays exact and no wrong byte is
// ever served. A Decider or cost model that panics is a policy. A Mover
// that panics fails its operation (ErrCopyFailed, the panic as a
// *PanicError) and the units whose slots it may have written are dropped.
// A sink that panics is counted and skipped. See PanicError.
//
// # Metadata
//
// The prefix tree keeps, beside the blocks that hold bytes, dropped blocks
// whose descendants are cached (a later request recomputes them and still
// hits the blocks below). Config.MaxBlocks bounds the tree: past it, the
// least recently used of those hollow blocks is removed with its subtree.
//
// # Concurrency
//
// A Cache is safe for concurrent use. One mutex serializes all calls
// (policies and the prefix tree are not goroutine-safe; a long operation
// takes it once per step, see Long operations) and is held across
// policy, Mover, Decider, cost model and TransferEngine.Start calls (an
// engine's copies run after it), which makes rollback exact; such a
// callback that calls back into the cache gets ErrReentrant (Stats answers
// it) instead of a deadlock. Events are delivered after the lock is
// released, by the goroutine whose operation produced them, in operation
// order (see EventSink), or buffered for TakeEvents. Stats reads counters
// kept up to date under the lock.
//
// # Long operations
//
// No call that a server makes per request holds the lock for longer than a
// step of bounded work, whatever the prompt's length: an Acquire, Prefetch,
// Adopt, Commit (or the commit an Append or Fork makes), Fork, Release or
// Abort over more units than a step runs as a series of steps, each planned and committed under the lock as
// one transaction, and releases the lock between them, letting in first
// the callers that wait for it. Steps have fixed sizes (units of work,
// not time), so an operation plans the same thing in every run.
//
// Between two steps another caller sees what the steps so far did, as
// after any finished call: victims have moved or left, Stats counts it,
// the event sink has heard of it. A long Acquire's sequence has no SeqID
// until its last step; a released sequence is gone from its first. A
// sequence being committed or forked in steps shows its committed blocks
// in the prefix tree (as a chunked prefill does) and makes the other calls
// on it wait until the commit or Fork is done; a Fork's child has no SeqID
// until its last step. A long Acquire reserves, in one step, the
// GPU slots it will take: ErrNoSpace then, with nothing taken, or a
// reservation that no other operation can take from it, so that running
// out of room halfway cannot happen. A step that fails later (a Mover's
// error, a policy's breach) is rolled back, and the operation is undone as
// an Abort of its sequence would undo it: every pin and reference it took
// is released, while what its earlier steps moved stays where it is.
// Clear returns ErrBusy while a long operation is under way. Not in steps:
// Truncate, Admit and Blocks (their work grows with the blocks they touch),
// Clear (with the whole cache; it needs one with no live sequence), and the
// part of a Fork past what its child pins of a dense sequence at rest (the
// references to blocks below a window, a sequence whose units are still
// loading, a sparse sequence).
//
// With a synchronous Mover every step pays for its copies under the lock,
// so a long operation costs as many Mover calls as it has steps; a
// TransferEngine gets one open transfer per KV layer for the whole
// operation, started when the operation returns.
//
// # Asynchronous transfers
//
// A Mover runs an operation's copies inside the call, under the lock. A
// TransferEngine (Config.Engine) runs them off it: the operation plans,
// commits and returns at once (Plan.Loading counts the units still in
// flight), and Poll applies what the engine finished. A server asks
// Readiness (or WaitReady) which layers of a sequence it may read, so
// layer l's attention overlaps the loads of layer l+1 (transfers are
// started layer by layer); a load that failed comes back as a range to
// recompute, never as wrong bytes. Prefetch brings a queued request's
// prefix up ahead of its Acquire, and Request.MaxLoadTokens caps how much
// of one request loads at once. TierConfig.WriteThrough copies committed
// units to a tier below early, so that evicting them to it later is free
// (and, on a shared store, so that other servers can load them at once).
// MoverEngine adapts a Mover that only enqueues; AsyncMemoryStore is an
// engine over Go memory for tests and simulations.
//
// # Stores below the CPU
//
// A tier below the CPU may keep its bytes in a store that names units by
// content (a directory, a Redis shared by servers; package tierstore). A
// KeyedEngine receives the identity of every unit it moves (UnitKey), so
// the store can name it and check it on the way back; a unit the store
// lacks or holds corrupt fails its load (ErrUnitMissing, ErrUnitCorrupt)
// and is recomputed, never served. What another server (or this one's
// previous process) stored is unknown to the cache until Adopt registers
// it: UnitKeys gives a request's identities for a lookup in the store, and
// Adopt enters the prefix the store holds on its tier, metadata only.
//
// # Cost
//
// What a server pays per step does not grow with the context: an Append
// touches only the blocks whose pins change (a new block, a window moving
// past one), each sequence keeps its block tables up to date itself, and
// BlockTables hands out views of every table of a batch under one lock. A
// cached prompt costs the same per token at any length. BENCHMARKS.md has
// the measurements.
package kvcache
