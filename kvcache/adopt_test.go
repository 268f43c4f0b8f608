package kvcache

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/kvtier/kvtier/layout"
	"github.com/kvtier/kvtier/radix"
	"github.com/stretchr/testify/require"
)

// threeTiers is a GPU, a CPU and a "shared" tier below them, in units.
func threeTiers(gpu, cpu, shared int64) []TierConfig {
	return []TierConfig{{Name: "GPU", Capacity: Capacity{Units: gpu}}, {Name: "CPU", Capacity: Capacity{Units: cpu}},
		{Name: "shared", Capacity: Capacity{Units: shared}}}
}

func TestAdoptRegistersBlocksOnALowerTier(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil) // 2 units per block, 4 tokens
	var events []Event
	c, err := New(Config{Layout: l, Tiers: threeTiers(16, 16, 16), Events: func(e Event) { events = append(events, e) }})
	require.NoError(t, err)
	prompt := seqTokens(14, 100) // 3 full blocks and 2 tokens

	n, err := c.Adopt(Request{Tokens: prompt}, 3, 3)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.NoError(t, c.checkInvariants())
	st := c.Stats()
	require.Equal(t, uint64(6), st.Tier(3).Adopted)
	require.Equal(t, int64(6), st.Tier(3).Cached)
	require.Equal(t, 3, st.Blocks)
	require.Equal(t, "stored", what(events[0])[:6])
	require.Equal(t, Tier(3), events[0].To)
	require.Len(t, events, 3, "one BlockStored per block, on tier 3")

	// Adopting again changes nothing.
	n, err = c.Adopt(Request{Tokens: prompt}, 3, 3)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Equal(t, uint64(6), c.Stats().Tier(3).Adopted)

	// An Acquire reuses the blocks: they are onboarded from tier 3.
	plan, err := c.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	require.Equal(t, 12, plan.ReusedTokens)
	require.Equal(t, uint64(6), c.Stats().Tier(3).Hits)
	require.NoError(t, c.Release(plan.Seq))
	require.NoError(t, c.checkInvariants())

	// Another namespace shares nothing.
	plan, err = c.Acquire(Request{Tokens: prompt, Namespace: "b"})
	require.NoError(t, err)
	require.Zero(t, plan.ReusedTokens)
	require.NoError(t, c.Release(plan.Seq))
}

func TestAdoptBadInput(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	c, err := New(Config{Layout: l, Tiers: threeTiers(16, 16, 16)})
	require.NoError(t, err)
	prompt := seqTokens(8, 1)
	for _, tc := range []struct {
		blocks int
		tier   Tier
	}{{1, GPU}, {1, Dropped}, {1, 4}, {-1, 3}, {3, 3}} {
		_, err := c.Adopt(Request{Tokens: prompt}, tc.blocks, tc.tier)
		require.ErrorIs(t, err, ErrOutOfRange, "%+v", tc)
	}
	_, err = c.Adopt(Request{Tokens: prompt, Extra: []radix.ExtraKey{{Pos: 5}, {Pos: 1}}}, 1, 3)
	require.ErrorIs(t, err, ErrInvalidRequest)
	require.Zero(t, c.Stats().Blocks)

	// A cache that moves bytes by slot (a Mover, an engine that is not
	// keyed) would serve adopted units as whatever their slots hold.
	mem, err := NewMemoryStore(l, threeTiers(16, 16, 16))
	require.NoError(t, err)
	for _, cfg := range []Config{{Mover: mem}, {Engine: MoverEngine(mem)}} {
		cfg.Layout, cfg.Tiers = l, threeTiers(16, 16, 16)
		c, err := New(cfg)
		require.NoError(t, err)
		_, err = c.Adopt(Request{Tokens: prompt}, 1, 3)
		require.ErrorIs(t, err, ErrInvalidRequest)
		require.ErrorContains(t, err, "tier 3")
	}
}

// TestAdoptRoom: a tier above the last takes free slots only; the last
// tier evicts (drops) to make room.
func TestAdoptRoom(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	c, err := New(Config{Layout: l, Tiers: threeTiers(16, 4, 4)})
	require.NoError(t, err)
	n, err := c.Adopt(Request{Tokens: seqTokens(16, 1)}, 4, CPU)
	require.NoError(t, err)
	require.Equal(t, 2, n, "the CPU has room for 2 blocks and evicts nothing for Adopt")
	n, err = c.Adopt(Request{Tokens: seqTokens(8, 500)}, 2, 3)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	n, err = c.Adopt(Request{Tokens: seqTokens(8, 900)}, 2, 3)
	require.NoError(t, err)
	require.Equal(t, 2, n, "the last tier drops its units for Adopt")
	st := c.Stats()
	require.Equal(t, uint64(4), st.Tier(3).Drops)
	require.NoError(t, c.checkInvariants())
}

// mapStore is a content-addressed store shared by caches, as a test
// double for a tier below the CPU: values keyed by block hash, keys and
// slice, each with the tokens it was written for.
type mapStore struct {
	mu     sync.Mutex
	values map[string]storedUnit
}

type storedUnit struct {
	tokens []uint32
	bytes  []byte
}

func mapKey(k UnitKey) string {
	return fmt.Sprintf("%s/%s/%x/%d", k.Keys.Namespace, k.Keys.LoRA, k.Hash, k.Slice)
}

// keyedEngine moves copies between a cache's MemoryStore (GPU, CPU) and a
// mapStore (tier 3), at once, and records the keys it was given.
type keyedEngine struct {
	mem   *MemoryStore
	store *mapStore
	keys  []UnitKey
}

func (e *keyedEngine) Start([]Copy, func(error)) { panic("Start called on a KeyedEngine") }

func (e *keyedEngine) Stores(t Tier) bool { return t == 3 }

func (e *keyedEngine) StartKeyed(copies []Copy, keys []UnitKey, done func(error)) {
	e.keys = append(e.keys, keys...)
	e.store.mu.Lock()
	defer e.store.mu.Unlock()
	for i, cp := range copies {
		k := keys[i]
		switch {
		case cp.To == 3:
			if !k.Shared {
				done(fmt.Errorf("unit %d is not shared", k.Unit))
				return
			}
			e.store.values[mapKey(k)] = storedUnit{tokens: slices.Clone(k.Tokens), bytes: slices.Clone(e.mem.Bytes(cp.From, cp.Pool, cp.FromSlot))}
		case cp.From == 3:
			v, ok := e.store.values[mapKey(k)]
			if !ok {
				done(fmt.Errorf("%w: %s", ErrUnitMissing, mapKey(k)))
				return
			}
			if !slices.Equal(v.tokens, k.Tokens) {
				done(fmt.Errorf("%w: %s holds other tokens", ErrUnitCorrupt, mapKey(k)))
				return
			}
			copy(e.mem.Bytes(cp.To, cp.Pool, cp.ToSlot), v.bytes)
		default:
			if err := e.mem.Copy([]Copy{cp}); err != nil {
				done(err)
				return
			}
		}
	}
	done(nil)
}

// sharedCache is a cache over its own GPU and CPU memory and the shared
// store as tier 3.
func sharedCache(t *testing.T, store *mapStore) (*Cache, *keyedEngine) {
	t.Helper()
	l := tinyLayout(t, layout.PagedLayer, nil)
	tiers := threeTiers(8, 8, 64)
	mem, err := NewMemoryStore(l, tiers[:2])
	require.NoError(t, err)
	e := &keyedEngine{mem: mem, store: store}
	c, err := New(Config{Layout: l, Tiers: tiers, Engine: e, HashSeed: 7})
	require.NoError(t, err)
	return c, e
}

// TestAdoptAcrossCaches: one cache computes a prompt and its blocks move
// down to the shared tier; a second cache adopts them and reads back the
// first one's bytes; a unit missing from the store, or one whose stored
// tokens are not the request's, is recomputed and counted, never served.
func TestAdoptAcrossCaches(t *testing.T) {
	store := &mapStore{values: map[string]storedUnit{}}
	a, ea := sharedCache(t, store)
	prompt := seqTokens(16, 1000) // 4 blocks, 8 units: the GPU's size
	plan, err := a.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	writeBlocks(t, a, ea.mem, plan.Seq, prompt, 0, 4)
	require.NoError(t, a.Commit(plan.Seq, len(prompt)))
	require.NoError(t, a.Release(plan.Seq))
	for _, base := range []uint32{5000, 6000} { // push it down to tier 3
		p, err := a.Acquire(Request{Tokens: seqTokens(16, base)})
		require.NoError(t, err)
		writeBlocks(t, a, ea.mem, p.Seq, seqTokens(16, base), 0, 4)
		require.NoError(t, a.Commit(p.Seq, 16))
		require.NoError(t, a.Release(p.Seq))
	}
	require.Equal(t, int64(8), a.Stats().Tier(3).Cached)
	require.Len(t, store.values, 8)
	want, err := a.UnitKeys(nil, Request{Tokens: prompt})
	require.NoError(t, err)
	require.Len(t, want, 8)
	compared := 0
	for _, k := range ea.keys {
		require.True(t, k.Shared)
		if k.Depth <= 4 && slices.Equal(k.Tokens, prompt[(k.Depth-1)*4:k.Depth*4]) {
			w := want[(k.Depth-1)*2+k.Slice]
			w.Unit = k.Unit
			require.Equal(t, w, k)
			compared++
		}
	}
	require.Equal(t, 16, compared, "the prompt's 8 units moved to the CPU, then to tier 3")

	b, eb := sharedCache(t, store)
	n, err := b.Adopt(Request{Tokens: prompt}, 4, 3)
	require.NoError(t, err)
	require.Equal(t, 4, n)
	plan, err = b.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	require.Equal(t, 16, plan.ReusedTokens)
	var r Readiness
	require.NoError(t, b.Readiness(plan.Seq, &r))
	require.Zero(t, r.Pending)
	require.Empty(t, r.Recompute)
	requireBlocks(t, b, eb.mem, plan.Seq, prompt)
	require.NoError(t, b.checkInvariants())
	// The keys b loaded with are those a stored with.
	hasher, err := radix.NewHasher(4, 7)
	require.NoError(t, err)
	hashes, err := hasher.Hash(nil, radix.Keys{}, prompt, nil)
	require.NoError(t, err)
	for _, k := range eb.keys {
		require.Equal(t, hashes[k.Depth-1], k.Hash)
		require.Equal(t, prompt[(k.Depth-1)*4:k.Depth*4], k.Tokens)
		require.Equal(t, k.Depth > 1, k.HasParent)
	}
	require.NoError(t, b.Release(plan.Seq))

	// A third cache adopts the prompt after the store lost block 2's
	// first unit and after block 3's second unit was overwritten with
	// other tokens (a collision): both are recomputed.
	store.mu.Lock()
	delete(store.values, mapKey(eb.keys[2]))
	for key, v := range store.values {
		if v.tokens[0] == prompt[12] && key[len(key)-1] == '1' {
			store.values[key] = storedUnit{tokens: seqTokens(4, 77), bytes: v.bytes}
		}
	}
	store.mu.Unlock()
	c, ec := sharedCache(t, store)
	n, err = c.Adopt(Request{Tokens: prompt}, 4, 3)
	require.NoError(t, err)
	require.Equal(t, 4, n)
	plan, err = c.Acquire(Request{Tokens: prompt})
	require.NoError(t, err)
	require.NoError(t, c.Readiness(plan.Seq, &r))
	require.NotEmpty(t, r.Recompute)
	st := c.Stats().Tier(3)
	require.Positive(t, st.Missing)
	require.Positive(t, st.Corrupt)
	// The server recomputes what failed; everything else is the first
	// cache's bytes.
	for _, rg := range r.Recompute {
		writeBlocks(t, c, ec.mem, plan.Seq, prompt, rg.Start/4, rg.End/4)
	}
	require.NoError(t, c.Commit(plan.Seq, len(prompt)))
	requireBlocks(t, c, ec.mem, plan.Seq, prompt)
	require.NoError(t, c.checkInvariants())
	require.NoError(t, c.Release(plan.Seq))
	require.True(t, errors.Is(fmt.Errorf("x: %w", ErrUnitMissing), ErrUnitMissing))
}

// TestAdoptDoesNotEvictItsOwnPrefix: on the last tier Adopt makes room by
// evicting, but not the units of the blocks it counts on: adopting block 2
// of a prompt whose block 1 fills the tier adopts nothing, and Adopt says
// how many blocks are whole from the first. (A review found block 1
// dropped to make room for block 2, and 2 reported.)
func TestAdoptDoesNotEvictItsOwnPrefix(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil) // 2 units per block
	c, err := New(Config{Layout: l, Tiers: threeTiers(16, 4, 2)})
	require.NoError(t, err)
	prompt := seqTokens(8, 1)
	n, err := c.Adopt(Request{Tokens: prompt}, 1, 3)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	n, err = c.Adopt(Request{Tokens: prompt}, 2, 3)
	require.NoError(t, err)
	require.NoError(t, c.checkInvariants())
	req := Request{Tokens: prompt}
	_, nodes, err := c.match(&req)
	require.NoError(t, err)
	whole := 0
	for whole < len(nodes) && c.whole(nodes[whole].Value) {
		whole++
	}
	t.Logf("Adopt returned %d; blocks whole from the first: %d; tier 3 drops %d", n, whole, c.Stats().Tier(3).Drops)
	require.Equal(t, n, whole, "Adopt said the cache holds %d blocks whole from the first", n)
}

// TestLongAdoptGoesOnFromItsPrefix: the steps of a long Adopt extend the
// prefix the step before found (adoptMatch) while its last node is in the
// tree, and match from the first block when it is gone; either way the
// nodes are those a match from the first block gives. A long Adopt run in
// steps of one block places every block.
func TestLongAdoptGoesOnFromItsPrefix(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil) // 2 units per block, 4 tokens
	c, err := New(Config{Layout: l, Tiers: threeTiers(16, 16, 64)})
	require.NoError(t, err)
	c.sliceUnits = 8 // a place budget of 1 unit: one block per step
	req := Request{Tokens: seqTokens(32, 100), Extra: []radix.ExtraKey{{Pos: 9, Value: 7}}}
	n, err := c.Adopt(req, 8, 3)
	require.NoError(t, err)
	require.Equal(t, 8, n)
	require.NoError(t, c.checkInvariants())

	keys := radix.Keys{}
	c.mu.Lock()
	_, all, err := c.match(&req)
	require.NoError(t, err)
	all = slices.Clone(all)
	require.Len(t, all, 8)
	known := slices.Clone(all[:3])
	got, err := c.adoptMatch(&req, keys, 8, known)
	require.NoError(t, err)
	require.Equal(t, all, got, "extended from the known prefix")
	got, err = c.adoptMatch(&req, keys, 5, slices.Clone(all[:3]))
	require.NoError(t, err)
	require.Equal(t, all[:5], got, "up to hi blocks")
	c.mu.Unlock()

	// The known prefix leaves the tree: the next step matches again.
	require.NoError(t, c.Clear())
	c.mu.Lock()
	got, err = c.adoptMatch(&req, keys, 8, slices.Clone(all[:3]))
	c.mu.Unlock()
	require.NoError(t, err)
	require.Empty(t, got, "the stale prefix is not trusted")
	n, err = c.Adopt(req, 8, 3)
	require.NoError(t, err)
	require.Equal(t, 8, n)
	require.NoError(t, c.checkInvariants())
}

// TestLongAdoptSeesItsOwnVictims: the steps of a long Adopt on a last tier
// too small for the prompt evict the blocks the steps before adopted, and
// the next step sees the prefix broken (Adopt goes on from the blocks a
// step saw whole only while no block has lost a unit since, see
// adoptProgress): Adopt returns how many blocks are whole from the first.
func TestLongAdoptSeesItsOwnVictims(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil) // 2 units per block, 4 tokens
	c, err := New(Config{Layout: l, Tiers: threeTiers(16, 16, 4)})
	require.NoError(t, err)
	c.sliceUnits = 4 // 8 units are long; a place budget of 1 unit: one block per step
	req := Request{Tokens: seqTokens(16, 100)}
	n, err := c.Adopt(req, 4, 3)
	require.NoError(t, err)
	require.NoError(t, c.checkInvariants())
	_, nodes, err := c.match(&req)
	require.NoError(t, err)
	require.Equal(t, c.wholePrefix(nodes), n)
	require.Zero(t, n, "the third block's step evicted the first block")
	require.Equal(t, uint64(2), c.Stats().Tier(3).Drops)
}
