package main

import (
	"github.com/kvtier/kvtier/costmodel"
	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/kvcache"
)

// Priorities given under prio-lru, in the manner of TensorRT-LLM's KV-cache
// retention config: the shared system prompt is kept longest, the rest of a
// prompt has the default priority, and decoded (answer) blocks go first.
// Priorities are set when a block is made, so an answer block keeps its low
// priority when later turns reuse it as history.
const (
	sysPriority    = 90
	promptPriority = eviction.DefaultPriority // 35
	decodePriority = 10
)

// policy is one row of the comparison: the factory both tiers use, and the
// priorities (if any) each turn's request carries.
type policy struct {
	name string
	// factory builds the policy of one arena; alpha and beta are the
	// recompute coefficients for cost-aware policies.
	factory    func(alpha, beta float64) kvcache.PolicyFactory
	priorities bool
}

// policies returns the policies in report order; lru is the baseline.
func policies() []policy {
	return []policy{
		{name: "lru", factory: func(_, _ float64) kvcache.PolicyFactory { return kvcache.LRUPolicy() }},
		{name: "prio-lru", priorities: true, factory: func(_, _ float64) kvcache.PolicyFactory { return kvcache.PrioritizedLRUPolicy() }},
		{name: "s3fifo", factory: func(_, _ float64) kvcache.PolicyFactory {
			return kvcache.S3FIFOPolicy(eviction.S3FIFOConfig{}) // libCacheSim defaults
		}},
		{name: "retention-seed", factory: func(a, b float64) kvcache.PolicyFactory {
			// Nil weights are the seed's layer and position weights.
			return retention(costmodel.Recompute{Alpha: a, Beta: b})
		}},
		{name: "retention-flat", factory: func(a, b float64) kvcache.PolicyFactory {
			return retention(costmodel.Recompute{Alpha: a, Beta: b, LayerWeight: costmodel.Flat, PositionWeight: costmodel.Flat})
		}},
	}
}

// retention returns a factory of retention policies priced by r. The
// cache's own cost (Config.Recompute, which kvcache.RetentionPolicy would
// read) prices the offload-or-drop decision with the weights of
// -decide-weights, so that every policy row is compared under the same
// decision; the retention rows price their victims their own way.
func retention(r costmodel.Recompute) kvcache.PolicyFactory {
	return func(info kvcache.PoolInfo) (eviction.Policy[kvcache.UnitID], error) {
		return eviction.NewRetention[kvcache.UnitID](info.Clock, r)
	}
}

// policyNames returns the names of policies in report order.
func policyNames() []string {
	ps := policies()
	n := make([]string, len(ps))
	for i, p := range ps {
		n[i] = p.name
	}
	return n
}

// policyByName finds a policy.
func policyByName(name string) (policy, bool) {
	for _, p := range policies() {
		if p.name == name {
			return p, true
		}
	}
	return policy{}, false
}

// turnPriorities returns the priorities of a turn's request under prio-lru:
// sysLen system-prompt tokens, then the rest of a promptLen-token prompt;
// blocks made by decoding fall outside both ranges and take Default.
func turnPriorities(sysLen, promptLen int) *kvcache.Priorities {
	p := &kvcache.Priorities{Default: decodePriority}
	if sysLen > 0 {
		p.Ranges = append(p.Ranges, kvcache.PriorityRange{Start: 0, End: sysLen, Priority: sysPriority})
	}
	if promptLen > sysLen {
		p.Ranges = append(p.Ranges, kvcache.PriorityRange{Start: sysLen, End: promptLen, Priority: promptPriority})
	}
	return p
}
