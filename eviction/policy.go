package eviction

// Policy decides which evictable key of a cache leaves next.
//
// A key is tracked from [Policy.Insert] until it is returned by
// [Policy.Evict] or dropped by [Policy.Remove]. A tracked key is either
// evictable or pinned; a freshly inserted key is evictable. The owner of the
// cache keeps the bytes and the capacity accounting; the policy only orders
// keys, so the same policy value serves a kvcache tier (where most keys are
// pinned by running requests) and the trace replay (a classic cache where
// every request is a lookup and a miss inserts).
//
// Policies are not safe for concurrent use: the owner serializes all calls.
// Calls naming an unknown key (Access, Pin, Unpin, Remove) are no-ops, so an
// owner never has to look a key up before telling the policy about it.
//
// The conformance suite of package evictiontest checks an implementation
// with one call, evictiontest.Run(t, factory). It expects a policy to:
//
//   - start empty, and count in Len every tracked key, pinned or not,
//     after every call;
//   - return from Evict only tracked keys that are not pinned (so each at
//     most once per Insert, and never one removed), and false exactly when
//     no tracked key is evictable, even after the clock has moved;
//   - not count pins: Pin twice then Unpin once leaves a key evictable, and
//     Unpin of an evictable key is not held against a later Pin;
//   - refuse an Insert of a tracked key, pinned or not, with an error
//     wrapping ErrKeyExists and no other effect, and an Insert of a
//     malformed Entry with an error wrapping ErrInvalidEntry, leaving the
//     key untracked;
//   - change nothing on Access, Pin, Unpin or Remove of a key never
//     inserted (a Pin before Insert does not pin the key);
//   - let a key that was removed, pinned or not, or evicted be inserted
//     again, evictable;
//   - be deterministic: two policies given the same calls and the same
//     clock readings choose the same victims (so a policy reads time only
//     from the Clock its factory is given);
//   - allocate nothing in a steady-state cycle of Access, Pin, Unpin, Evict
//     and Insert, a promise of this package's policies rather than of the
//     contract, which a test waives with evictiontest.AllowAllocs;
//   - keep the promise of each optional interface it implements:
//     Access of a pinned key changes no victim when IgnoresPinnedAccess
//     says so ([PinnedAccessIgnorer]), InsertPinned is Insert then Pin
//     ([PinnedInserter]), Forget of a tracked key or of one never inserted
//     changes nothing ([Forgetter]), and Rollback is exact ([Transactional]):
//     calls between Begin and Rollback change no later victim, calls
//     between Begin and Commit count as ordinary calls, and Commit or
//     Rollback outside a transaction do nothing.
type Policy[K comparable] interface {
	// Insert starts tracking k as evictable, described by e. It returns an
	// error wrapping ErrInvalidEntry when e is malformed (for example a size
	// below 1 or a priority outside 0..100) and one wrapping ErrKeyExists
	// when k is already tracked; the policy is then unchanged.
	Insert(k K, e Entry) error
	// Access records a use of k (a cache hit), pinned or not.
	Access(k K)
	// Pin makes k ineligible as a victim until Unpin. Pinning a pinned key
	// does nothing: the owner counts references, the policy does not. The
	// key's history (recency, frequency, priority) is kept while it is
	// pinned.
	Pin(k K)
	// Unpin makes a pinned k evictable again. Unpinning an evictable key
	// does nothing.
	Unpin(k K)
	// Remove stops tracking k without choosing it as a victim (its unit was
	// freed or invalidated). Pinned keys can be removed.
	Remove(k K)
	// Evict chooses an evictable key, stops tracking it and returns it. It
	// returns false when no tracked key is evictable. It never returns a
	// pinned key.
	Evict() (K, bool)
	// Len returns the number of tracked keys, pinned or not.
	Len() int
}

// PinnedAccessIgnorer is implemented by a Policy whose Access of a pinned
// key changes none of the victims it will choose. An owner that reports a
// hit on a key it has just pinned, as a kvcache tier does, may skip that
// call when IgnoresPinnedAccess returns true, and save a lookup per hit. A
// policy that does not implement the interface, or returns false, must be
// told every hit. Package evictiontest checks the claim of any policy that
// makes it.
type PinnedAccessIgnorer interface {
	IgnoresPinnedAccess() bool
}

// PinnedInserter is implemented by a Policy that can start tracking a key
// pinned, in one call. InsertPinned(k, e) does what Insert(k, e) followed,
// when it succeeds, by Pin(k) does: it returns the same error, and every
// later call makes the policy choose the same victims. An owner that
// inserts keys it is using at once (as a kvcache tier does with the units
// it places for a sequence) calls it when the policy has it, and saves a
// call and a lookup per key. Every policy of this package implements it;
// package evictiontest checks the equivalence for any policy that does.
type PinnedInserter[K comparable] interface {
	InsertPinned(k K, e Entry) error
}

// Forgetter is implemented by a Policy that keeps history of keys it no
// longer tracks (S3FIFO's ghost queue). Forget(k) tells it that k will
// never be inserted again, so that it drops whatever it remembers of k:
// afterwards the policy chooses the same victims as one that never tracked
// k. An owner whose keys can die (a kvcache block that is forgotten never
// lends its UnitIDs to another) calls it when they do: history of a dead
// key only takes the room of live keys' history, and, with an index over
// slots that keys reuse (TaggedIndex), turns every lookup of the slot's
// new key into an overflow lookup. Forget of a key that is tracked, or
// unknown, does nothing. Package evictiontest checks the contract for any
// policy that implements it.
type Forgetter[K comparable] interface {
	Forget(k K)
}
