package evictiontest_test

import (
	"container/list"
	"fmt"
	"testing"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/eviction/evictiontest"
)

// This is how a policy's own tests run the suite: one call in a test
// function, with a factory that builds a fresh, empty policy from the
// suite's Config. A policy that reads time must take cfg.Clock; a
// capacity-aware one takes cfg.Capacity.
func ExampleRun() {
	// In a _test.go file next to the policy, as a func TestXxx(t *testing.T):
	testPrioritizedLRU := func(t *testing.T) {
		evictiontest.Run(t, func(cfg evictiontest.Config) eviction.Policy[int] {
			return eviction.NewPrioritizedLRU[int](cfg.Clock)
		})
	}
	testS3FIFO := func(t *testing.T) {
		evictiontest.Run(t, func(cfg evictiontest.Config) eviction.Policy[int] {
			p, err := eviction.NewS3FIFO[int](eviction.S3FIFOConfig{Capacity: cfg.Capacity})
			if err != nil {
				t.Fatal(err)
			}
			return p
		})
	}
	_, _ = testPrioritizedLRU, testS3FIFO
}

// listLRU is an LRU written the plain way, over container/list and a map.
// It keeps the eviction.Policy contract, but every Insert allocates its
// key's list element and item, so it does not allocate nothing in steady
// state as kvtier's own policies do.
type listLRU struct {
	order *list.List // of *listItem, most recently used first
	elems map[int]*list.Element
}

type listItem struct {
	key    int
	pinned bool
}

func newListLRU() *listLRU {
	return &listLRU{order: list.New(), elems: map[int]*list.Element{}}
}

func (p *listLRU) Insert(k int, e eviction.Entry) error {
	if err := e.Validate(); err != nil {
		return err
	}
	if _, ok := p.elems[k]; ok {
		return fmt.Errorf("%w: %d", eviction.ErrKeyExists, k)
	}
	p.elems[k] = p.order.PushFront(&listItem{key: k})
	return nil
}

func (p *listLRU) Access(k int) {
	if el, ok := p.elems[k]; ok {
		p.order.MoveToFront(el)
	}
}

func (p *listLRU) Pin(k int) {
	if el, ok := p.elems[k]; ok {
		el.Value.(*listItem).pinned = true
	}
}

func (p *listLRU) Unpin(k int) {
	if el, ok := p.elems[k]; ok {
		el.Value.(*listItem).pinned = false
	}
}

func (p *listLRU) Remove(k int) {
	if el, ok := p.elems[k]; ok {
		p.order.Remove(el)
		delete(p.elems, k)
	}
}

// Evict returns the least recently used key that is not pinned.
func (p *listLRU) Evict() (int, bool) {
	for el := p.order.Back(); el != nil; el = el.Prev() {
		if it := el.Value.(*listItem); !it.pinned {
			p.order.Remove(el)
			delete(p.elems, it.key)
			return it.key, true
		}
	}
	return 0, false
}

func (p *listLRU) Len() int { return len(p.elems) }

// A policy that does not promise to allocate nothing in steady state, such
// as listLRU above (an LRU over container/list), passes AllowAllocs to Run.
// Every check of the contract still runs; NoAllocsSteadyState still drives
// the policy through its steady-state cycle, then logs the allocations it
// measured and skips instead of failing.
func ExampleAllowAllocs() {
	// In a _test.go file next to the policy, as a func TestXxx(t *testing.T):
	testListLRU := func(t *testing.T) {
		evictiontest.Run(t, func(evictiontest.Config) eviction.Policy[int] {
			return newListLRU()
		}, evictiontest.AllowAllocs())
	}
	_ = testListLRU

	// What the option waives: once the policy is full, each Evict and
	// Insert of a replacement allocates the new key's list element and
	// item.
	p := newListLRU()
	for k := range 100 {
		if err := p.Insert(k, eviction.NewEntry(1)); err != nil {
			panic(err)
		}
	}
	allocs := testing.AllocsPerRun(1000, func() {
		k, _ := p.Evict()
		if err := p.Insert(k, eviction.NewEntry(1)); err != nil {
			panic(err)
		}
	})
	fmt.Println("allocations per Evict and Insert:", allocs)
	// Output: allocations per Evict and Insert: 2
}
