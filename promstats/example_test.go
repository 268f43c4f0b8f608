package promstats_test

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/layout"
	"github.com/kvtier/kvtier/promstats"
)

// ExampleNewCollector registers a cache's statistics with a Prometheus
// registry, serves one request, and reads back one of the metrics a
// scrape would export. A server registers the Collector once, on the
// registry its /metrics handler serves (promhttp.HandlerFor).
func ExampleNewCollector() {
	l, err := layout.New(layout.Model{Name: "tiny", Layers: 2, QueryHeads: 4, KVHeads: 2, HeadDim: 2, ElemBytes: 1}, layout.PagedLayer, 4)
	if err != nil {
		panic(err)
	}
	c, err := kvcache.New(kvcache.Config{Layout: l, Tiers: kvcache.GPUAndCPU(kvcache.Capacity{Units: 16}, kvcache.Capacity{Units: 16})})
	if err != nil {
		panic(err)
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(promstats.NewCollector(c, promstats.Options{ConstLabels: prometheus.Labels{"server": "a"}})); err != nil {
		panic(err)
	}

	plan, err := c.Acquire(kvcache.Request{Tokens: []uint32{1, 2, 3, 4, 5, 6, 7, 8}})
	if err != nil {
		panic(err)
	}
	if err := c.Commit(plan.Seq, plan.Tokens); err != nil {
		panic(err)
	}

	// What a scrape reads: one sample per tier of the slots that hold
	// pinned units (the sequence pins its 2 blocks of 2 units on the GPU).
	families, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, f := range families {
		if f.GetName() != "kvtier_tier_pinned_slots" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			fmt.Printf("%s{server=%q,tier=%q} %g\n", f.GetName(), labels["server"], labels["tier"], m.GetGauge().GetValue())
		}
	}
	// Output:
	// kvtier_tier_pinned_slots{server="a",tier="CPU"} 0
	// kvtier_tier_pinned_slots{server="a",tier="GPU"} 4
}
