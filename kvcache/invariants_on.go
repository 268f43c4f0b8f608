//go:build kvtier_invariants

package kvcache

// invariantChecks turns on the full accounting check at the end of every
// call (see checkAfterCall and ErrInvariant).
const invariantChecks = true
