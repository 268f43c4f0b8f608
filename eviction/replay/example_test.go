package replay_test

import (
	"fmt"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/eviction/replay"
	"github.com/kvtier/kvtier/eviction/trace"
)

func ExampleRun() {
	// Eight hot objects, each asked for again every round, between which
	// come bursts of one-hit wonders; caches of 10 objects.
	var reqs []trace.Request
	next := uint64(100)
	for range 50 {
		for hot := range uint64(8) {
			reqs = append(reqs, trace.Request{ID: hot, Size: 1})
		}
		for range 4 {
			reqs = append(reqs, trace.Request{ID: next, Size: 1})
			next++
		}
	}
	// S3-FIFO admits only objects smaller than its small queue: 2 here.
	s3, err := eviction.NewS3FIFO[uint64](eviction.S3FIFOConfig{Capacity: 10, SmallRatio: 0.2})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, p := range []struct {
		name   string
		policy eviction.Policy[uint64]
	}{{"LRU", eviction.NewLRU[uint64]()}, {"S3-FIFO", s3}} {
		res, err := replay.Run(p.policy, trace.NewSliceReader(reqs), replay.Config{Capacity: 10})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s: %d requests, %d misses, miss ratio %.3f\n", p.name, res.Requests, res.Misses, res.MissRatio())
	}
	// Output:
	// LRU: 600 requests, 600 misses, miss ratio 1.000
	// S3-FIFO: 600 requests, 214 misses, miss ratio 0.357
}
