// Package replay runs an eviction policy as a classic cache over a request
// trace and reports miss ratios the way libCacheSim does, so that a policy
// can be measured alone on real workloads and checked against libCacheSim's
// published numbers.
//
// The cache of [Run] holds objects up to a capacity in bytes (or in objects
// with Config.IgnoreObjectSize, when every size counts as 1) and keeps no
// per-object metadata in that capacity. For each request, as libCacheSim's
// cache_get_base and simulator do:
//
//   - a request of size 0 is skipped and not counted (libCacheSim's readers
//     drop them by default); a negative size is an error;
//   - a hit calls Policy.Access; the cached object keeps the size it was
//     inserted with, even if the request names another size (libCacheSim
//     does not update sizes on hits), while the request's bytes count in
//     RequestBytes;
//   - a miss counts one miss and the request's bytes. If the object fits the
//     cache at all (size <= Capacity), the replay evicts until
//     occupied+size <= Capacity and inserts it; a larger object is counted
//     and not cached. A policy implementing [Admitter] (S3-FIFO) is asked
//     first, and may refuse objects, as libCacheSim's per-policy can_insert
//     and insert do.
//
// A hit or miss is decided by the replay's own index of cached objects, not
// by the policy, so a policy that loses track of keys shows up as an error
// wrapping [ErrPolicy] rather than as a wrong miss ratio.
//
// Policies that read a clock (prioritized LRU, retention) need one that
// moves with the trace: pass an eviction.ManualClock in Config.Clock and
// the replay advances it before every counted request, to the request's
// number (virtual time, the default) or to its trace timestamp (see
// [TimeSource]).
//
// Bad input returns an error: a Config that cannot run (or a nil policy)
// wraps [ErrInvalidConfig], a request of negative size [ErrInvalidRequest]
// (naming the request), a trace that does not decode the reader's error
// (such as trace.ErrMalformed).
//
// Replays are deterministic. A Run is not safe for concurrent use with
// other uses of its policy, reader or clock; separate runs with separate
// values may run in parallel.
package replay
