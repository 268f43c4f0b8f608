// Package lfu is the policy of the custompolicy example: a least frequently
// used eviction policy that implements eviction.Policy, written the way a
// user of kvtier would write their own. It is an example, not part of
// kvtier's API.
//
// LFU evicts the evictable key used the fewest times, and among those the
// least recently used. A key's count starts at 1 on Insert and grows by one
// on every Access; counts saturate at MaxCount, beyond which keys are
// ordered by recency only. Keys are kept in one list per count, and a
// two-level bitmap of the non-empty lists finds the lowest count with two
// trailing-zero instructions, so every operation is O(1) whatever the keys
// and counts (the idea of Shah, Mitra and Matani, "An O(1) algorithm for
// implementing the LFU cache eviction scheme", 2010, with an array of
// buckets instead of a linked list of them, so that a key coming back from
// a pin finds its bucket directly).
package lfu
