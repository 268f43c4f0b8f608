package main

import (
	"fmt"
	"time"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/eviction/replay"
	"github.com/kvtier/kvtier/examples/custompolicy/lfu"
	"github.com/kvtier/kvtier/internal/parallel"
)

// policyNames lists the policies compared: ours first, then the shipped
// ones.
var policyNames = []string{"lfu", "lru", "fifo", "s3fifo"}

// newPolicy builds an empty policy for a cache of capacity (S3-FIFO sizes
// its queues from it; the others do not need it).
func newPolicy(name string, capacity int64) (eviction.Policy[uint64], error) {
	switch name {
	case "lfu":
		return lfu.New[uint64](), nil
	case "lru":
		return eviction.NewLRU[uint64](), nil
	case "fifo":
		return eviction.NewFIFO[uint64](), nil
	case "s3fifo":
		return eviction.NewS3FIFO[uint64](eviction.S3FIFOConfig{Capacity: capacity})
	}
	return nil, fmt.Errorf("%w: unknown policy %q", errUsage, name)
}

// cacheSize is one resolved cache size, in bytes (objects in object mode).
type cacheSize struct {
	bytes int64
	label string
}

// row is one replay. Exported fields are the JSON row.
type row struct {
	Policy        string  `json:"policy"`
	CacheSize     int64   `json:"cache_size"`
	Unit          string  `json:"unit"` // "bytes" or "objects"
	Requests      int64   `json:"requests"`
	Misses        int64   `json:"misses"`
	MissRatio     float64 `json:"miss_ratio"`
	ByteMissRatio float64 `json:"byte_miss_ratio"`
	label         string
	elapsed       time.Duration
}

// compare replays src through every (policy, size) pair, workers at a
// time, and returns the rows policy by policy, sizes in the order given.
func compare(src source, policies []string, sizes []cacheSize, workers int) ([]row, error) {
	type pair struct {
		policy string
		size   cacheSize
	}
	pairs := make([]pair, 0, len(policies)*len(sizes))
	for _, p := range policies {
		for _, s := range sizes {
			pairs = append(pairs, pair{p, s})
		}
	}
	return parallel.Map(pairs, workers, func(p pair) (row, error) {
		return replayOne(src, p.policy, p.size)
	})
}

// replayOne replays src through a fresh policy in a cache of size s.
func replayOne(src source, policy string, s cacheSize) (row, error) {
	p, err := newPolicy(policy, s.bytes)
	if err != nil {
		return row{}, err
	}
	res, err := src.prepared.Run(p, replay.Config{Capacity: s.bytes, IgnoreObjectSize: src.objectMode})
	if err != nil {
		return row{}, fmt.Errorf("%s at %s: %w", policy, s.label, err)
	}
	unit := "bytes"
	if src.objectMode {
		unit = "objects"
	}
	return row{
		Policy: policy, CacheSize: s.bytes, Unit: unit,
		Requests: res.Requests, Misses: res.Misses,
		MissRatio: res.MissRatio(), ByteMissRatio: res.ByteMissRatio(),
		label: s.label, elapsed: res.Elapsed,
	}, nil
}
