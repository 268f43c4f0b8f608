package kvcache

import "fmt"

// A policy whose Insert fails where the cache must place a unit, or whose
// Evict returns a key that is no evictable unit of its arena, leaves the
// cache with a slot it cannot account for or hand out. Panicking would hand
// the bug of a user's policy to the whole server; carrying on would let the
// accounting drift. So the cache records the breach (poison), keeps every
// slot accounted for as well as it can (a victim that cannot be put back is
// dropped, a unit that cannot be adopted frees its slot, a bad victim is
// ignored) and refuses every later mutating call with the recorded error
// (ErrPolicy).

// poison records that the policy of arena a broke its contract, as
// described by format and args (which may wrap the policy's error with %w),
// and returns the cache's poison error (the first one recorded).
func (c *Cache) poison(a *arena, format string, args ...any) error {
	if c.poisoned == nil {
		c.poisoned = fmt.Errorf("%w: %s policy of pool %d: "+format, append([]any{ErrPolicy, a.tier, a.pool}, args...)...)
	}
	return c.poisoned
}

// poisonWith records err, a panic of user code that decides eviction (a
// policy or the cost model), as the cause of the poison, unless the cache
// is poisoned already, and returns the poison error.
func (c *Cache) poisonWith(err error) error {
	if c.poisoned == nil {
		c.poisoned = fmt.Errorf("%w: %w", ErrPolicy, err)
	}
	return c.poisoned
}

// reportBreach makes every mutating method (through unlock) return the
// poison error when a policy broke its contract during the call, even if
// the call completed (a panic in a call that returns nothing, such as
// Unpin, or in the Remove of a pruned unit).
func (c *Cache) reportBreach(err *error) {
	if *err == nil && c.poisoned != nil {
		*err = c.poisoned
	}
}
