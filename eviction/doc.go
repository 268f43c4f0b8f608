// Package eviction defines the Policy interface that decides which cached
// key leaves next, the policies kvtier ships, and the Clock they read.
//
// A policy only orders keys. Its owner keeps the bytes and the capacity: a
// kvcache tier (where most keys are pinned by running requests) or the
// classic-cache replay of package replay (where every request is a lookup and
// a miss inserts). The same policy value serves either, so a policy written
// for a server can be tested alone on a real trace. Package evictiontest is a
// conformance suite that any implementation, shipped or user-written, runs
// with one call.
//
// # The policies
//
//	policy          evicts first                         per op        source
//	LRU             least recently used                  O(1)          -
//	FIFO            first inserted                       O(1)          -
//	PrioritizedLRU  lowest priority level, LRU within    O(1)          TensorRT-LLM
//	S3FIFO          one-hit wonders from a small queue,  O(1) amort.   libCacheSim (Dec 2024)
//	                then a 2-bit CLOCK over main
//	ARC             LRU of the keys seen once or of the  O(1)          libCacheSim
//	                keys seen twice, split by ghost hits
//	WTinyLFU        the less frequent of the window's    O(1) amort.   Caffeine
//	                and main's oldest (count-min sketch)
//	Retention       lowest cost/(now - last use)         O(log g)      Pensieve
//
// LRU is the baseline every serving engine starts from (vLLM's free-block
// queue is an LRU over released blocks). It is defeated by loops larger than
// the cache: a decode step that walks every layer's units in the same order
// evicts each unit just before it is needed again.
//
// FIFO ignores hits entirely. It is the cheapest policy and a useful floor;
// in kvcache it keeps a key's insertion place while the key is pinned, so it
// stays a FIFO even though every key is pinned while in use.
//
// PrioritizedLRU follows TensorRT-LLM's KvCacheRetentionConfig: priorities 0
// to 100 (default 35), the lowest non-empty level emptied first, and a
// priority that may expire back to the default after a duration. A server
// uses it to keep system prompts and drop decode tokens early. Choosing the
// victim is a trailing-zeros count on a 128-bit bitmap of non-empty levels.
//
// S3FIFO (Yang et al., SOSP 2023) puts new keys in a small FIFO (10% of the
// capacity), promotes keys hit at least twice to a main FIFO on their way
// out, and remembers evicted keys in a ghost queue so that a quick return goes
// straight to main. It resists scans and loops better than LRU at the same
// cost. It follows libCacheSim's code closely enough that a replay of
// libCacheSim's cloudPhysicsIO trace gives libCacheSim's published miss counts
// exactly (see package replay).
//
// ARC (Megiddo and Modha, FAST 2003) keeps keys seen once and keys seen
// at least twice in two LRU lists, remembers the keys each evicts in a
// ghost list, and moves the target size of the first list towards whichever
// ghost list is hit: a workload of scans grows the second list, one of new
// keys reused soon the first. It needs no parameter but the capacity. Like
// S3FIFO, it matches libCacheSim's miss counts on cloudPhysicsIO exactly;
// on that trace S3FIFO misses less at seven of the eight sizes
// libCacheSim publishes (BENCHMARKS.md). A hit costs ARC a list move where
// S3FIFO sets a counter.
//
// WTinyLFU is Caffeine's policy (Einziger, Friedman and Manes): a window
// LRU of 1% in front of a segmented LRU, and an admission filter, a
// count-min sketch of recent frequencies, that lets a key from the window
// into the main space only if it was seen more often than the key it
// would push out. A burst of keys seen once never reaches the main space;
// on skewed, stable popularity (Zipf) it misses within a point of S3FIFO
// and ARC, and less than otter, whose policy it is (BENCHMARKS.md). The sketch
// hashes the keys, so its choices depend on the key values (not only on
// their order, as the other policies' do) and keys must be integers or
// strings.
//
// Retention is Pensieve's cost-aware policy: a key's cost is its recompute
// cost from package costmodel (linear in context, optionally weighted by layer
// and position), and the victim is the key with the lowest cost per second of
// inactivity, chosen exactly (the same victim as an exhaustive scan, compared
// in 128-bit integer arithmetic) by a kinetic tournament over groups of equal
// cost; g is the number of distinct costs, small in a kvcache where costs come
// from (layer, chunk) pairs.
//
// # Key indexes
//
// LRU, FIFO, PrioritizedLRU, S3FIFO, ARC and WTinyLFU keep their keys in a
// slab of list nodes and find a key's node through an index. By default
// the index is a Go map, which takes any comparable key; at a million keys
// its cache misses are most of an operation's cost. Keys that are small
// non-negative integers (dense ids, slot or block numbers) can use a
// [DenseIndex] instead, one slice access per lookup: build one with
// [NewDenseIndex] and pass it to [NewLRUWithIndex], [NewFIFOWithIndex],
// [NewPrioritizedLRUWithIndex], [NewS3FIFOWithIndex], [NewARCWithIndex] or
// [NewWTinyLFUWithIndex]. The policy makes the same choices with either
// index; an Insert of a key the dense index cannot hold fails with
// [ErrKeyOutOfRange].
//
// # Contract
//
// Policies are not safe for concurrent use; the owner serializes calls, as a
// kvcache.Cache does under its lock. Hot operations allocate nothing once the
// number of tracked keys stops growing. Evict never returns a pinned key, and
// a pinned key keeps its history (recency, frequency, priority, last use).
// A policy whose Access of a pinned key changes nothing may say so by
// implementing PinnedAccessIgnorer, so that an owner that reports hits on
// keys it has just pinned can skip those calls. Every policy here also
// implements Transactional: an owner whose operation fails after it told
// the policy of pins and took victims (a kvcache transaction whose copies
// failed) rolls the policy back exactly, instead of compensating with calls
// that a recency policy would take as uses.
// Measured costs are in BENCHMARKS.md at the repository root.
package eviction
