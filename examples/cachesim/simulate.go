package main

import (
	"fmt"
	"path/filepath"

	"github.com/kvtier/kvtier/costmodel"
	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/eviction/replay"
	"github.com/kvtier/kvtier/eviction/trace"
	"github.com/kvtier/kvtier/internal/parallel"
)

// result is one replay's outcome, with what identifies it.
type result struct {
	trace  string
	policy string
	size   int64
	replay.Result
}

// job is one replay to run: a policy at a cache size.
type job struct {
	policy string
	size   int64
}

// newPolicy builds the named policy for a cache of capacity units, reading
// clock. The slab-backed policies index their keys with idx (a nil idx
// means their Go map); retention has no such option and ignores it.
func newPolicy(o options, name string, capacity int64, clock eviction.Clock, idx eviction.Index[uint64]) (eviction.Policy[uint64], error) {
	switch name {
	case "lru":
		return eviction.NewLRUWithIndex(idx)
	case "fifo":
		return eviction.NewFIFOWithIndex(idx)
	case "s3fifo", "s3fifov0":
		return eviction.NewS3FIFOWithIndex(eviction.S3FIFOConfig{
			Capacity:            capacity,
			SmallRatio:          o.s3SmallRatio,
			GhostRatio:          o.s3GhostRatio,
			MoveToMainThreshold: o.s3Threshold,
			Original:            name == "s3fifov0",
		}, idx)
	case "arc":
		return eviction.NewARCWithIndex(eviction.ARCConfig{Capacity: capacity}, idx)
	case "wtinylfu":
		keys := o.tinyLFUKeys
		if keys == 0 {
			keys = int(min(capacity, 1<<30))
			if !o.ignoreObjSize {
				keys = int(max(1, capacity>>12))
			}
		}
		return eviction.NewWTinyLFUWithIndex(eviction.WTinyLFUConfig{Capacity: capacity, Keys: keys}, idx)
	case "plru":
		return eviction.NewPrioritizedLRUWithIndex(clock, idx)
	case "retention":
		// One cost for every object: a block-I/O trace says nothing of
		// context lengths or layers (see the package documentation).
		return eviction.NewRetention[uint64](clock, costmodel.Recompute{
			Beta: 1, LayerWeight: costmodel.Flat, PositionWeight: costmodel.Flat,
		})
	}
	return nil, fmt.Errorf("%w: unknown policy %q", errUsage, name)
}

// simulate runs every policy at every size and returns the results in the
// order policies x sizes.
func simulate(o options) ([]result, error) {
	var jobs []job
	for _, p := range o.policies {
		for _, s := range o.sizes {
			jobs = append(jobs, job{p, s})
		}
	}
	// Check every policy's parameters before reading the trace.
	for _, j := range jobs {
		if _, err := newPolicy(o, j.policy, j.size, new(eviction.ManualClock), nil); err != nil {
			return nil, fmt.Errorf("%s at size %d: %w", j.policy, j.size, err)
		}
	}

	var prepared *replay.Prepared
	if !o.stream {
		f, err := trace.OpenFile(o.tracePath, o.format, o.traceOpts)
		if err != nil {
			return nil, err
		}
		reqs, err := trace.Load(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", o.tracePath, err)
		}
		prepared = replay.Prepare(reqs)
	}

	// -parallel is for in-memory replays (see its flag): streamed ones,
	// each reading the file, run one at a time.
	workers := o.parallel
	if o.stream {
		workers = 1
	}
	return parallel.Map(jobs, workers, func(j job) (result, error) {
		r, err := runJob(o, j, prepared)
		if err != nil {
			return result{}, fmt.Errorf("%s at size %s: %w", j.policy, formatSize(j.size, o.ignoreObjSize), err)
		}
		return r, nil
	})
}

// runJob replays the trace once, from memory when prepared is not nil,
// else from the file. From memory, the policy sees the prepared trace's
// dense ids and indexes them in a slice (Prepared.NewIndex) instead of a
// map: the same choices, about twice the speed.
func runJob(o options, j job, prepared *replay.Prepared) (result, error) {
	clock := new(eviction.ManualClock)
	var idx eviction.Index[uint64]
	if prepared != nil {
		idx = prepared.NewIndex()
	}
	p, err := newPolicy(o, j.policy, j.size, clock, idx)
	if err != nil {
		return result{}, err
	}
	cfg := replay.Config{
		Capacity:         j.size,
		IgnoreObjectSize: o.ignoreObjSize,
		Clock:            clock,
		Time:             o.timeSource,
		TimeUnit:         o.timeUnit,
	}
	var res replay.Result
	if prepared != nil {
		res, err = prepared.Run(p, cfg)
	} else {
		var f *trace.File
		if f, err = trace.OpenFile(o.tracePath, o.format, o.traceOpts); err != nil {
			return result{}, err
		}
		res, err = replay.Run(p, f, cfg)
		f.Close()
	}
	if err != nil {
		return result{}, err
	}
	return result{trace: filepath.Base(o.tracePath), policy: j.policy, size: j.size, Result: res}, nil
}
