package eviction

import (
	"math"
	"testing"
)

// TestARCHugeCapacity: with a capacity past math.MaxInt64/2 (a cache whose
// size is not meant to bound it), twice the capacity does not wrap: B2
// keeps every ghost of a cache far from full.
func TestARCHugeCapacity(t *testing.T) {
	p, err := NewARC[int](ARCConfig{Capacity: math.MaxInt64})
	if err != nil {
		t.Fatal(err)
	}
	for k := range 100 {
		if err := p.Insert(k, NewEntry(1)); err != nil {
			t.Fatal(err)
		}
		p.Access(k) // to T2
	}
	for range 50 {
		if _, ok := p.Evict(); !ok {
			t.Fatal("no victim")
		}
	}
	if p.count[arcB2] != 50 {
		t.Fatalf("B2 holds %d ghosts after 50 evictions from T2, want 50", p.count[arcB2])
	}
}

// TestARCGhostsWithPinnedKeys: with most keys pinned, as in a kvcache tier,
// the ghosts stay within twice the capacity, as documented.
func TestARCGhostsWithPinnedKeys(t *testing.T) {
	const c = 100
	p, err := NewARC[int](ARCConfig{Capacity: c})
	if err != nil {
		t.Fatal(err)
	}
	for k := range c {
		_ = p.Insert(k, NewEntry(1))
	}
	for k := range 90 {
		p.Pin(k)
	}
	for next := c; next < c+10000; next++ {
		if _, ok := p.Evict(); !ok {
			t.Fatal("no victim")
		}
		_ = p.Insert(next, NewEntry(1))
		if next%2 == 0 {
			p.Access(next)
		}
	}
	if ghosts := p.keys.len() - p.Len(); ghosts > 2*c {
		t.Fatalf("%d ghosts for a capacity of %d", ghosts, c)
	}
}
