package evictiontest

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/kvtier/kvtier/eviction"
)

// policyFactory builds one policy for a check.
type policyFactory = func(Config) eviction.Policy[int]

func mustInsert(t *testing.T, p eviction.Policy[int], k int, e eviction.Entry) {
	t.Helper()
	if err := p.Insert(k, e); err != nil {
		t.Fatalf("Insert(%d, %+v) of an untracked key with a valid entry: %v", k, e, err)
	}
}

func wantLen(t *testing.T, p eviction.Policy[int], want int) {
	t.Helper()
	if got := p.Len(); got != want {
		t.Fatalf("Len() = %d, want %d", got, want)
	}
}

func wantNoVictim(t *testing.T, p eviction.Policy[int], why string) {
	t.Helper()
	if k, ok := p.Evict(); ok {
		t.Fatalf("Evict() = %d, true; want false (%s)", k, why)
	}
}

func wantVictim(t *testing.T, p eviction.Policy[int], want int, why string) {
	t.Helper()
	k, ok := p.Evict()
	if !ok || k != want {
		t.Fatalf("Evict() = %d, %v; want %d, true (%s)", k, ok, want, why)
	}
}

// drainKeys evicts until Evict returns false and returns the victims in
// order, failing if a victim repeats or more than limit come out.
func drainKeys(t *testing.T, p eviction.Policy[int], limit int) []int {
	t.Helper()
	var got []int
	seen := map[int]bool{}
	for {
		k, ok := p.Evict()
		if !ok {
			return got
		}
		if seen[k] {
			t.Fatalf("Evict returned key %d twice without it being inserted again (victims so far: %v)", k, got)
		}
		seen[k] = true
		got = append(got, k)
		if len(got) > limit {
			t.Fatalf("Evict returned more than the %d keys that were evictable (victims so far: %v)", limit, got)
		}
	}
}

// wantDrain drains p and requires exactly the keys of want, in any order.
func wantDrain(t *testing.T, p eviction.Policy[int], want []int) {
	t.Helper()
	got := drainKeys(t, p, len(want))
	slices.Sort(got)
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(got, want) {
		t.Fatalf("draining the policy evicted %v, want exactly %v", got, want)
	}
}

func checkEvictEmpty(t *testing.T, newPolicy policyFactory) {
	p, _ := newCase(t, newPolicy)
	wantNoVictim(t, p, "a new policy tracks no key")
	mustInsert(t, p, 1, eviction.NewEntry(1))
	wantVictim(t, p, 1, "the only key")
	wantNoVictim(t, p, "the only key was evicted")
	wantLen(t, p, 0)
}

func checkInsertThenDrain(t *testing.T, newPolicy policyFactory) {
	p, clk := newCase(t, newPolicy)
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 100 // at most 4 each: fits suiteCapacity
	keys := make([]int, n)
	for i := range keys {
		keys[i] = 1000 + 7*i
		mustInsert(t, p, keys[i], randomEntry(rng))
		clk.Advance(time.Millisecond)
		if i%3 == 0 {
			p.Access(keys[rng.IntN(i+1)])
		}
	}
	wantLen(t, p, n)
	wantDrain(t, p, keys)
	wantLen(t, p, 0)
}

func checkAllPinned(t *testing.T, newPolicy policyFactory) {
	p, clk := newCase(t, newPolicy)
	rng := rand.New(rand.NewPCG(3, 4))
	const n = 50
	keys := make([]int, n)
	for i := range keys {
		keys[i] = i
		mustInsert(t, p, i, randomEntry(rng))
		p.Pin(i)
	}
	wantNoVictim(t, p, "every tracked key is pinned")
	wantLen(t, p, n)
	clk.Advance(time.Second) // let every priority duration run out
	wantNoVictim(t, p, "every tracked key is still pinned after the clock moved")
	p.Unpin(17)
	wantVictim(t, p, 17, "the only unpinned key")
	wantNoVictim(t, p, "every remaining key is pinned")
	wantLen(t, p, n-1)
	rest := slices.Delete(keys, 17, 18)
	for _, k := range rest {
		p.Unpin(k)
	}
	wantDrain(t, p, rest)
}

func checkPinIsNotCounted(t *testing.T, newPolicy policyFactory) {
	p, _ := newCase(t, newPolicy)
	mustInsert(t, p, 1, eviction.NewEntry(1))
	p.Pin(1)
	p.Pin(1)
	p.Unpin(1)
	wantLen(t, p, 1)
	wantVictim(t, p, 1, "Pin twice then Unpin once: the policy does not count pins")

	mustInsert(t, p, 2, eviction.NewEntry(1))
	p.Unpin(2) // evictable already: no effect
	p.Unpin(2)
	p.Pin(2)
	wantNoVictim(t, p, "Unpin of an evictable key must not be remembered against a later Pin")
	p.Unpin(2)
	wantVictim(t, p, 2, "pinned then unpinned")
}

func checkInsertExisting(t *testing.T, newPolicy policyFactory) {
	t.Run("Direct", func(t *testing.T) {
		p, _ := newCase(t, newPolicy)
		low := eviction.NewEntry(1)
		low.Priority = eviction.MinPriority
		high := eviction.NewEntry(4)
		high.Priority = eviction.MaxPriority
		mustInsert(t, p, 1, low)
		if err := p.Insert(1, high); !errors.Is(err, eviction.ErrKeyExists) {
			t.Fatalf("second Insert of evictable key 1 returned %v, want an error wrapping ErrKeyExists", err)
		}
		wantLen(t, p, 1)
		p.Pin(1)
		if err := p.Insert(1, low); !errors.Is(err, eviction.ErrKeyExists) {
			t.Fatalf("Insert of pinned key 1 returned %v, want an error wrapping ErrKeyExists", err)
		}
		wantLen(t, p, 1)
		wantNoVictim(t, p, "the refused Insert must leave key 1 pinned")
		p.Unpin(1)
		wantVictim(t, p, 1, "key 1 was unpinned")
	})
	t.Run("Twin", func(t *testing.T) {
		for seed := range uint64(4) {
			for _, prof := range profiles() {
				d := newDriver(t, newPolicy, 2, 100+seed, prof)
				d.injectDuplicate = true
				d.run(600)
				d.drain()
			}
		}
	})
}

func checkInvalidEntry(t *testing.T, newPolicy policyFactory) {
	for _, c := range invalidEntries() {
		t.Run(c.name, func(t *testing.T) {
			p, _ := newCase(t, newPolicy)
			mustInsert(t, p, 1, eviction.NewEntry(1))
			if err := p.Insert(2, c.entry); !errors.Is(err, eviction.ErrInvalidEntry) {
				t.Fatalf("Insert(2, %+v) returned %v, want an error wrapping ErrInvalidEntry", c.entry, err)
			}
			wantLen(t, p, 1)
			wantVictim(t, p, 1, "the refused key 2 must not be tracked")
			wantNoVictim(t, p, "the refused key 2 must not be tracked")
			mustInsert(t, p, 2, eviction.NewEntry(1))
			wantVictim(t, p, 2, "key 2 inserted validly after a refused Insert")
		})
	}
}

func checkUnknownKeys(t *testing.T, newPolicy policyFactory) {
	t.Run("Direct", func(t *testing.T) {
		p, _ := newCase(t, newPolicy)
		p.Access(42)
		p.Pin(42)
		p.Unpin(42)
		p.Remove(42)
		wantLen(t, p, 0)
		wantNoVictim(t, p, "calls on unknown keys must not track them")
		p.Pin(42) // a Pin of an unknown key must not pin it once inserted
		mustInsert(t, p, 42, eviction.NewEntry(1))
		wantVictim(t, p, 42, "key 42 was pinned before it was inserted, which must have had no effect")
	})
	t.Run("Twin", func(t *testing.T) {
		for seed := range uint64(4) {
			for _, prof := range profiles() {
				d := newDriver(t, newPolicy, 2, 200+seed, prof)
				d.injectUnknown = true
				d.run(600)
				d.drain()
			}
		}
	})
}

func checkRemoveThenReinsert(t *testing.T, newPolicy policyFactory) {
	p, _ := newCase(t, newPolicy)
	for k := 1; k <= 3; k++ {
		mustInsert(t, p, k, eviction.NewEntry(1))
	}
	p.Remove(2)
	wantLen(t, p, 2)
	p.Remove(2)
	wantLen(t, p, 2)
	mustInsert(t, p, 2, eviction.NewEntry(2))
	wantLen(t, p, 3)
	p.Pin(3)
	p.Remove(3)
	wantLen(t, p, 2)
	mustInsert(t, p, 3, eviction.NewEntry(1))
	wantLen(t, p, 3)
	// Key 3 was pinned when removed; its new incarnation must be evictable.
	wantDrain(t, p, []int{1, 2, 3})
	mustInsert(t, p, 1, eviction.NewEntry(1))
	wantVictim(t, p, 1, "key 1 inserted again after it was evicted")
}

func checkPinnedKeepsHistory(t *testing.T, newPolicy policyFactory) {
	p, clk := newCase(t, newPolicy)
	for k := range 10 {
		e := eviction.NewEntry(1)
		if k == 3 {
			e.Priority = 90
			e.PriorityDuration = 5 * time.Millisecond
		}
		mustInsert(t, p, k, e)
		clk.Advance(time.Millisecond)
	}
	p.Access(3)
	p.Pin(3)
	clk.Advance(100 * time.Millisecond)
	p.Access(3)
	p.Unpin(3)
	wantLen(t, p, 10)
	wantDrain(t, p, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
}

func checkRandomOps(t *testing.T, newPolicy policyFactory) {
	for seed := range uint64(8) {
		for _, prof := range profiles() {
			d := newDriver(t, newPolicy, 1, seed, prof)
			d.allowDuplicates = true
			d.run(1500)
			// Unpin everything: every key must then come out exactly once.
			for _, k := range slices.Clone(d.model.list) {
				d.keyed(opUnpin, k, false)
			}
			d.drain()
			if n := len(d.model.keys); n != 0 {
				d.fail("%d keys were left tracked after unpinning and draining everything", n)
			}
		}
	}
}

func checkDeterministic(t *testing.T, newPolicy policyFactory) {
	for seed := range uint64(4) {
		for _, prof := range profiles() {
			d := newDriver(t, newPolicy, 2, 300+seed, prof)
			d.allowDuplicates = true
			d.run(1500)
			d.drain()
		}
	}
}

// checkPinnedAccessIgnored holds a policy that implements
// eviction.PinnedAccessIgnorer and claims to ignore Access of pinned keys
// to its claim: a twin fed extra Access calls on pinned keys must choose the
// same victims. A policy that makes no claim has nothing to check.
func checkPinnedAccessIgnored(t *testing.T, newPolicy policyFactory) {
	p, _ := newCase(t, newPolicy)
	if c, ok := p.(eviction.PinnedAccessIgnorer); !ok || !c.IgnoresPinnedAccess() {
		t.Log("the policy does not claim to ignore Access of pinned keys (eviction.PinnedAccessIgnorer): nothing to check")
		return
	}
	runTwins(t, newPolicy, 300, func(d *driver) { d.injectPinnedAccess = true })
}

// runTwins runs a policy and its twin through random operations from
// seeds base to base+3 under every profile, set up by configure, and
// drains them: the driver fails at the first victim they disagree on.
func runTwins(t *testing.T, newPolicy policyFactory, base uint64, configure func(*driver)) {
	for seed := range uint64(4) {
		for _, prof := range profiles() {
			d := newDriver(t, newPolicy, 2, base+seed, prof)
			configure(d)
			d.run(600)
			d.drain()
		}
	}
}

// checkForgetLiveKeys holds a policy that implements eviction.Forgetter to
// its contract where it must change nothing: a twin that does not hear of
// Forget calls on tracked keys and on keys never inserted must choose the
// same victims.
func checkForgetLiveKeys(t *testing.T, newPolicy policyFactory) {
	p, _ := newCase(t, newPolicy)
	if _, ok := p.(eviction.Forgetter[int]); !ok {
		t.Log("the policy does not implement eviction.Forgetter: nothing to check")
		return
	}
	runTwins(t, newPolicy, 900, func(d *driver) { d.injectForget = true })
}

// checkInsertPinned holds a policy that implements eviction.PinnedInserter
// to its claim: InsertPinned(k, e) behaves as Insert(k, e) then Pin(k). A
// twin that gets Insert and Pin must choose the same victims ever after.
func checkInsertPinned(t *testing.T, newPolicy policyFactory) {
	p, _ := newCase(t, newPolicy)
	if _, ok := p.(eviction.PinnedInserter[int]); !ok {
		t.Log("the policy does not implement eviction.PinnedInserter: nothing to check")
		return
	}
	runTwins(t, newPolicy, 700, func(d *driver) { d.insertPinned = true })
}
