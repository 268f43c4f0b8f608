package kvcache

import (
	"testing"

	"github.com/kvtier/kvtier/layout"
	"github.com/kvtier/kvtier/radix"
	"github.com/stretchr/testify/require"
)

// pushToShared computes prompt on cache a and pushes it down to tier 3
// (the shared store) with two filler prompts, as TestAdoptAcrossCaches.
func pushToShared(t *testing.T, a *Cache, ea *keyedEngine, prompt []uint32) {
	t.Helper()
	for _, p := range [][]uint32{prompt, seqTokens(16, 5000), seqTokens(16, 6000)} {
		plan, err := a.Acquire(Request{Tokens: p})
		require.NoError(t, err)
		writeBlocks(t, a, ea.mem, plan.Seq, p, 0, 4)
		require.NoError(t, a.Commit(plan.Seq, 16))
		require.NoError(t, a.Release(plan.Seq))
	}
	require.Equal(t, int64(8), a.Stats().Tier(3).Cached)
}

// TestCopyOnWriteFromAStoreReadsTheCopiedUnit: a Truncate into a
// committed block that lives on the shared tier copies it (copy-on-write)
// from tier 3 into the sequence's new private block. The copy is named by
// the unit it reads (the owner of its source slot), not by the private
// block it fills, which has no content identity: named so, the store
// would miss it. (A review found it named by its destination.)
func TestCopyOnWriteFromAStoreReadsTheCopiedUnit(t *testing.T) {
	store := &mapStore{values: map[string]storedUnit{}}
	a, ea := sharedCache(t, store)
	prompt := seqTokens(16, 1000)
	pushToShared(t, a, ea, prompt)

	other, err := a.Acquire(Request{Tokens: prompt, Sparse: true}) // shares block 3: Truncate copies it
	require.NoError(t, err)
	require.Equal(t, 16, other.ReusedTokens)
	plan, err := a.Acquire(Request{Tokens: prompt, Sparse: true})
	require.NoError(t, err)
	require.Equal(t, 16, plan.ReusedTokens)
	ea.keys = nil
	_, err = a.Truncate(plan.Seq, 2) // 14 tokens: block 3 becomes partial, a copy of the cached one
	require.NoError(t, err)
	for _, k := range ea.keys {
		t.Logf("key: shared %v unit %d depth %d hash %x", k.Shared, k.Unit, k.Depth, k.Hash)
	}
	st := a.Stats().Tier(3)
	t.Logf("tier 3: hits %d missing %d corrupt %d; copies %d", st.Hits, st.Missing, st.Corrupt, a.Stats().Copies)
	require.Zero(t, st.Missing, "the store holds the copied block under its shared key")
	require.NoError(t, a.checkInvariants())
}

// TestPromptKeysNameTheTreesUnits checks PromptKeys (and UnitKeys, built
// on it) against the identities the cache gives its own committed units
// (unitKey, read from the prefix tree): every field but Unit, for every
// unit of a prompt with a namespace, a LoRA and extra keys in some blocks
// (several in one, on its first and last token, none in others).
func TestPromptKeysNameTheTreesUnits(t *testing.T) {
	c, err := New(Config{Layout: tinyLayout(t, layout.BSA, nil), Tiers: GPUAndCPU(Capacity{Units: 256}, Capacity{})})
	require.NoError(t, err)
	B := c.BlockTokens()
	req := Request{Tokens: seqTokens(6*B+2, 7), Namespace: "tenant", LoRA: "adapter",
		Extra: []radix.ExtraKey{{Pos: 1, Value: 9}, {Pos: 2*B - 1, Value: 10}, {Pos: 2 * B, Value: 11},
			{Pos: 2*B + 1, Value: 12}, {Pos: 5 * B, Value: 13}, {Pos: 6 * B, Value: 14}}}
	plan, err := c.Acquire(req)
	require.NoError(t, err)
	require.NoError(t, c.Commit(plan.Seq, len(req.Tokens)))
	pk, err := c.PromptKeys(req)
	require.NoError(t, err)
	require.Equal(t, 6, pk.Blocks())
	all, err := c.UnitKeys(nil, req)
	require.NoError(t, err)
	slices := c.Layout().UnitsPerBlock()
	require.Len(t, all, 6*slices)
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.seqs[plan.Seq]
	for i := range pk.Blocks() {
		for sl := range slices {
			want := c.unitKey(c.units.id(s.blocks[i], sl), c.SlicePool(sl))
			want.Unit = noUnit
			require.Equal(t, want, pk.Unit(i, sl), "block %d slice %d", i, sl)
			require.Equal(t, want, all[i*slices+sl], "UnitKeys: block %d slice %d", i, sl)
		}
	}
	_, err = c.PromptKeys(Request{Tokens: req.Tokens, Extra: []radix.ExtraKey{{Pos: 3}, {Pos: 1}}})
	require.ErrorIs(t, err, ErrInvalidRequest)
}
