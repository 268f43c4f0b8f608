package kvevents_test

import (
	"math/rand/v2"
	"testing"

	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/kvevents"
	"github.com/kvtier/kvtier/radix"
	"github.com/stretchr/testify/require"
)

// TestNamespacesNeverShareWhateverTheRouterSays: tenants send the same
// tokens under different namespaces. Their blocks have different hashes
// on the wire, so a router that hashes with the tenant's namespace (as
// vLLM's cache_salt) sees only the tenant's own blocks. A router that
// ignores namespaces and sends a tenant where the same tokens are cached
// only under another namespace gains nothing: the cache reuses none of
// them. In general it reuses at most the tenant's own blocks it holds,
// and at least the prefix the namespace-aware router's view shows.
func TestNamespacesNeverShareWhateverTheRouterSays(t *testing.T) {
	c := newTieredCache(t)
	tr := kvevents.NewTranslator(c)
	var ix kvevents.Index
	hasher, err := radix.NewHasher(c.BlockTokens(), 0)
	require.NoError(t, err)
	namespaces := []string{"", "tenant-a", "tenant-b"}
	rng := rand.New(rand.NewPCG(5, 6))
	fooled := 0
	for step := range 600 {
		req := randomRequest(rng)
		req.Namespace = namespaces[rng.IntN(len(namespaces))]
		blocks, err := c.Blocks(nil)
		require.NoError(t, err)
		held := map[uint64]string{} // hash -> namespace, blocks with bytes
		for _, b := range blocks {
			if b.Medium != kvcache.Dropped {
				held[b.Hash] = b.Namespace
			}
		}
		// count returns how many of the request's blocks, hashed under
		// ns, the cache holds, and the router's longest prefix of them.
		count := func(ns string) (int, int) {
			hs, err := hasher.Hash(nil, radix.Keys{Namespace: ns, LoRA: req.LoRA}, req.Tokens, req.Extra)
			require.NoError(t, err)
			n := 0
			for _, h := range hs {
				if owner, ok := held[h]; ok {
					require.Equal(t, ns, owner, "a hash of namespace %q held under %q", ns, owner)
					n++
				}
			}
			return n, ix.Match("s", hs)
		}
		mine, prefix := count(req.Namespace)
		others := 0
		for _, ns := range namespaces {
			if ns != req.Namespace {
				n, _ := count(ns)
				others = max(others, n)
			}
		}
		if mine == 0 && others > 0 {
			fooled++ // a namespace-blind router would send it here
		}
		plan := serve(t, c, req)
		bt := c.BlockTokens()
		require.LessOrEqual(t, plan.ReusedTokens, mine*bt, "step %d: reused beyond the blocks namespace %q holds", step, req.Namespace)
		require.GreaterOrEqual(t, plan.ReusedTokens, prefix*bt, "step %d: reused less than the router's view", step)
		evs, _, err := c.TakeEvents(nil)
		require.NoError(t, err)
		ix.Apply("s", kvevents.Batch{Events: tr.Append(nil, evs)})
	}
	require.Positive(t, fooled, "no request found its tokens cached only under another namespace")
	t.Logf("%d of 600 requests had their tokens cached only under another namespace", fooled)

	// The same tokens, three namespaces: three disjoint sets of hashes.
	seen := map[uint64]string{}
	for _, ns := range namespaces {
		hs, err := hasher.Hash(nil, radix.Keys{Namespace: ns}, make([]uint32, 8*c.BlockTokens()), nil)
		require.NoError(t, err)
		for _, h := range hs {
			other, dup := seen[h]
			require.False(t, dup, "namespaces %q and %q share hash %x", other, ns, h)
			seen[h] = ns
		}
	}
}
