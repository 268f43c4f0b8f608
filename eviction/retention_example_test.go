package eviction_test

import (
	"fmt"
	"time"

	"github.com/kvtier/kvtier/costmodel"
	"github.com/kvtier/kvtier/eviction"
)

// ExampleNewRetention evicts by Pensieve's retention value, cost divided by
// time inactive: a long-context chunk is dear to recompute and stays, until
// it has been idle long enough.
func ExampleNewRetention() {
	clock := &eviction.ManualClock{}
	// Plain Pensieve: 1 ms per 1000 context tokens plus 1 ms per chunk, no
	// layer or position weights.
	cost := costmodel.Recompute{Alpha: 1e-6, Beta: 1e-3, LayerWeight: costmodel.Flat, PositionWeight: costmodel.Flat}
	policy, err := eviction.NewRetention[string](clock, cost)
	if err != nil {
		fmt.Println(err)
		return
	}
	short := eviction.NewEntry(1)
	short.ContextTokens = 0 // costs 1 ms
	long := eviction.NewEntry(1)
	long.ContextTokens = 9000 // costs 10 ms

	_ = policy.Insert("long, idle 10 s", long)
	clock.Advance(9 * time.Second)
	_ = policy.Insert("short, idle 1 s", short)
	clock.Advance(time.Second)
	// Values now: 10 ms / 10 s = 1e-3 and 1 ms / 1 s = 1e-3, a tie: the
	// older use goes first.
	_ = policy.Insert("long, idle 0 s", long)
	clock.Advance(time.Second)
	// One second later: 10/11 ms/s, 1/2 ms/s, 10/1 ms/s.
	for {
		k, ok := policy.Evict()
		if !ok {
			break
		}
		fmt.Println(k)
	}
	// Output:
	// short, idle 1 s
	// long, idle 10 s
	// long, idle 0 s
}
