package kvevents_test

import (
	"crypto/sha256"
	"fmt"
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

// tokenKeyRouter is a router that keys blocks as llm-d's indexer does:
// from the events alone, a block's key is a hash of its parent's key, its
// tokens and its extra keys (the engine's block hashes only map to these
// keys). It returns, per engine hash, the router's key.
func tokenKeyRouter(t *testing.T, evs []kvevents.Event) map[uint64]string {
	t.Helper()
	keys := map[uint64]string{}
	for _, e := range evs {
		s, ok := e.(kvevents.BlockStored)
		if !ok {
			continue
		}
		parent := ""
		if s.ParentBlockHash != nil {
			parent = keys[*s.ParentBlockHash]
		}
		for i, h := range s.BlockHashes {
			var extra any
			if s.ExtraKeys != nil {
				extra = s.ExtraKeys[i]
			}
			parent = fmt.Sprintf("%x", sha256.Sum256(fmt.Appendf(nil, "%s|%v|%v", parent, s.TokenIDs[i*s.BlockSize:(i+1)*s.BlockSize], extra)))
			keys[h] = parent
		}
	}
	return keys
}

// TestNamespaceIsTheCacheSalt: two tenants and the default namespace send
// the same prompts. The namespace goes out as the last extra key of each
// chain's first block and nowhere else, so a router that keys blocks by
// their tokens and extra keys gives each tenant's blocks keys of their
// own; with OmitNamespace it keys them alike (what credited one tenant
// with another's blocks).
func TestNamespaceIsTheCacheSalt(t *testing.T) {
	for _, omit := range []bool{false, true} {
		c := newTieredCache(t)
		tr := kvevents.NewTranslator(c)
		tr.OmitNamespace = omit
		var evs []kvevents.Event
		owner := map[uint64]string{}
		for _, ns := range []string{"", "tenant-a", "tenant-b"} {
			for _, n := range []int{3, 2} {
				req := kvcache.Request{Tokens: make([]uint32, n*c.BlockTokens()), Namespace: ns}
				for i := range req.Tokens {
					req.Tokens[i] = uint32(i)
				}
				serve(t, c, req)
				out, _, err := c.TakeEvents(nil)
				require.NoError(t, err)
				for _, e := range out {
					if e.Kind == kvcache.BlockStored {
						owner[e.Hash] = ns
					}
				}
				evs = tr.Append(evs, out)
			}
		}
		for _, e := range evs {
			s, ok := e.(kvevents.BlockStored)
			if !ok {
				continue
			}
			for i, h := range s.BlockHashes {
				first := i == 0 && s.ParentBlockHash == nil
				var extra []any
				if s.ExtraKeys != nil {
					extra = s.ExtraKeys[i]
				}
				if first && owner[h] != "" && !omit {
					require.Equal(t, []any{owner[h]}, extra, "first block of namespace %q", owner[h])
				} else {
					require.Nil(t, extra, "block %d of a run of namespace %q", i, owner[h])
				}
			}
		}
		keys := tokenKeyRouter(t, evs)
		tenants := map[string]map[string]bool{} // router key -> namespaces
		for h, k := range keys {
			if tenants[k] == nil {
				tenants[k] = map[string]bool{}
			}
			tenants[k][owner[h]] = true
		}
		shared := 0
		for _, nss := range tenants {
			if len(nss) > 1 {
				shared++
			}
		}
		if omit {
			require.Positive(t, shared, "without the salt the router should key the tenants' blocks alike")
		} else {
			require.Zero(t, shared, "a router key stands for blocks of two namespaces")
		}
	}
}

// TestExtraKeyShapes: a LoRA request with a multimodal key on its second
// block, in each shape: kvtier's integers; vLLM's entries, the LoRA name
// on every block, the key as [identifier, offset in the block] or as its
// bare identifier, the namespace last on the first block. Each survives
// encoding and decoding.
func TestExtraKeyShapes(t *testing.T) {
	const value = 0xabc
	id := "0000000000000abc"
	for _, tc := range []struct {
		shape kvevents.ExtraKeyShape
		want  [][]any
	}{
		{kvevents.ExtraKeyValues, [][]any{{"t"}, {uint64(value)}}},
		{kvevents.ExtraKeyPairs, [][]any{{"sql", "t"}, {"sql", []any{id, 1}}}},
		{kvevents.ExtraKeyIdentifiers, [][]any{{"sql", "t"}, {"sql", id}}},
	} {
		c := newTieredCache(t)
		tr := kvevents.NewTranslator(c)
		tr.ExtraKeys = tc.shape
		bt := c.BlockTokens()
		req := kvcache.Request{Tokens: make([]uint32, 2*bt), LoRA: "sql", Namespace: "t",
			Extra: []radix.ExtraKey{{Pos: bt + 1, Value: value}}}
		serve(t, c, req)
		out, _, err := c.TakeEvents(nil)
		require.NoError(t, err)
		evs := tr.Append(nil, out)
		require.Len(t, evs, 1)
		s := evs[0].(kvevents.BlockStored)
		require.Equal(t, tc.want, s.ExtraKeys, "shape %d", tc.shape)

		enc, err := kvevents.NewEncoder(kvevents.EncoderOptions{})
		require.NoError(t, err)
		p, err := enc.Encode(kvevents.Batch{Events: evs})
		require.NoError(t, err)
		back, err := kvevents.Decode(p)
		require.NoError(t, err)
		got := back.Events[0].(kvevents.BlockStored).ExtraKeys
		require.Equal(t, fmt.Sprint(tc.want), fmt.Sprint(got), "shape %d after decoding", tc.shape)
	}
}
