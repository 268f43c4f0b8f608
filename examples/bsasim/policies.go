package main

import (
	"fmt"

	"github.com/kvtier/kvtier/costmodel"
	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/kvcache"
)

// retentionCost prices a unit for the retention policy: the coefficients of
// the seed document's worked example (alpha 1 ms per context token, beta
// 10 ms and 5 ms of non-attention work per chunk) with costmodel's seed
// layer weight (L-layer)/L and position weight (chunk+1)/chunks. Only the
// ratio of alpha to beta+nonAttention matters for the order of victims;
// here the context term dominates beyond 15 tokens.
var retentionCost = costmodel.Recompute{Alpha: 0.001, Beta: 0.01, NonAttention: 0.005}

// policy is one GPU eviction policy under test.
type policy struct {
	name    string
	factory kvcache.PolicyFactory
	// priorities, when not nil, are given to every sequence (prio-lru).
	priorities *kvcache.Priorities
}

// policyFor returns the policy named name.
func policyFor(name string, cfg *config) (policy, error) {
	switch name {
	case "lru":
		return policy{name: name, factory: kvcache.LRUFactory}, nil
	case "fifo":
		return policy{name: name, factory: kvcache.FIFOFactory}, nil
	case "s3fifo":
		return policy{name: name, factory: countHits(kvcache.S3FIFOFactory(eviction.S3FIFOConfig{}))}, nil
	case "s3fifo-raw":
		return policy{name: name, factory: kvcache.S3FIFOFactory(eviction.S3FIFOConfig{})}, nil
	case "prio-lru":
		// The first MoBA block holds the attention sinks (the first
		// tokens every head attends to in practice), so it is the block
		// an operator would protect, as TensorRT-LLM's retention config
		// protects a system prompt. Every other block keeps the default
		// priority, with no time limit.
		return policy{name: name, factory: kvcache.PrioritizedLRUFactory, priorities: &kvcache.Priorities{
			Default: eviction.DefaultPriority,
			Ranges:  []kvcache.PriorityRange{{Start: 0, End: cfg.blockTokens, Priority: cfg.sinkPriority}},
		}}, nil
	case "retention":
		return policy{name: name, factory: kvcache.RetentionFactory(retentionCost)}, nil
	}
	return policy{}, fmt.Errorf("%w: unknown policy %q", errUsage, name)
}

// countHits wraps a factory so that its policies see cache hits.
//
// kvcache tells a policy about a hit only by pinning the unit (Pin, then
// Unpin when the step is over); it never calls Access. That is all LRU,
// FIFO, prioritized LRU and retention need, but S3-FIFO decides what to
// keep from per-key hit counters that only Access increments: without it
// every key leaves the small queue with zero hits and S3-FIFO degenerates
// into a FIFO with a ghost list. The wrapper calls Access before every Pin
// of a key that was already tracked, which is exactly a SparseAccess of a
// unit resident on the GPU and not pinned yet (a unit inserted by the
// cache is pinned right after its Insert: that is not a hit). Units pinned
// by Append (the block being written) get no count while they stay pinned.
// "s3fifo-raw" runs kvcache's factory without the wrapper.
func countHits(f kvcache.PolicyFactory) kvcache.PolicyFactory {
	return func(info kvcache.PoolInfo) (eviction.Policy[kvcache.UnitID], error) {
		p, err := f(info)
		if err != nil || info.Tier != kvcache.GPU {
			return p, err
		}
		return &hitCounter{Policy: p, fresh: noKey}, nil
	}
}

// noKey is a UnitID no cache hands out (ids are small dense numbers).
const noKey = ^kvcache.UnitID(0)

type hitCounter struct {
	eviction.Policy[kvcache.UnitID]
	fresh kvcache.UnitID // the key inserted last, until its first Pin
}

func (h *hitCounter) Insert(k kvcache.UnitID, e eviction.Entry) error {
	if err := h.Policy.Insert(k, e); err != nil {
		return err
	}
	h.fresh = k
	return nil
}

func (h *hitCounter) Pin(k kvcache.UnitID) {
	if k == h.fresh {
		h.fresh = noKey
	} else {
		h.Policy.Access(k)
	}
	h.Policy.Pin(k)
}
