package main

import (
	"fmt"
	"strings"

	"github.com/kvtier/kvtier/costmodel"
	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/kvcache"
)

// policyNames lists the policies -policy accepts, in the order rows are
// printed.
var policyNames = []string{"lru", "fifo", "s3fifo", "plru", "retention"}

// defaultPolicies is the -policy default. plru is left out: the trace carries
// no priorities, so every block has the default priority and the prioritized
// LRU is exactly LRU (the tests check it); running it would print LRU's row
// twice.
const defaultPolicies = "lru,fifo,s3fifo,retention"

// retentionCost prices a block for the retention policy: plain Pensieve
// (Flat weights: a unit holds every layer, and the context term already
// values late blocks more than the seed's position weight would).
func retentionCost(alpha, beta float64) costmodel.Recompute {
	return costmodel.Recompute{Alpha: alpha, Beta: beta, LayerWeight: costmodel.Flat, PositionWeight: costmodel.Flat}
}

// policyFactory returns the GPU policy factory named name (retention
// prices blocks with the cache's Config.Recompute).
func policyFactory(name string) (kvcache.PolicyFactory, error) {
	switch name {
	case "lru":
		return kvcache.LRUPolicy(), nil
	case "fifo":
		return kvcache.FIFOPolicy(), nil
	case "s3fifo":
		return kvcache.S3FIFOPolicy(eviction.S3FIFOConfig{}), nil
	case "plru":
		return kvcache.PrioritizedLRUPolicy(), nil
	case "retention":
		return kvcache.RetentionPolicy(), nil
	}
	return nil, fmt.Errorf("unknown policy %q (want one of %s)", name, strings.Join(policyNames, ", "))
}
