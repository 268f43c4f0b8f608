package evictiontest_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/eviction/evictiontest"
)

// slicePolicy is a FIFO policy kept in a slice, written as plainly as
// possible, with switches that each break one rule of the contract. The
// correct variant shows that the suite asks for nothing beyond the
// contract; each broken one must make the suite fail in the named check.
type slicePolicy struct {
	items []sliceItem
	bug   string
	// scratch backs the allocating bugs without a compiler being able to
	// prove the allocation away.
	scratch [][]int
	// evictions counts successful Evict calls, for the "allocateThenStall"
	// bug.
	evictions int
}

// stallAfter is how many keys a slicePolicy with the "allocateThenStall"
// bug evicts before its Evict starts returning false whatever it tracks:
// more than any check but NoAllocsSteadyState makes one policy evict.
const stallAfter = 8000

type sliceItem struct {
	key    int
	pinned int // pin count; only the "countPins" bug lets it exceed 1
}

func (p *slicePolicy) find(k int) int {
	return slices.IndexFunc(p.items, func(it sliceItem) bool { return it.key == k })
}

func (p *slicePolicy) Insert(k int, e eviction.Entry) error {
	if p.bug != "noValidate" {
		if err := e.Validate(); err != nil {
			return err
		}
	}
	if i := p.find(k); i >= 0 {
		if p.bug == "replaceDuplicate" {
			p.items = slices.Delete(p.items, i, i+1)
		} else {
			return fmt.Errorf("%w: %d", eviction.ErrKeyExists, k)
		}
	}
	p.items = append(p.items, sliceItem{key: k})
	return nil
}

// Access does nothing, except with the "accessPinned" bug, where it moves
// the key to the back (the last to go), pinned or not, while
// IgnoresPinnedAccess still claims that Access of a pinned key changes
// nothing.
func (p *slicePolicy) Access(k int) {
	if i := p.find(k); i >= 0 && p.bug == "accessPinned" {
		it := p.items[i]
		p.items = append(slices.Delete(p.items, i, i+1), it)
	}
}

// IgnoresPinnedAccess claims what Access does for a correct slicePolicy.
func (p *slicePolicy) IgnoresPinnedAccess() bool { return true }

// InsertPinned is Insert then Pin, except with the "insertPinnedUnpinned"
// bug, where it leaves the key evictable.
func (p *slicePolicy) InsertPinned(k int, e eviction.Entry) error {
	if err := p.Insert(k, e); err != nil {
		return err
	}
	if p.bug != "insertPinnedUnpinned" {
		p.Pin(k)
	}
	return nil
}

func (p *slicePolicy) Pin(k int) {
	i := p.find(k)
	switch {
	case i < 0 && p.bug == "pinUnknown":
		p.items = append(p.items, sliceItem{key: k, pinned: 1})
	case i < 0:
	case p.bug == "forgetPinned":
		p.items = slices.Delete(p.items, i, i+1)
	case p.bug == "countPins":
		p.items[i].pinned++
	default:
		p.items[i].pinned = 1
	}
}

func (p *slicePolicy) Unpin(k int) {
	if i := p.find(k); i >= 0 && p.items[i].pinned > 0 {
		p.items[i].pinned--
	}
}

func (p *slicePolicy) Remove(k int) {
	if i := p.find(k); i >= 0 {
		p.items = slices.Delete(p.items, i, i+1)
	}
}

func (p *slicePolicy) Evict() (int, bool) {
	if p.bug == "allocate" || p.bug == "allocateThenStall" {
		p.scratch = append(p.scratch[:0], make([]int, len(p.items)+1))
	}
	if p.bug == "allocateThenStall" && p.evictions >= stallAfter {
		return 0, false
	}
	start := 0
	if p.bug == "random" && len(p.items) > 0 {
		// Map iteration order differs between two policies fed the same
		// operations.
		for k := range map[int]int{0: 0, 1: 1, 2: 2, 3: 3} {
			start = k % len(p.items)
			break
		}
	}
	for j := range p.items {
		i := (start + j) % len(p.items)
		if p.items[i].pinned == 0 || p.bug == "evictPinned" {
			k := p.items[i].key
			p.items = slices.Delete(p.items, i, i+1)
			p.evictions++
			return k, true
		}
	}
	return 0, false
}

func (p *slicePolicy) Len() int {
	if p.bug == "lenEvictable" {
		n := 0
		for _, it := range p.items {
			if it.pinned == 0 {
				n++
			}
		}
		return n
	}
	return len(p.items)
}

// bugEnv selects the slicePolicy bug in the child process of
// TestSuiteCatchesBrokenPolicies and TestAllowAllocs; unset, the policy is
// correct.
const bugEnv = "EVICTIONTEST_SLICE_POLICY_BUG"

// optionsEnv selects the options TestSuiteOnSlicePolicy passes to Run in
// the child process of TestAllowAllocs: "allowAllocs" passes AllowAllocs;
// unset, none.
const optionsEnv = "EVICTIONTEST_SLICE_POLICY_OPTIONS"

// TestSuiteOnSlicePolicy runs the suite on the plain slice policy, which
// must pass. TestSuiteCatchesBrokenPolicies and TestAllowAllocs rerun it
// with a bug switched on, or options.
func TestSuiteOnSlicePolicy(t *testing.T) {
	bug := os.Getenv(bugEnv)
	var opts []evictiontest.Option
	switch o := os.Getenv(optionsEnv); o {
	case "":
	case "allowAllocs":
		opts = append(opts, evictiontest.AllowAllocs())
	default:
		t.Fatalf("%s=%q: unknown options", optionsEnv, o)
	}
	evictiontest.Run(t, func(evictiontest.Config) eviction.Policy[int] {
		return &slicePolicy{bug: bug}
	}, opts...)
}

// runSlicePolicySuite runs TestSuiteOnSlicePolicy in a child process with
// the slice policy's bug and the options set as bugEnv and optionsEnv
// describe, and returns its verbose output and whether it passed.
func runSlicePolicySuite(t *testing.T, bug, options string) (out string, passed bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSuiteOnSlicePolicy$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), bugEnv+"="+bug, optionsEnv+"="+options)
	b, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("running the suite in a child process: %v", err)
	}
	return string(b), err == nil
}

// subtestResult returns the result ("PASS", "FAIL" or "SKIP") that verbose
// output out reports for the check name of TestSuiteOnSlicePolicy, or ""
// when it reports none.
func subtestResult(out, name string) string {
	for _, r := range []string{"PASS", "FAIL", "SKIP"} {
		if strings.Contains(out, "--- "+r+": TestSuiteOnSlicePolicy/"+name+" ") {
			return r
		}
	}
	return ""
}

func TestSuiteCatchesBrokenPolicies(t *testing.T) {
	cases := []struct {
		bug       string
		wantFails []string // checks that must fail
	}{
		{"evictPinned", []string{"AllPinned", "RandomOps"}},
		{"countPins", []string{"PinIsNotCounted"}},
		{"replaceDuplicate", []string{"InsertExisting/Direct", "InsertExisting/Twin"}},
		{"noValidate", []string{"InvalidEntry/Size0", "InvalidEntry/Priority101", "InvalidEntry/NegativeDuration"}},
		{"pinUnknown", []string{"UnknownKeys/Direct", "UnknownKeys/Twin"}},
		{"forgetPinned", []string{"PinnedKeepsHistory", "AllPinned", "RandomOps"}},
		{"allocate", []string{"NoAllocsSteadyState"}},
		{"random", []string{"Deterministic"}},
		{"lenEvictable", []string{"AllPinned", "RandomOps"}},
		{"accessPinned", []string{"PinnedAccessIgnored"}},
		{"insertPinnedUnpinned", []string{"InsertPinned"}},
	}
	for _, c := range cases {
		t.Run(c.bug, func(t *testing.T) {
			out, passed := runSlicePolicySuite(t, c.bug, "")
			if passed {
				t.Fatalf("the suite passed a policy with bug %q; output:\n%s", c.bug, out)
			}
			for _, name := range c.wantFails {
				if subtestResult(out, name) != "FAIL" {
					t.Errorf("with bug %q, check %s did not fail; output:\n%s", c.bug, name, out)
				}
			}
		})
	}
}

// TestAllowAllocs checks that AllowAllocs waives the zero-allocation check,
// and nothing else: a policy that allocates in steady state fails the suite
// without the option and passes it with the option, while the option keeps
// every check of the contract, the steady-state cycle's included.
func TestAllowAllocs(t *testing.T) {
	cases := []struct {
		name, bug, options string
		wantPass           bool
		want               map[string]string // check name: its result
	}{
		{"AllocatingWithout", "allocate", "", false,
			map[string]string{"NoAllocsSteadyState": "FAIL", "RandomOps": "PASS"}},
		{"AllocatingWith", "allocate", "allowAllocs", true,
			map[string]string{"NoAllocsSteadyState": "SKIP", "RandomOps": "PASS"}},
		// A policy that allocates nothing passes the check as usual.
		{"CorrectWith", "", "allowAllocs", true,
			map[string]string{"NoAllocsSteadyState": "PASS"}},
		// The option waives no check of the contract.
		{"EvictPinnedWith", "evictPinned", "allowAllocs", false,
			map[string]string{"AllPinned": "FAIL", "RandomOps": "FAIL", "NoAllocsSteadyState": "PASS"}},
		// Nor the steady-state cycle's own checks: Evict must keep choosing
		// victims while evictable keys are resident.
		{"StallWith", "allocateThenStall", "allowAllocs", false,
			map[string]string{"NoAllocsSteadyState": "FAIL", "RandomOps": "PASS", "Deterministic": "PASS"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, passed := runSlicePolicySuite(t, c.bug, c.options)
			if passed != c.wantPass {
				t.Fatalf("with bug %q and options %q the suite passed = %t, want %t; output:\n%s", c.bug, c.options, passed, c.wantPass, out)
			}
			for name, want := range c.want {
				if got := subtestResult(out, name); got != want {
					t.Errorf("with bug %q and options %q, check %s reported %q, want %q; output:\n%s", c.bug, c.options, name, got, want, out)
				}
			}
			if c.wantPass && strings.Contains(out, "--- FAIL") {
				t.Errorf("with bug %q and options %q the suite passed but a check failed; output:\n%s", c.bug, c.options, out)
			}
		})
	}
}

// TestAllowAllocsOnListLRU runs the suite, with AllowAllocs, on the policy
// of ExampleAllowAllocs, which keeps the contract but allocates.
func TestAllowAllocsOnListLRU(t *testing.T) {
	evictiontest.Run(t, func(evictiontest.Config) eviction.Policy[int] {
		return newListLRU()
	}, evictiontest.AllowAllocs())
}
