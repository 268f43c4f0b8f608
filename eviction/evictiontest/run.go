package evictiontest

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvtier/kvtier/costmodel"
	"github.com/kvtier/kvtier/eviction"
)

// Config is what the suite hands the policy factory for each policy it
// builds.
type Config struct {
	// Clock is a fresh clock that only the suite moves. A policy that reads
	// time must use it.
	Clock *eviction.ManualClock
	// Capacity is the largest total Entry.Size the suite keeps tracked at
	// once (pinned keys included): before an Insert that would exceed it,
	// the suite evicts or removes keys, as the owner of a cache would.
	Capacity int64
}

// suiteCapacity is the Config.Capacity of every policy the suite builds.
// With entries of sizes 1 to 4 it keeps about 200 keys tracked: enough for
// interesting orders, small enough to run fast under the race detector.
const suiteCapacity = 512

// MaxKey is the largest key the suite uses: every key it passes to a policy
// is an int in [0, MaxKey], so a policy that indexes its keys by value (such
// as one built with an eviction.DenseIndex of MaxKey) can run the suite.
const MaxKey = 2047

// Run checks that the policies newPolicy builds keep the [eviction.Policy]
// contract. Each check is a subtest of t; newPolicy is called for every
// policy a check needs, with a fresh Config each time, and must return a
// new, empty policy. Unless opts waive it with [AllowAllocs], Run also
// checks a promise beyond the contract: that the policy allocates nothing
// in steady state. See the package documentation for the list of checks.
func Run(t *testing.T, newPolicy func(cfg Config) eviction.Policy[int], opts ...Option) {
	t.Helper()
	s := newSettings(opts)
	checks := []struct {
		name string
		run  func(*testing.T, func(Config) eviction.Policy[int])
	}{
		{"EvictEmpty", checkEvictEmpty},
		{"InsertThenDrain", checkInsertThenDrain},
		{"AllPinned", checkAllPinned},
		{"PinIsNotCounted", checkPinIsNotCounted},
		{"InsertExisting", checkInsertExisting},
		{"InvalidEntry", checkInvalidEntry},
		{"UnknownKeys", checkUnknownKeys},
		{"RemoveThenReinsert", checkRemoveThenReinsert},
		{"PinnedKeepsHistory", checkPinnedKeepsHistory},
		{"RandomOps", checkRandomOps},
		{"Deterministic", checkDeterministic},
		{"NoAllocsSteadyState", func(t *testing.T, newPolicy policyFactory) { checkNoAllocs(t, newPolicy, s.allowAllocs) }},
		{"PinnedAccessIgnored", checkPinnedAccessIgnored},
		{"InsertPinned", checkInsertPinned},
		{"ForgetLiveKeys", checkForgetLiveKeys},
		{"RollbackIsExact", checkRollbackIsExact},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) { c.run(t, newPolicy) })
	}
}

// newCase builds one policy with a fresh clock.
func newCase(t *testing.T, newPolicy func(Config) eviction.Policy[int]) (eviction.Policy[int], *eviction.ManualClock) {
	t.Helper()
	clk := new(eviction.ManualClock)
	p := newPolicy(Config{Clock: clk, Capacity: suiteCapacity})
	if p == nil {
		t.Fatal("the policy factory returned nil")
	}
	if n := p.Len(); n != 0 {
		t.Fatalf("a new policy has Len() = %d, want 0", n)
	}
	return p, clk
}

// randomEntry returns a valid entry with a size of 1 to 4, any priority,
// a priority duration a quarter of the time, and a unit placed in a model
// of 4 layers and a sequence of 8 blocks of 16 tokens.
func randomEntry(rng *rand.Rand) eviction.Entry {
	e := eviction.Entry{
		Size:     1 + rng.Int64N(4),
		Priority: rng.IntN(eviction.MaxPriority + 1),
	}
	if rng.IntN(4) == 0 {
		e.PriorityDuration = time.Duration(1+rng.IntN(50)) * time.Millisecond
	}
	chunk := rng.IntN(8)
	e.Unit = costmodel.Unit{
		Layer: rng.IntN(4), Layers: 4,
		Chunk: chunk, Chunks: 8,
		ContextTokens: int64(16 * chunk),
	}
	return e
}

// invalidEntry is an entry every policy must refuse, with why.
type invalidEntry struct {
	name  string
	entry eviction.Entry
}

// invalidEntries lists one entry per way an Entry can be malformed.
func invalidEntries() []invalidEntry {
	valid := eviction.NewEntry(1)
	with := func(f func(*eviction.Entry)) eviction.Entry {
		e := valid
		f(&e)
		return e
	}
	return []invalidEntry{
		{"Size0", with(func(e *eviction.Entry) { e.Size = 0 })},
		{"SizeNegative", with(func(e *eviction.Entry) { e.Size = -1 })},
		{"PriorityMinus1", with(func(e *eviction.Entry) { e.Priority = -1 })},
		{"Priority101", with(func(e *eviction.Entry) { e.Priority = 101 })},
		{"NegativeDuration", with(func(e *eviction.Entry) { e.PriorityDuration = -time.Millisecond })},
		{"NegativeLayers", with(func(e *eviction.Entry) { e.Layers = -1 })},
		{"LayerOutOfRange", with(func(e *eviction.Entry) { e.Layer, e.Layers = 4, 4 })},
		{"NegativeContext", with(func(e *eviction.Entry) { e.ContextTokens = -1 })},
	}
}
