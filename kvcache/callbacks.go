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

// recoverPolicy is deferred by every call into a's policy: a panic, or an
// exit of the goroutine (runtime.Goexit, when *returned is still false),
// breaks the arena (its policy is not called again) and poisons the cache.
// errp, when not nil, receives the panic as the call's error.
func (a *arena) recoverPolicy(call string, errp *error, returned *bool) {
	r := panicValue(recover(), *returned)
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

// goexitValue stands for the panic value of a callback that ended its
// goroutine (runtime.Goexit): the cache's code after the call does not
// run, so what a panic would have left consistent may not be.
const goexitValue = "runtime.Goexit called"

// panicValue returns what user code left a deferred recovery: r, the
// value recover returned, or goexitValue when the call neither returned
// nor panicked (it ended the goroutine); nil when it returned.
func panicValue(r any, returned bool) any {
	if r == nil && !returned {
		return goexitValue
	}
	return r
}

// The policy* methods call the arena's policy unless it is muted: broken
// by a panic, or replaying a rollback it undoes itself (see arena.muted).

func (a *arena) policyInsert(u UnitID, e eviction.Entry) (err error) {
	if a.muted() {
		return nil
	}
	returned := false
	defer a.recoverPolicy("Insert", &err, &returned)
	if ps := a.policyFor(u); ps != nil {
		err = ps.p.Insert(u, e)
	} else {
		err = a.policy.Insert(u, e)
	}
	returned = true
	return err
}

func (a *arena) policyInsertPinned(u UnitID, e eviction.Entry) (err error) {
	if a.muted() {
		return nil
	}
	returned := false
	defer a.recoverPolicy("InsertPinned", &err, &returned)
	if ps := a.policyFor(u); ps != nil {
		err = ps.pi.InsertPinned(u, e)
	} else {
		err = a.pinnedInserter.InsertPinned(u, e)
	}
	returned = true
	return err
}

func (a *arena) policyPin(u UnitID) {
	if a.muted() {
		return
	}
	returned := false
	defer a.recoverPolicy("Pin", nil, &returned)
	if ps := a.policyFor(u); ps != nil {
		ps.p.Pin(u)
	} else {
		a.policy.Pin(u)
	}
	returned = true
}

func (a *arena) policyUnpin(u UnitID) {
	if a.muted() {
		return
	}
	returned := false
	defer a.recoverPolicy("Unpin", nil, &returned)
	if ps := a.policyFor(u); ps != nil {
		ps.p.Unpin(u)
	} else {
		a.policy.Unpin(u)
	}
	returned = true
}

func (a *arena) policyRemove(u UnitID) {
	if a.muted() {
		return
	}
	returned := false
	defer a.recoverPolicy("Remove", nil, &returned)
	if ps := a.policyFor(u); ps != nil {
		ps.p.Remove(u)
	} else {
		a.policy.Remove(u)
	}
	returned = true
}

func (a *arena) policyAccess(u UnitID) {
	if a.muted() {
		return
	}
	returned := false
	defer a.recoverPolicy("Access", nil, &returned)
	if ps := a.policyFor(u); ps != nil {
		ps.p.Access(u)
	} else {
		a.policy.Access(u)
	}
	returned = true
}

func (a *arena) policyForget(u UnitID) {
	if a.muted() {
		return
	}
	returned := false
	defer a.recoverPolicy("Forget", nil, &returned)
	if ps := a.policyFor(u); ps != nil {
		ps.fg.Forget(u)
	} else {
		a.forgetter.Forget(u)
	}
	returned = true
}

// policyEvict asks the policy for a victim; a muted or panicking policy
// gives none.
func (a *arena) policyEvict() (u UnitID, ok bool) {
	if a.muted() {
		return 0, false
	}
	returned := false
	defer a.recoverPolicy("Evict", nil, &returned)
	u, ok = a.policy.Evict()
	returned = true
	return u, ok
}

// policyEvictTenant asks the policy of the arena's tenant t (see
// shares.go) for a victim; a muted or panicking policy gives none.
func (a *arena) policyEvictTenant(t int) (u UnitID, ok bool) {
	if a.muted() {
		return 0, false
	}
	returned := false
	defer a.recoverPolicy("Evict", nil, &returned)
	u, ok = a.tenants.list[t].pol.p.Evict()
	returned = true
	return u, ok
}

// policyBegin, policyCommit and policyRollback drive a policy that
// implements eviction.Transactional (txPolicy), and the policies of the
// arena's tenants (every one built by the same factory).
func (a *arena) policyBegin() { a.eachTx("Begin", eviction.Transactional.Begin) }

func (a *arena) policyCommit() { a.eachTx("Commit", eviction.Transactional.Commit) }

func (a *arena) policyRollback() { a.eachTx("Rollback", eviction.Transactional.Rollback) }

// eachTx calls f on the arena's transactional policy, or on each of its
// tenants' policies.
func (a *arena) eachTx(call string, f func(eviction.Transactional)) {
	if a.txPolicy == nil || a.broken != nil {
		return
	}
	returned := false
	defer a.recoverPolicy(call, nil, &returned)
	if a.tenants == nil {
		f(a.txPolicy)
	} else {
		for i := range a.tenants.list {
			f(a.tenants.list[i].pol.tx)
		}
	}
	returned = true
}

// copyBatch hands the transaction's batch to the Mover. A panic is
// returned as a *PanicError: a failed batch whose writes are unknown (see
// copyFailed). A Mover that ends its goroutine (runtime.Goexit) leaves the
// same (unlock finishes the operation the same way).
func (c *Cache) copyBatch(batch []Copy) (err error) {
	returned := false
	defer func() {
		if r := recover(); r != nil {
			err = newPanicError("Mover.Copy", r)
		} else if !returned {
			c.tx.moverExited = true
		}
	}()
	err = c.mover.Copy(batch)
	returned = true
	return err
}

// decide asks the Decider (DefaultDecider when Config.Decider is nil)
// about victim v. A panic, of the Decider or of the cost model's weight
// functions it calls, poisons the cache like a policy's (they decide what
// eviction does); the victim is then dropped.
func (c *Cache) decide(v Victim) (move bool) {
	returned := false
	defer func() {
		if r := panicValue(recover(), returned); r != nil {
			c.poisonWith(newPanicError("Decider", r))
			move = false
		}
	}()
	if c.decider == nil {
		move = DefaultDecider(v)
	} else {
		move = c.decider(v)
	}
	returned = true
	return move
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
