package eviction_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/eviction/evictiontest"
)

func TestPrioritizedLRUConformance(t *testing.T) {
	evictiontest.Run(t, func(cfg evictiontest.Config) eviction.Policy[int] {
		return eviction.NewPrioritizedLRU[int](cfg.Clock)
	})
}

func TestPrioritizedLRUOrder(t *testing.T) {
	cases := []struct {
		name, script, victims string
	}{
		{"lowest priority first", "i1:50 i2:10 i3:90 e e e e", "2 1 3 -"},
		{"0 first, 100 last", "i1:100 i2:0 i3:100 i4:0 e e e e", "2 4 1 3"},
		{"levels across both bitmap words", "i1:64 i2:63 i3:100 i4:99 e e e e", "2 1 4 3"},
		{"default priority sits at 35", "i1 i2:34 i3:36 e e e", "2 1 3"},
		{"LRU within a level", "i1:20 i2:20 i3:20 a1 e e e", "2 3 1"},
		{"access does not cross levels", "i1:20 i2:30 a1 e e", "1 2"},
		{"pinned key is skipped", "i1:0 i2:50 p1 e e", "2 -"},
		{"pinned key keeps its priority", "i1:0 i2:50 i3:50 p1 e u1 e e", "2 1 3"},
		{"unpin is the most recent use of the level", "i1:20 i2:20 p1 u1 e e", "2 1"},
		{"pin twice, unpin once", "i1:20 i2:30 p1 p1 u1 e e", "1 2"},
		{"priority holds until its duration", "i1:10/10ms i2 +9ms e e", "1 2"},
		{"priority expires exactly at its duration", "i1:10/10ms i2 +10ms e e", "2 1"},
		{"expired key is used at its expiry instant", "i1:10/5ms i2 i3 +6ms a2 e e e", "3 1 2"},
		{"expired key precedes a later insert", "i1:10/5ms i2 +5ms i3 e e e", "2 1 3"},
		{"expiry found by evict", "i2 i1:10/5ms +7ms e e", "2 1"},
		{"high priority expires downwards", "i1:90/5ms i2:50 i3 +5ms e e e", "3 1 2"},
		{"same-instant expiries in timer order", "i3 i2:20/10ms +5ms i1:10/5ms +5ms e e e", "3 2 1"},
		{"timer stops while pinned", "i1:10/10ms i2 +5ms p1 +50ms u1 +9ms e e", "1 2"},
		{"timer restarts at unpin", "i1:10/10ms i2 +5ms p1 +50ms u1 +10ms e e", "2 1"},
		{"access does not restart the timer", "i1:10/10ms i2 +5ms a1 +5ms e e", "2 1"},
		{"expiry before a pin is permanent", "i1:10/5ms i2 +5ms p1 u1 i3 e e e", "2 1 3"},
		{"default priority with a duration never moves", "i1:35/5ms i2 +10ms e e", "1 2"},
		{"huge duration never expires", "i1:10/2562047h i2 +1000h e e", "1 2"},
		{"remove drops the timer", "i1:10/5ms r1 +10ms e", "-"},
		{"reinsert after remove starts afresh", "i1:10/5ms r1 i1:90 +10ms i2 e e", "2 1"},
		{"reinsert after evict starts afresh", "i1:10/5ms e i1:90 +10ms i2 e e", "1 2 1"},
		{"unknown keys are ignored", "i1 a9 p9 u9 r9 i2 e e e", "1 2 -"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := new(eviction.ManualClock)
			require.Equal(t, c.victims, runScript(t, eviction.NewPrioritizedLRU[int](clk), clk, c.script))
		})
	}
}

// prioritizedEntry draws priorities that hit both bitmap words, the default
// and its neighbours, and durations on the same millisecond grid as the
// clock so that expiries often coincide with operations and each other.
func prioritizedEntry(rng *rand.Rand) eviction.Entry {
	levels := [...]int{0, 1, 34, 35, 36, 63, 64, 99, 100}
	e := eviction.NewEntry(1)
	if rng.IntN(4) == 0 {
		e.Priority = rng.IntN(eviction.MaxPriority + 1)
	} else {
		e.Priority = levels[rng.IntN(len(levels))]
	}
	switch r := rng.IntN(10); {
	case r < 5:
		e.PriorityDuration = time.Duration(1+rng.IntN(20)) * time.Millisecond
	case r == 5:
		e.PriorityDuration = math.MaxInt64
	case r == 6:
		e.Priority = 101 // invalid: must be refused by both
	}
	return e
}

func TestPrioritizedLRUDifferential(t *testing.T) {
	mixes := []struct {
		name string
		w    diffOps
	}{
		{"cache", diffOps{insert: 30, access: 25, pin: 3, unpin: 3, remove: 4, evict: 20, advance: 15}},
		{"pinned", diffOps{insert: 25, access: 10, pin: 25, unpin: 15, remove: 5, evict: 10, advance: 10}},
		{"no time", diffOps{insert: 30, access: 25, pin: 10, unpin: 10, remove: 5, evict: 20}},
	}
	for _, kind := range indexKinds {
		for _, m := range mixes {
			for seed := range uint64(12) {
				runDifferential(t, "PrioritizedLRU/"+kind+"/"+m.name, seed, 3000, 64, m.w,
					func(c eviction.Clock) eviction.Policy[int] {
						return must(eviction.NewPrioritizedLRUWithIndex(c, newIndex(kind, 63)))
					},
					&refPrioritized{}, prioritizedEntry)
			}
		}
	}
}

func TestPrioritizedLRUNilClockUsesSystemTime(t *testing.T) {
	p := eviction.NewPrioritizedLRU[int](nil)
	low := eviction.NewEntry(1)
	low.Priority = 10
	low.PriorityDuration = time.Microsecond
	require.NoError(t, p.Insert(1, low))
	mid := eviction.NewEntry(1)
	mid.Priority = 20
	require.NoError(t, p.Insert(2, mid))
	time.Sleep(2 * time.Millisecond)
	k, ok := p.Evict()
	require.True(t, ok)
	require.Equal(t, 2, k, "key 1's priority 10 should have run out on the system clock, falling back to 35, above key 2's 20")
}

// TestPrioritizedLRUTimedKeysAllocateNothing checks the heap of expiries
// reaches a working size and stops allocating, with every key timed.
func TestPrioritizedLRUTimedKeysAllocateNothing(t *testing.T) {
	clk := new(eviction.ManualClock)
	p := eviction.NewPrioritizedLRU[int](clk)
	e := eviction.NewEntry(1)
	e.Priority = 70
	e.PriorityDuration = 50 * time.Millisecond
	for k := range 256 {
		require.NoError(t, p.Insert(k, e))
	}
	next := 256
	cycle := func() {
		p.Pin(next - 100)
		p.Unpin(next - 100)
		if _, ok := p.Evict(); ok {
			_ = p.Insert(next, e)
			next++
		}
		clk.Advance(time.Millisecond)
	}
	for range 10000 {
		cycle()
	}
	require.Zero(t, testing.AllocsPerRun(1000, cycle))
	require.Equal(t, 256, p.Len())
}
