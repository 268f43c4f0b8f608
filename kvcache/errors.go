package kvcache

import "errors"

// Errors returned by this package. Every returned error wraps exactly one of
// them (test with errors.Is) and names the offending value; an error caused
// by a panic in user code also wraps a *PanicError (errors.As). An
// operation that returns an error has changed nothing: no pin, slot, unit
// or sequence is left half-done. The exceptions are named where they
// apply: ErrPolicy (the cache is unusable), a Mover that panicked
// (ErrCopyFailed: the units it may have written are dropped), and the
// commit with which Append and Fork begin, which stays.
var (
	// ErrInvalidConfig reports a Config that New cannot use: a missing
	// layout, a bad capacity, a policy factory that failed, an invalid cost
	// model.
	ErrInvalidConfig = errors.New("kvcache: invalid config")
	// ErrInvalidRequest reports a malformed request: priorities outside
	// 0..100, bad priority ranges, unsorted extra keys, a malformed sparse
	// selection, or an operation the sequence's mode does not allow.
	ErrInvalidRequest = errors.New("kvcache: invalid request")
	// ErrUnknownSequence reports a sequence id that was never returned by
	// Acquire or Fork, or was already released.
	ErrUnknownSequence = errors.New("kvcache: unknown sequence")
	// ErrOutOfRange reports an index or count outside its range: truncating
	// more tokens than a sequence holds, a layer, slice, head or block that
	// does not exist.
	ErrOutOfRange = errors.New("kvcache: out of range")
	// ErrNoSpace reports that the GPU tier cannot supply the slots an
	// operation needs because every other unit is pinned.
	ErrNoSpace = errors.New("kvcache: no space")
	// ErrCopyFailed wraps the error a Mover returned; the operation was
	// rolled back. When the Mover panicked instead, the error wraps the
	// panic (*PanicError): the operation was rolled back too, but since the
	// batch's writes are unknown, the units left in the slots it would
	// have written (victims given their slots back) are dropped and counted
	// in TierStats.Lost. One of them may be a unit the operation's own
	// sequence released in the same call (Truncate, Append and
	// SparseAccess release pins first) and that the rollback pinned again:
	// that sequence's KV is then unknown, so the sequence is ended as by
	// Abort (counted in Stats.Aborted; later calls with its id return
	// ErrUnknownSequence) and the error says "sequence N ended". The cache
	// is not poisoned.
	ErrCopyFailed = errors.New("kvcache: copy failed")
	// ErrReentrant reports a call made from a callback the cache runs
	// with its lock held (an eviction policy, the Mover, the cost model's
	// weight functions): it would wait for the lock its own caller holds.
	// Stats, Slots, Pools, SlicePool, BlockTokens and Layout answer such a
	// call (Stats with the state before the running operation); every
	// other method returns this error. The event sink runs without the
	// lock and may call anything.
	ErrReentrant = errors.New("kvcache: called from a callback of the cache")
	// ErrBusy reports an operation that needs the cache idle (Clear) while
	// sequences are still live, transfers in flight or a long operation
	// under way; one that needs a sequence's blocks committed (Fork) while
	// a transfer still moves one of them; or a call from the event sink on
	// a sequence whose commit, run in steps, delivered the events it
	// handles (the call would wait for itself).
	ErrBusy = errors.New("kvcache: busy")
	// ErrUnitMissing is what a KeyedEngine wraps when a store it reads
	// from lacks a unit: never written there, evicted by the store, or
	// lost with it. The cache recomputes the unit (TierStats.Missing).
	ErrUnitMissing = errors.New("kvcache: unit missing from its store")
	// ErrUnitCorrupt is what a KeyedEngine wraps when the bytes a store
	// holds for a unit fail their check: a header naming another unit, a
	// bad checksum, a short value. They are never served; the cache
	// recomputes the unit (TierStats.Corrupt).
	ErrUnitCorrupt = errors.New("kvcache: unit corrupt in its store")
	// ErrInvariant reports, only in a build with the kvtier_invariants tag
	// (go test -tags kvtier_invariants), a call after which the cache's
	// accounting failed its full recount (a unit pinned more or less than
	// its sequences pin it, a slot both free and used, a block referenced
	// by no one...): a defect of kvtier's, or of user code that reaches
	// into memory it does not own. Every call in such a build ends
	// with that check (unless a long operation is between its steps), which
	// costs time proportional to what the cache holds; the call that
	// caused the damage returns this error, naming the violation, and the
	// cache is poisoned as by ErrPolicy.
	ErrInvariant = errors.New("kvcache: invariant violated")
	// ErrInvalidCopy reports a Copy that a MemoryStore cannot perform: a bad
	// tier, pool or slot.
	ErrInvalidCopy = errors.New("kvcache: invalid copy")
	// ErrPolicy reports an eviction policy that broke its contract: its
	// Insert returned an error for a unit the cache had to place (the
	// cache only inserts valid entries of keys the policy does not track,
	// see PolicyFactory), or its Evict returned a key that is not an
	// evictable unit of its arena (pinned on the GPU or by the running
	// operation on the CPU, of another arena, of a forgotten block,
	// garbage), or none while the arena had evictable units; or a policy,
	// or the cost model's weight function, that panicked (the error then
	// wraps a *PanicError). Without the policy the cache cannot keep its
	// accounting exact, so it is poisoned: the call that met the breach
	// and every later Acquire, Admit, Append, Commit, Fork, Truncate,
	// SparseAccess, Release, Abort and Clear return the same error, which
	// wraps ErrPolicy (and the error Insert returned, or the panic) and
	// names the policy's tier, pool and unit. A breach met before the
	// operation's copies is rolled back; one met later (during its commit,
	// or in Release) leaves the operation done. Either way the cache's own
	// accounting stays exact (Stats adds up, no pin leaks, a panicking
	// policy is never called again) and no slot whose bytes may be wrong
	// is served; the read-only methods still answer. Build a new Cache to
	// go on.
	ErrPolicy = errors.New("kvcache: policy broke its contract")
)
