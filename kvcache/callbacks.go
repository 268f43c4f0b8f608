package kvcache

import (
	"fmt"
	"runtime/debug"

	"github.com/kvtier/kvtier/eviction"
)

// Every call from the cache into user code goes through a function of this
// file: the eviction policies (and the clock they read), the Mover, the
// Decider and the cost model (its weight functions), and the policy
// factories. Each one
// recovers a panic, because a server that recovers panics itself (net/http
// does, per request) would otherwise keep using a cache whose transaction
// was left half-applied: slots pinned for good, counts that no longer add
// up. What a recovered panic does depends on what can still be trusted:
//
//   - a policy that panicked has an unknown state, so its arena stops
//     calling it (the arena keeps its own accounting exact, as if every
//     call had succeeded), the running operation is rolled back where it
//     has not committed yet, and the cache is poisoned (ErrPolicy);
//   - a panicking Decider or cost model is treated like a policy: it
//     decides what eviction does;
//   - a panicking Mover is a failed batch whose writes are unknown: the
//     operation is rolled back and the units whose slots the batch would
//     have written are dropped, ending the operation's own sequence if the
//     rollback pinned one of them again (ErrCopyFailed); the cache is not
//     poisoned.

// PanicError is what a panic in user code becomes: an error returned by the
// cache wraps it (errors.As) together with the sentinel of what panicked
// (ErrPolicy for a policy, the Decider or the cost model, ErrCopyFailed
// for the Mover, ErrInvalidConfig for a policy factory).
type PanicError struct {
	// Call names the call that panicked, for example "gpu policy of pool
	// 0: Insert" or "Mover.Copy".
	Call string
	// Value is the value the code panicked with.
	Value any
	// Stack is the stack of the panicking goroutine when it was recovered.
	Stack []byte
}

// Error returns "<Call> panicked: <Value>". The cache returns it wrapped
// in an error that names the package and the sentinel.
func (e *PanicError) Error() string {
	return fmt.Sprintf("%s panicked: %v", e.Call, e.Value)
}

// newPanicError wraps the value r recovered from call.
func newPanicError(call string, r any) *PanicError {
	return &PanicError{Call: call, Value: r, Stack: debug.Stack()}
}

// recoverPolicy is deferred by every call into a's policy: a panic breaks
// the arena (its policy is not called again) and poisons the cache. errp,
// when not nil, receives the panic as the call's error.
func (a *arena) recoverPolicy(call string, errp *error) {
	r := recover()
	if r == nil {
		return
	}
	pe := newPanicError(fmt.Sprintf("%s policy of pool %d: %s", a.tier, a.pool, call), r)
	a.broken = pe
	a.cache.poisonWith(pe)
	if errp != nil {
		*errp = pe
	}
}

// The policy* methods call the arena's policy unless it is muted: broken
// by a panic, or replaying a rollback it undoes itself (see arena.mute).

func (a *arena) policyInsert(u UnitID, e eviction.Entry) (err error) {
	if a.muted() {
		return nil
	}
	defer a.recoverPolicy("Insert", &err)
	return a.policy.Insert(u, e)
}

func (a *arena) policyInsertPinned(u UnitID, e eviction.Entry) (err error) {
	if a.muted() {
		return nil
	}
	defer a.recoverPolicy("InsertPinned", &err)
	return a.pinnedInserter.InsertPinned(u, e)
}

func (a *arena) policyPin(u UnitID) {
	if a.muted() {
		return
	}
	defer a.recoverPolicy("Pin", nil)
	a.policy.Pin(u)
}

func (a *arena) policyUnpin(u UnitID) {
	if a.muted() {
		return
	}
	defer a.recoverPolicy("Unpin", nil)
	a.policy.Unpin(u)
}

func (a *arena) policyRemove(u UnitID) {
	if a.muted() {
		return
	}
	defer a.recoverPolicy("Remove", nil)
	a.policy.Remove(u)
}

func (a *arena) policyAccess(u UnitID) {
	if a.muted() {
		return
	}
	defer a.recoverPolicy("Access", nil)
	a.policy.Access(u)
}

// policyEvict asks the policy for a victim; a muted or panicking policy
// gives none.
func (a *arena) policyEvict() (u UnitID, ok bool) {
	if a.muted() {
		return 0, false
	}
	defer a.recoverPolicy("Evict", nil)
	return a.policy.Evict()
}

// policyBegin, policyCommit and policyRollback drive a policy that
// implements eviction.Transactional (txPolicy).
func (a *arena) policyBegin() {
	if a.txPolicy == nil || a.broken != nil {
		return
	}
	defer a.recoverPolicy("Begin", nil)
	a.txPolicy.Begin()
}

func (a *arena) policyCommit() {
	if a.txPolicy == nil || a.broken != nil {
		return
	}
	defer a.recoverPolicy("Commit", nil)
	a.txPolicy.Commit()
}

func (a *arena) policyRollback() {
	if a.txPolicy == nil || a.broken != nil {
		return
	}
	defer a.recoverPolicy("Rollback", nil)
	a.txPolicy.Rollback()
}

// copyBatch hands the transaction's batch to the Mover. A panic is
// returned as a *PanicError: a failed batch whose writes are unknown (see
// dropDestinations).
func (c *Cache) copyBatch(batch []Copy) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = newPanicError("Mover.Copy", r)
		}
	}()
	return c.mover.Copy(batch)
}

// decide asks the Decider (DefaultDecider when Config.Decider is nil)
// about victim v. A panic, of the Decider or of the cost model's weight
// functions it calls, poisons the cache like a policy's (they decide what
// eviction does); the victim is then dropped.
func (c *Cache) decide(v Victim) (move bool) {
	defer func() {
		if r := recover(); r != nil {
			c.poisonWith(newPanicError("Decider", r))
			move = false
		}
	}()
	if c.decider == nil {
		return DefaultDecider(v)
	}
	return c.decider(v)
}

// callFactory builds the policy of one arena, turning a panic of the
// factory, or of the new policy's Len, into an error.
func callFactory(f PolicyFactory, info PoolInfo) (p eviction.Policy[UnitID], n int, err error) {
	defer func() {
		if r := recover(); r != nil {
			p, err = nil, newPanicError(fmt.Sprintf("%s policy factory of pool %d", info.TierName, info.Pool), r)
		}
	}()
	p, err = f(info)
	if err != nil || p == nil {
		return p, 0, err
	}
	return p, p.Len(), nil
}
