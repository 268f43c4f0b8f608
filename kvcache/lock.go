package kvcache

import (
	"fmt"
	"reflect"
	"runtime"
)

// The cache calls policies, the Mover, the Decider and the cost model with
// its lock held, and the event sink without it. A callback that calls back into the
// cache would, with a plain mutex, wedge every goroutine. Go has no
// goroutine identity, but the callback's own stack names it: when the lock
// is taken, a call that finds one of the cache's callback frames below it
// is a callback calling back. Such a call gets an error (ErrReentrant)
// instead of a deadlock; Stats answers from the snapshot of the state
// before the running operation. The stack is looked at only when the lock
// is not free, so an uncontended call pays nothing.

// heldCallbacks names the functions that call user code with the lock
// held; sinkCallbacks the one that calls the event sink.
var (
	heldCallbacks = funcNames(
		(*arena).policyInsert, (*arena).policyInsertPinned, (*arena).policyPin, (*arena).policyUnpin, (*arena).policyRemove,
		(*arena).policyAccess, (*arena).policyEvict, (*arena).policyForget, (*arena).policyBegin, (*arena).policyCommit,
		(*arena).policyRollback, (*Cache).copyBatch, (*Cache).decide, (*Cache).startTransfer,
		(*Cache).moveBackups)
	sinkCallbacks = funcNames((*eventLog).callSink)
)

// funcNames returns the names of fs as the runtime reports them in stacks.
func funcNames(fs ...any) map[string]bool {
	out := make(map[string]bool, len(fs))
	for _, f := range fs {
		out[runtime.FuncForPC(reflect.ValueOf(f).Pointer()).Name()] = true
	}
	return out
}

// onStack reports whether a function of names is on the calling
// goroutine's stack.
func onStack(names map[string]bool) bool {
	var pcs [128]uintptr
	for skip := 2; ; {
		n := runtime.Callers(skip, pcs[:])
		frames := runtime.CallersFrames(pcs[:n])
		for {
			f, more := frames.Next()
			if names[f.Function] {
				return true
			}
			if !more {
				break
			}
		}
		if n < len(pcs) {
			return false
		}
		skip += n
	}
}

// inSink reports whether the calling goroutine runs inside the event sink.
func inSink() bool { return onStack(sinkCallbacks) }

// lock takes the cache's lock for method call, or returns an error wrapping
// ErrReentrant when the caller is a callback that runs under it.
func (c *Cache) lock(call string) error {
	if c.mu.TryLock() {
		return nil
	}
	if onStack(heldCallbacks) {
		return fmt.Errorf("%w: %s called from a policy, Mover or Decider callback", ErrReentrant, call)
	}
	c.lockWait()
	return nil
}

// lockWait takes the lock, counted among the callers waiting for it (see
// yield).
func (c *Cache) lockWait() {
	c.waiting.Add(1)
	c.mu.Lock()
	c.waiting.Add(-1)
}

// unlock ends a call that may have changed the cache, the other half of
// the frame every mutating method shares (lock, lookupToChange, begin,
// execute, unlock): it rolls back the call's transaction when the call
// failed before closing it, collects the blocks that lost their last
// bytes, keeps the tree within its budget, reports a breach of a policy's
// contract met during the call (the pruning included) through *err,
// records the Stats snapshot that callbacks of the next operation see,
// releases the lock and delivers the call's events to the sink.
func (c *Cache) unlock(err *error) {
	// User code may end the goroutine (runtime.Goexit) inside this call
	// too (a policy's Remove while pruning): the lock is released anyway.
	released := false
	defer func() {
		if !released {
			c.mu.Unlock()
		}
	}()
	if c.tx.open {
		switch {
		case c.tx.executing && *err == nil:
			// Only a goroutine that user code ended leaves execute
			// without an error or a commit.
			c.exited()
		case *err != nil:
			c.rollback()
		default:
			c.close()
		}
	}
	c.settleTransfers()
	c.writeQueued()
	c.collectPending()
	c.pruneMetadata()
	c.reportBreach(err)
	b, ok := c.events.publish()
	if !c.statsUnchanged {
		c.fillStats(&c.snap)
	}
	c.statsUnchanged = false
	c.checkAfterCall(err)
	released = true
	c.mu.Unlock()
	if ok {
		c.events.deliver(b)
	}
	// A caller that calls again at once (WaitReady's loop, a server's
	// step) would take the lock back before the waiter the unlock woke
	// runs (see yield): it lets that waiter go first.
	if c.waiting.Load() > 0 {
		runtime.Gosched()
	}
}
