// Package evictiontest checks that an [eviction.Policy] keeps the contract
// every policy of kvtier keeps, in the spirit of testing/fstest: one call to
// [Run] from a test of your own runs every check as a subtest.
//
// To check a policy of your own, write a test in its package:
//
//	func TestMyPolicyConformance(t *testing.T) {
//		evictiontest.Run(t, func(cfg evictiontest.Config) eviction.Policy[int] {
//			return mypolicy.New[int](cfg.Clock, cfg.Capacity)
//		})
//	}
//
// The factory is called once per check (some checks build two policies and
// feed them the same operations), each time with a fresh [Config]: a
// [eviction.ManualClock] that only the suite moves, and the largest total
// [eviction.Entry.Size] the suite will ever keep tracked at once, for
// policies that size internal queues from a capacity. A policy that reads
// time must read it from cfg.Clock, or the determinism check will fail.
//
// Options after the factory waive the checks of promises that kvtier's
// policies make beyond the contract. A policy that allocates in steady
// state, for example, is checked with
//
//	evictiontest.Run(t, factory, evictiontest.AllowAllocs())
//
// What is checked (each a subtest with its own name, so `go test -run
// 'TestX/NoAllocs'` runs one):
//
//   - Evict on an empty policy and on one whose keys are all pinned returns
//     false; unpinning a key makes it the only possible victim.
//   - Insert-then-drain returns every key exactly once.
//   - Insert of a tracked key (evictable or pinned) returns an error wrapping
//     [eviction.ErrKeyExists] and changes nothing: a twin policy that never
//     saw the duplicates chooses the same victims.
//   - Invalid entries (Size 0 or negative, Priority -1 or 101, a negative
//     PriorityDuration, a malformed Unit) return an error wrapping
//     [eviction.ErrInvalidEntry] and leave the key untracked.
//   - Access, Pin, Unpin and Remove of unknown keys change nothing, again
//     checked against a twin.
//   - Pin is not counted: Pin twice then Unpin once leaves the key evictable.
//   - Remove (of evictable and pinned keys) then Insert again works.
//   - A key pinned and unpinned again is still tracked and evictable.
//   - Random mixes of every operation, against a reference model of which
//     keys are tracked, pinned and evictable: Len matches after every
//     operation, Evict returns only tracked evictable keys (so never a
//     pinned one, and every inserted key at most once), and returns false
//     exactly when no key is evictable.
//   - Determinism: two fresh policies fed the same operations and clock
//     choose the same victims.
//   - No allocations in steady state: after a warm-up, a cycle of Access,
//     Pin, Unpin, Evict and Insert allocates nothing
//     (testing.AllocsPerRun reports 0). This is a promise of kvtier's
//     policies, not part of the contract: a policy that does not make it
//     passes [AllowAllocs] to Run, and the check then only requires the
//     cycle's Evict and Insert calls to succeed, logging the allocations
//     and skipping when there are any.
//   - A policy that claims, through [eviction.PinnedAccessIgnorer], that
//     Access of a pinned key changes nothing must keep the claim: a twin fed
//     extra Access calls on pinned keys chooses the same victims. A policy
//     that makes no claim passes this check trivially.
//   - A policy that implements [eviction.PinnedInserter] must insert a key
//     pinned as Insert then Pin would: a twin fed Insert and Pin where it
//     got InsertPinned returns the same errors and chooses the same victims
//     ever after. A policy that does not implement it skips this check.
//   - A policy that implements [eviction.Forgetter] must leave tracked keys
//     and keys it never saw alone: a twin that does not hear of Forget
//     calls on them chooses the same victims. A policy that does not
//     implement the interface skips this check.
//   - A policy that implements [eviction.Transactional] must roll back
//     exactly: random bursts of calls made to it between Begin and
//     Rollback, which a twin never hears of, leave it choosing the same
//     victims as the twin ever after (clock advances included); bursts
//     between Begin and Commit count as ordinary calls. A policy that does
//     not implement the interface skips this check.
//
// The suite uses int keys from 0 to [MaxKey], entries of sizes 1 to 4 with
// every priority and some priority durations, and finishes in well under a
// second per policy without the race detector.
package evictiontest
