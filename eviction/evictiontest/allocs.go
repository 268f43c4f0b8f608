package evictiontest

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvtier/kvtier/eviction"
)

// steadyState is a cache at its working size: a fixed universe of keys,
// half of them resident, with every slice the cycle touches allocated up
// front so that the harness itself allocates nothing.
type steadyState struct {
	p        eviction.Policy[int]
	clk      *eviction.ManualClock
	rng      *rand.Rand
	entries  []eviction.Entry // by key, fixed for the run
	resident []int
	slot     []int // by key: index in resident, or -1
	free     []int
	failed   bool
}

func newSteadyState(p eviction.Policy[int], clk *eviction.ManualClock, universe int) *steadyState {
	s := &steadyState{
		p:        p,
		clk:      clk,
		rng:      rand.New(rand.NewPCG(5, 6)),
		entries:  make([]eviction.Entry, universe),
		resident: make([]int, 0, universe),
		slot:     make([]int, universe),
		free:     make([]int, 0, universe),
	}
	for k := range s.entries {
		e := randomEntry(s.rng)
		e.Size = 1 // the universe is sized in keys
		s.entries[k] = e
		s.slot[k] = -1
		s.free = append(s.free, k)
	}
	return s
}

// insertFree inserts a random key that is not resident.
func (s *steadyState) insertFree() {
	i := s.rng.IntN(len(s.free))
	k := s.free[i]
	s.free[i] = s.free[len(s.free)-1]
	s.free = s.free[:len(s.free)-1]
	if err := s.p.Insert(k, s.entries[k]); err != nil {
		s.failed = true
		return
	}
	s.slot[k] = len(s.resident)
	s.resident = append(s.resident, k)
}

func (s *steadyState) evicted(k int) {
	if k < 0 || k >= len(s.slot) || s.slot[k] < 0 {
		s.failed = true
		return
	}
	i := s.slot[k]
	last := s.resident[len(s.resident)-1]
	s.resident[i] = last
	s.slot[last] = i
	s.resident = s.resident[:len(s.resident)-1]
	s.slot[k] = -1
	s.free = append(s.free, k)
}

// cycle is one request of a cache at its working size: a hit, a key pinned
// and released, a miss that evicts a victim and inserts a new key, and time
// moving on.
func (s *steadyState) cycle() {
	s.p.Access(s.resident[s.rng.IntN(len(s.resident))])
	pinned := s.resident[s.rng.IntN(len(s.resident))]
	s.p.Pin(pinned)
	s.p.Access(pinned)
	s.p.Unpin(pinned)
	k, ok := s.p.Evict()
	if !ok {
		s.failed = true
		return
	}
	s.evicted(k)
	s.insertFree()
	s.clk.Advance(time.Millisecond)
}

// checkNoAllocs drives a policy through steady-state cycles, failing if
// Evict or Insert misbehave, and requires a cycle to allocate nothing
// unless allowAllocs, in which case it skips when the cycle allocates.
func checkNoAllocs(t *testing.T, newPolicy policyFactory, allowAllocs bool) {
	const resident = suiteCapacity / 2
	p, clk := newCase(t, newPolicy)
	s := newSteadyState(p, clk, 2*resident)
	for range resident {
		s.insertFree()
	}
	// Warm up long enough that every key has come and gone a few times and
	// any growable structure has reached its working size.
	for range 40 * resident {
		s.cycle()
	}
	if s.failed {
		t.Fatal("during warm-up an Insert of an untracked key failed, or Evict returned false or an untracked key, with evictable keys resident")
	}
	allocs := testing.AllocsPerRun(2000, s.cycle)
	if s.failed {
		t.Fatal("during measurement an Insert of an untracked key failed, or Evict returned false or an untracked key, with evictable keys resident")
	}
	switch {
	case allocs != 0 && allowAllocs:
		t.Skipf("a steady-state cycle (Access, Pin, Access, Unpin, Evict, Insert) allocates %v times on average; not a failure: the zero-allocation check was waived with evictiontest.AllowAllocs", allocs)
	case allocs != 0:
		t.Fatalf("a steady-state cycle (Access, Pin, Access, Unpin, Evict, Insert) allocates %v times on average, want 0 (a policy that does not promise zero allocations passes evictiontest.AllowAllocs() to Run)", allocs)
	}
}
