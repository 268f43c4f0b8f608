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
	// recompute is the cache's Config.Recompute (retention prices units
	// with it).
	recompute *costmodel.Recompute
	// priorities, when not nil, are given to every sequence (prio-lru).
	priorities *kvcache.Priorities
}

// policyFor returns the policy named name.
func policyFor(name string, cfg *config) (policy, error) {
	switch name {
	case "lru":
		return policy{name: name, factory: kvcache.LRUPolicy()}, nil
	case "fifo":
		return policy{name: name, factory: kvcache.FIFOPolicy()}, nil
	case "s3fifo":
		// libCacheSim's parameters; kvcache reports every GPU hit with
		// Access, which is what S3-FIFO's hit counters need.
		return policy{name: name, factory: kvcache.S3FIFOPolicy(eviction.S3FIFOConfig{})}, nil
	case "prio-lru":
		// The first MoBA block holds the attention sinks (the first
		// tokens every head attends to in practice), so it is the block
		// an operator would protect, as TensorRT-LLM's retention config
		// protects a system prompt. Every other block keeps the default
		// priority, with no time limit.
		return policy{name: name, factory: kvcache.PrioritizedLRUPolicy(), priorities: &kvcache.Priorities{
			Default: eviction.DefaultPriority,
			Ranges:  []kvcache.PriorityRange{{Start: 0, End: cfg.blockTokens, Priority: cfg.sinkPriority}},
		}}, nil
	case "retention":
		return policy{name: name, factory: kvcache.RetentionPolicy(), recompute: &retentionCost}, nil
	}
	return policy{}, fmt.Errorf("%w: unknown policy %q", errUsage, name)
}
