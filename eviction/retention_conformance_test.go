package eviction_test

import (
	"testing"

	"github.com/kvtier/kvtier/costmodel"
	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/eviction/evictiontest"
)

func TestRetentionConformance(t *testing.T) {
	for _, tc := range []struct {
		name string
		cost costmodel.Recompute
	}{
		// The suite's units differ in layer, chunk and context, so the seed
		// model gives them many distinct costs.
		{"seed weights", costmodel.Recompute{Alpha: 1e-6, Beta: 1e-4, NonAttention: 2e-4}},
		// The zero model prices everything at 0: one LRU list.
		{"zero cost", costmodel.Recompute{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evictiontest.Run(t, func(cfg evictiontest.Config) eviction.Policy[int] {
				p, err := eviction.NewRetention[int](cfg.Clock, tc.cost)
				if err != nil {
					t.Fatal(err)
				}
				return p
			})
		})
	}
}
