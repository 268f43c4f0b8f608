package kvcache

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/layout"
)

func sharesTestLayout(t testing.TB) *layout.Layout {
	l, err := layout.New(layout.Model{Name: "tiny", Layers: 2, QueryHeads: 2, KVHeads: 1, HeadDim: 4, ElemBytes: 2}, layout.AllLayers, 4)
	require.NoError(t, err)
	return l
}

func sharesTestPrompt(base, blocks int) []uint32 {
	p := make([]uint32, 4*blocks)
	for i := range p {
		p[i] = uint32(base + i)
	}
	return p
}

// repeatLiar returns, once armed, the key it evicted last again.
type repeatLiar struct {
	eviction.Policy[UnitID]
	armed *bool
	last  UnitID
	have  bool
}

func (p *repeatLiar) Evict() (UnitID, bool) {
	if *p.armed && p.have {
		return p.last, true
	}
	k, ok := p.Policy.Evict()
	p.last, p.have = k, ok
	return k, ok
}

// TestSharesRefusedVictimKeepsCounts: a namespace's policy that returns a
// unit it evicted already poisons the cache, and the namespace's counts
// stay exact (the accounting of a poisoned cache is still checked).
func TestSharesRefusedVictimKeepsCounts(t *testing.T) {
	armed := false
	tiers := GPUAndCPU(Capacity{Units: 2}, Capacity{Units: 2})
	tiers[1].Policy = func(info PoolInfo) (eviction.Policy[UnitID], error) {
		p, err := LRUPolicy()(info)
		if err != nil {
			return nil, err
		}
		return &repeatLiar{Policy: p, armed: &armed}, nil
	}
	tiers[1].Shares = []Share{{Namespace: "a", Reserve: 0.5}}
	c, err := New(Config{Layout: sharesTestLayout(t), Tiers: tiers})
	require.NoError(t, err)
	for i := range 4 {
		p, err := c.Acquire(Request{Tokens: sharesTestPrompt(100*i, 1), Namespace: "a"})
		require.NoError(t, err)
		require.NoError(t, c.Commit(p.Seq, 4))
		require.NoError(t, c.Release(p.Seq))
	}
	require.Equal(t, 2, c.Stats().Tiers[1].Shares[0].Used)
	require.NoError(t, c.checkAccounting(true))
	// Two GPU victims of "a" move down to a full CPU: the first evicts an
	// "a" unit there, the second is handed the same unit again.
	armed = true
	_, err = c.Acquire(Request{Tokens: sharesTestPrompt(2000, 2), Namespace: "a"})
	require.ErrorIs(t, err, ErrPolicy)
	require.ErrorContains(t, err, "not an evictable unit")
	require.NoError(t, c.checkAccounting(false))
}

// TestSharesRefuseMixedPolicies: a factory that builds a namespace's
// policy of another kind than the tier's own (here without the optional
// interfaces) is refused at New, naming the namespace.
func TestSharesRefuseMixedPolicies(t *testing.T) {
	tiers := GPUAndCPU(Capacity{Units: 2}, Capacity{Units: 8})
	tiers[1].Policy = func(info PoolInfo) (eviction.Policy[UnitID], error) {
		p, err := LRUPolicy()(info)
		if err != nil || info.Slots >= 8 {
			return p, err
		}
		return plainPolicy{p}, nil // a small share: something simpler
	}
	tiers[1].Shares = []Share{{Namespace: "a", Cap: 0.5}}
	_, err := New(Config{Layout: sharesTestLayout(t), Tiers: tiers})
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.ErrorContains(t, err, `namespace "a" implements other optional interfaces`)
}
