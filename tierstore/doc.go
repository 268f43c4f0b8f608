// Package tierstore puts kvcache tiers below the CPU in stores: a local
// directory (package diskstore) or a Redis or Valkey server or cluster
// shared by several servers (package redisstore).
//
// A cache keeps such a tier like any other (a slot arena with its own
// capacity and policy, see kvcache.TierConfig); the bytes of its units live
// in a Store, addressed by the units' identity (kvcache.UnitKey) rather than
// by slot. Engine is the kvcache.KeyedEngine that moves the cache's copies:
// between the GPU and CPU tiers in memory (a kvcache.MemoryStore), and to
// and from the stores, off the cache's lock, in batches.
//
// Every stored value starts with a header naming the unit it holds (the
// deployment's fingerprint, namespace, LoRA, block hash, parent hash,
// depth, slice, the block's tokens and extra keys) and ends with a
// checksum of the whole value. A value is served only when its header
// names exactly the unit asked for and its checksum holds: a value written
// by another deployment, another tenant, or for other tokens whose 64-bit
// hash collides with the request's, and a value damaged on disk or on the
// wire, are reported as kvcache.ErrUnitCorrupt, a value not there as
// kvcache.ErrUnitMissing; the cache recomputes both, and only those units
// (a store reports them per key, as a kvcache.CopyErrors).
//
// Servers that share a store learn what it holds with Lookup: one batched
// membership query for a request's blocks, off the cache's lock, after
// which kvcache.Cache.Adopt registers the longest stored prefix on the
// store's tier; the next Acquire loads it.
package tierstore
