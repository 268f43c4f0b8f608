package lfu_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/examples/custompolicy/lfu"
	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/layout"
)

// The policy plugs into a kvcache tier through a PolicyFactory: one LFU per
// arena. Requests sharing a prefix reuse it, and the slot accounting holds.
func TestAsKVCachePolicy(t *testing.T) {
	l, err := layout.New(layout.Model{Name: "toy", Layers: 2, QueryHeads: 2, KVHeads: 1, HeadDim: 4, ElemBytes: 2}, layout.AllLayers, 4)
	require.NoError(t, err)
	c, err := kvcache.New(kvcache.Config{
		Layout: l,
		Tiers: []kvcache.TierConfig{{Capacity: kvcache.Capacity{Units: 8},
			Policy: func(kvcache.PoolInfo) (eviction.Policy[kvcache.UnitID], error) {
				return lfu.New[kvcache.UnitID](), nil
			}}},
	})
	require.NoError(t, err)
	hits := 0
	for i := range uint32(40) {
		prompt := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 100 + i, 0, 0, 0} // a 2-block shared prefix, then a unique block
		plan, err := c.Acquire(kvcache.Request{Tokens: prompt})
		require.NoError(t, err)
		hits += plan.Hits
		require.NoError(t, c.Commit(plan.Seq, plan.Tokens)) // the prefill ran: share it
		require.NoError(t, c.Release(plan.Seq))
		st := c.Stats().Tier(kvcache.GPU)
		require.Equal(t, st.Capacity, st.Free+st.Pinned+st.Cached)
	}
	assert.Equal(t, 2*39, hits, "every request after the first reuses the shared prefix")
}
