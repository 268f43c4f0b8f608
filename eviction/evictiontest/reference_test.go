package evictiontest_test

import (
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
	// scratch backs the allocating bug without a compiler being able to
	// prove the allocation away.
	scratch [][]int
}

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
	if p.bug == "allocate" {
		p.scratch = append(p.scratch[:0], make([]int, len(p.items)+1))
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
// TestSuiteCatchesBrokenPolicies; unset, the policy is correct.
const bugEnv = "EVICTIONTEST_SLICE_POLICY_BUG"

// TestSuiteOnSlicePolicy runs the suite on the plain slice policy, which
// must pass. TestSuiteCatchesBrokenPolicies reruns it with a bug switched
// on.
func TestSuiteOnSlicePolicy(t *testing.T) {
	bug := os.Getenv(bugEnv)
	evictiontest.Run(t, func(evictiontest.Config) eviction.Policy[int] {
		return &slicePolicy{bug: bug}
	})
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
			cmd := exec.Command(os.Args[0], "-test.run=^TestSuiteOnSlicePolicy$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), bugEnv+"="+c.bug)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a policy with bug %q; output:\n%s", c.bug, out)
			}
			for _, name := range c.wantFails {
				if !strings.Contains(string(out), "--- FAIL: TestSuiteOnSlicePolicy/"+name+" ") {
					t.Errorf("with bug %q, check %s did not fail; output:\n%s", c.bug, name, out)
				}
			}
		})
	}
}
