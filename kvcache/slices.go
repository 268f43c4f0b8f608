package kvcache

import "runtime"

// Long operations run in slices. Every call holds the cache's lock while
// it plans, and a plan costs per unit (a policy call or three, the unit's
// state, its copy): an Acquire of a 32k-token prompt paged per layer moves
// 57,344 units and held the lock for tens of milliseconds, stalling every
// other sequence's Append, BlockTables and Stats behind it. So an
// operation whose work exceeds a slice (Cache.sliceUnits units) runs as
// a series of steps, each an ordinary
// transaction under the lock (all or nothing, with its own rollback), and
// releases the lock between them, first letting in the callers that wait
// for it (yield).
//
// What another caller can observe between the steps of a long operation
// is the steps committed so far, as for any finished call: Stats counts
// them, the event sink hears of them, victims have left. The sequence a
// long Acquire creates is invisible (no SeqID yet) until its last step;
// one that Release ends is gone from the first. A long Commit shows the
// blocks it committed so far in the prefix tree, as a chunked prefill
// does; other calls on its sequence wait for it to finish (waitIdle), as
// they wait for a long Fork of it (see fork_long.go).
//
// A long dense Acquire is planned in three phases:
//
//  1. claim: the prompt's cached prefix is matched and referenced, and
//     the units of its whole blocks that are on the GPU are pinned, a
//     slice at a time. Pinning them first keeps the later phases from
//     evicting the prompt's own hits, as one transaction would.
//  2. reserve: the GPU slots the rest of the prompt needs (its units on
//     lower tiers, and every unit of the blocks to compute) are counted
//     against what each pool can supply, less what other long operations
//     have reserved: ErrNoSpace here ends the Acquire with nothing taken
//     but its claims, which are released (a claim takes a hollow block
//     off the hollow list, so the end of a claim step may prune hollow
//     blocks that a transfer had kept the list's head from letting go:
//     see pruneMetadata; those stay pruned). Otherwise the slots are
//     reserved: no other operation can take them (their capacity check
//     counts reservations out), so the steps that take them cannot run
//     out of room, whatever runs between them.
//  3. place: a slice of blocks at a time, units get GPU slots (evicting,
//     loading, moving victims down) as one transaction places them; with
//     a TransferEngine their copies join one open transfer per KV layer,
//     started when the last step is planned, so a long prompt makes as
//     many transfers as a short one.
//
// A step that fails after the first (a Mover's error, a policy's breach)
// is rolled back like any transaction, and the Acquire is undone as if
// the server had aborted its sequence: every pin and reference it took is
// released, so nothing is left half-done, but what its committed steps
// did stays done (victims that moved down stay there, units it loaded
// stay cached, Stats counts them). A one-step Acquire leaves the cache
// unchanged on failure, as before.
//
// The victims can differ from those of one transaction: the whole prefix
// is claimed before the first placement, and each step's policies choose
// from what the steps before left. The plan has the same form, so chunked
// prefill meets it as before: the server computes Plan.Compute in chunks
// and commits after each; with a TransferEngine it can start on the first
// layers as soon as Acquire returns, since each layer's transfer starts
// then.

// defaultSliceUnits is Cache.sliceUnits unless a test sets it: an
// operation over more units runs in steps, each of which handles at most
// that many units of cheap work (pins, unpins, references, reports) or an
// eighth of them of placements (a slot taken, a victim evicted, moved
// down, a copy planned: up to a microsecond or two a unit). Steps have
// fixed sizes, not timed ones, so that a long operation plans the same
// thing in every run (a step's commit is visible to the next: the victims
// it moved down are in the lower tier's policy then).
const defaultSliceUnits = 1024

// yieldRounds bounds how many times a long operation yields, between two
// steps, to callers waiting for the lock.
const yieldRounds = 64

// yield lets the callers that wait for the lock have it before a long
// operation takes its next step (the lock is not held). Go's mutex wakes
// one waiter when it is unlocked, but a goroutine that runs and locks it
// again gets it first (until a waiter has waited 1 ms, when the mutex
// turns fair), so without this a long operation would starve the calls it
// is sliced for. A woken waiter runs next on this goroutine's processor,
// so one Gosched per waiter is usually enough.
func (c *Cache) yield() {
	for i := 0; i < yieldRounds && c.waiting.Load() > 0; i++ {
		runtime.Gosched()
	}
}

// step runs f as one step of long operation call: under the lock, in the
// frame of every mutating method (f begins and executes its transaction;
// unlock commits or rolls it back and delivers the step's events), then
// lets the callers waiting for the lock in.
func (c *Cache) step(call string, f func() error) (err error) {
	if err := c.lock(call); err != nil {
		return err
	}
	func() {
		defer c.unlock(&err)
		err = f()
	}()
	if c.afterStep != nil {
		c.afterStep(call)
	}
	c.yield()
	return err
}

// budget is the work of one step of a long operation: units handled so
// far, against max.
type budget struct {
	units, max int
}

// newBudget returns the budget of a step of cheap work (see
// defaultSliceUnits).
func (c *Cache) newBudget() budget { return budget{max: c.sliceUnits} }

// placeBudget returns the budget of a step of placements.
func (c *Cache) placeBudget() budget { return budget{max: max(1, c.sliceUnits/8)} }

// commitBudget returns how many blocks a step of a long commit commits:
// a block costs a prefix-tree insert and, per unit, a look at its tier and
// events.
func (c *Cache) commitBudget() int { return max(1, c.sliceUnits/(16+2*c.geom.slices)) }

// spent reports whether the step has handled its units (the caller asks
// between blocks, so a step handles at least one).
func (b *budget) spent() bool { return b.units >= b.max }

// isLong reports whether an operation on n units runs in steps.
func (c *Cache) isLong(n int) bool { return n > c.sliceUnits }
