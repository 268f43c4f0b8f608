package eviction_test

import (
	"fmt"
	"time"

	"github.com/kvtier/kvtier/eviction"
)

// An LRU evicts the least recently used evictable key. A pinned key is
// never a victim; unpinning it counts as its most recent use.
func ExampleLRU() {
	p := eviction.NewLRU[string]()
	for _, k := range []string{"a", "b", "c", "d"} {
		if err := p.Insert(k, eviction.NewEntry(1)); err != nil {
			fmt.Println(err)
			return
		}
	}
	p.Access("a") // a is now the most recently used
	p.Pin("b")    // b is in use by a request

	for range 2 {
		k, _ := p.Evict()
		fmt.Println("evicted", k)
	}
	p.Unpin("b") // released: the most recent use of b
	for p.Len() > 0 {
		k, _ := p.Evict()
		fmt.Println("evicted", k)
	}
	// Output:
	// evicted c
	// evicted d
	// evicted a
	// evicted b
}

// A FIFO evicts in insertion order: accesses do not matter, and a key
// pinned while it was the oldest is still the oldest once unpinned.
func ExampleFIFO() {
	p := eviction.NewFIFO[int]()
	for k := 1; k <= 3; k++ {
		_ = p.Insert(k, eviction.NewEntry(1))
	}
	p.Access(1)
	p.Pin(1)
	k, _ := p.Evict()
	fmt.Println("evicted", k, "while 1 is pinned")
	p.Unpin(1)
	k, _ = p.Evict()
	fmt.Println("evicted", k)
	// Output:
	// evicted 2 while 1 is pinned
	// evicted 1
}

// A prioritized LRU empties the lowest priority first. A priority given a
// duration falls back to DefaultPriority (35) once the key has been
// evictable that long.
func ExamplePrioritizedLRU() {
	clock := new(eviction.ManualClock)
	p := eviction.NewPrioritizedLRU[string](clock)

	insert := func(k string, priority int, d time.Duration) {
		e := eviction.NewEntry(1)
		e.Priority = priority
		e.PriorityDuration = d
		if err := p.Insert(k, e); err != nil {
			fmt.Println(err)
		}
	}
	insert("system-prompt", 90, time.Minute) // kept for a minute
	insert("chat-turn", eviction.DefaultPriority, 0)
	insert("scratch", 10, 0) // evicted first

	k, _ := p.Evict()
	fmt.Println("evicted", k)

	clock.Advance(2 * time.Minute) // the system prompt's priority runs out
	insert("new-turn", eviction.DefaultPriority, 0)
	for p.Len() > 0 {
		k, _ := p.Evict()
		fmt.Println("evicted", k)
	}

	err := p.Insert("bad", eviction.Entry{Size: 1, Priority: 101})
	fmt.Println(err)
	// Output:
	// evicted scratch
	// evicted chat-turn
	// evicted system-prompt
	// evicted new-turn
	// eviction: invalid entry: Priority 101 is outside [0, 100]
}

// A policy whose keys are small integers (dense ids, block numbers) can
// index them with a DenseIndex: a slice lookup instead of a map operation,
// and the same choices. A key the index cannot hold is refused.
func ExampleNewDenseIndex() {
	idx, err := eviction.NewDenseIndex[uint32](999) // keys 0 to 999
	if err != nil {
		fmt.Println(err)
		return
	}
	p, err := eviction.NewLRUWithIndex(idx)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, k := range []uint32{7, 3, 999} {
		if err := p.Insert(k, eviction.NewEntry(1)); err != nil {
			fmt.Println(err)
		}
	}
	p.Access(7)
	fmt.Println(p.Insert(1000, eviction.NewEntry(1)))
	for p.Len() > 0 {
		k, _ := p.Evict()
		fmt.Println("evicted", k)
	}
	// Output:
	// eviction: key outside the index's range: key 1000 is outside the DenseIndex's [0, 999]
	// evicted 3
	// evicted 999
	// evicted 7
}
