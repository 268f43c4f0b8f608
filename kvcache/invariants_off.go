//go:build !kvtier_invariants

package kvcache

// invariantChecks is off in a normal build: the check costs time
// proportional to what the cache holds (build with -tags
// kvtier_invariants to turn it on, see ErrInvariant).
const invariantChecks = false
