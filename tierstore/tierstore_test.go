package tierstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/layout"
	"github.com/kvtier/kvtier/radix"
	"github.com/kvtier/kvtier/tierstore"
	"github.com/stretchr/testify/require"
)

const blockTokens = 4

func tinyLayout(t testing.TB) *layout.Layout {
	t.Helper()
	l, err := layout.New(layout.Model{Name: "tiny", Layers: 2, QueryHeads: 4, KVHeads: 2, HeadDim: 2, ElemBytes: 1}, layout.PagedLayer, blockTokens)
	require.NoError(t, err)
	return l
}

// server is one cache with its engine over its own memory and a shared
// store as tier 3.
type server struct {
	c   *kvcache.Cache
	e   *tierstore.Engine
	mem *kvcache.MemoryStore
}

func newServer(t testing.TB, store tierstore.Store, gpu, cpu, shared int64) *server {
	t.Helper()
	l := tinyLayout(t)
	tiers := []kvcache.TierConfig{{Capacity: kvcache.Capacity{Units: gpu}}, {Capacity: kvcache.Capacity{Units: cpu}},
		{Name: "shared", Capacity: kvcache.Capacity{Units: shared}}}
	mem, err := kvcache.NewMemoryStore(l, tiers[:2])
	require.NoError(t, err)
	e, err := tierstore.NewEngine(tierstore.EngineConfig{Memory: mem, Stores: map[kvcache.Tier]tierstore.Store{3: store}, Timeout: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(e.Close)
	c, err := kvcache.New(kvcache.Config{Layout: l, Tiers: tiers, Engine: e, HashSeed: 11})
	require.NoError(t, err)
	return &server{c: c, e: e, mem: mem}
}

// content is the byte at offset o of slice sl of the block with chain hash
// h: what any server computes for that block.
func content(h uint64, sl, o int) byte { return byte(h>>(8*(o%8))) ^ byte(sl*7+o) }

// serve runs req on s as a server would: adopt what the store holds, acquire,
// wait for the loads, compute what the plan and the failed loads say,
// check every block's bytes, commit and release. It returns the plan.
func (s *server) serve(t testing.TB, store tierstore.Store, req kvcache.Request) kvcache.Plan {
	t.Helper()
	ctx := context.Background()
	if store != nil {
		_, _ = tierstore.Lookup(ctx, store, s.c, req, 3)
	}
	plan, err := s.c.Acquire(req)
	require.NoError(t, err)
	keys, err := s.c.UnitKeys(nil, req)
	require.NoError(t, err)
	slices := s.c.Layout().UnitsPerBlock()
	write := func(r kvcache.TokenRange) {
		for sl := range slices {
			table, err := s.c.BlockTable(nil, plan.Seq, sl)
			require.NoError(t, err)
			for i := r.Start / blockTokens; i < (r.End+blockTokens-1)/blockTokens; i++ {
				buf := s.mem.Bytes(kvcache.GPU, s.c.SlicePool(sl), table[i])
				for o := range buf {
					buf[o] = content(keys[i*slices+sl].Hash, sl, o)
				}
			}
		}
	}
	// A fresh unit's slot may still be read by its victim's move down:
	// the server writes nothing before the sequence is ready.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	redo, err := s.c.WaitReady(wctx, plan.Seq, -1)
	require.NoError(t, err)
	for _, r := range append(plan.Compute, redo...) {
		write(r)
	}
	for sl := range slices {
		table, err := s.c.BlockTable(nil, plan.Seq, sl)
		require.NoError(t, err)
		for i := range len(req.Tokens) / blockTokens {
			buf := s.mem.Bytes(kvcache.GPU, s.c.SlicePool(sl), table[i])
			for o := range buf {
				if buf[o] != content(keys[i*slices+sl].Hash, sl, o) {
					t.Fatalf("block %d slice %d byte %d served wrong: %d, want %d", i, sl, o, buf[o], content(keys[i*slices+sl].Hash, sl, o))
				}
			}
		}
	}
	require.NoError(t, s.c.Commit(plan.Seq, len(req.Tokens)))
	require.NoError(t, s.c.Release(plan.Seq))
	return plan
}

// drain waits until s has no transfer in flight.
func (s *server) drain(t testing.TB) {
	t.Helper()
	for range 2000 {
		if _, err := s.c.Poll(); err != nil {
			t.Fatal(err)
		}
		if s.c.Stats().Transfers == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("transfers never drain")
}

func tokens(n int, base uint32) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = base + uint32(i)
	}
	return out
}

// pushDown serves filler prompts on s until its CPU's units have moved
// down to tier 3.
func (s *server) pushDown(t testing.TB, n int, base uint32) {
	for i := range n {
		s.serve(t, nil, kvcache.Request{Tokens: tokens(16, base+uint32(i)*1000)})
		s.drain(t)
	}
}

func TestTwoServersShareAPrefixThroughAStore(t *testing.T) {
	fp := tierstore.Fingerprint("tiny", tinyLayout(t), 11)
	store := tierstore.NewMemStore(fp)
	a := newServer(t, store, 8, 8, 64)
	prompt := kvcache.Request{Tokens: tokens(16, 1)}
	a.serve(t, store, prompt)
	a.pushDown(t, 2, 100000)
	require.Equal(t, uint64(8), a.c.Stats().Tier(3).MovedIn)
	require.GreaterOrEqual(t, store.Len(), 8)

	b := newServer(t, store, 8, 8, 64)
	plan := b.serve(t, store, prompt)
	require.Equal(t, 16, plan.ReusedTokens, "the second server loads the first one's prefix")
	st := b.c.Stats()
	require.Equal(t, uint64(8), st.Tier(3).Adopted)
	require.Zero(t, st.Tier(3).Missing+st.Tier(3).Corrupt)
	require.Equal(t, uint64(8), st.Onboards)

	// Another namespace reuses nothing.
	plan = b.serve(t, store, kvcache.Request{Tokens: prompt.Tokens, Namespace: "tenant-b"})
	require.Zero(t, plan.ReusedTokens)
}

func TestCorruptAndCollidingValuesAreNeverServed(t *testing.T) {
	fp := tierstore.Fingerprint("tiny", tinyLayout(t), 11)
	store := tierstore.NewMemStore(fp)
	a := newServer(t, store, 8, 8, 64)
	prompt := kvcache.Request{Tokens: tokens(16, 1)}
	a.serve(t, store, prompt)
	a.pushDown(t, 2, 100000)
	keys, err := a.c.UnitKeys(nil, prompt)
	require.NoError(t, err)
	// Block 1 slice 0: one payload byte flipped. Block 2 slice 1: the
	// value of a block with other tokens under the same hash (a forced
	// collision), with a valid checksum.
	v := store.Value(keys[2])
	require.NotNil(t, v)
	v[len(v)-9] ^= 1
	forged := keys[5]
	forged.Tokens = []uint32{9, 9, 9, 9}
	store.Set(keys[5], tierstore.Encode(nil, fp, forged, make([]byte, len(a.mem.Bytes(kvcache.GPU, 0, 0)))))

	b := newServer(t, store, 8, 8, 64)
	plan := b.serve(t, store, prompt) // checks every byte
	require.Equal(t, 16, plan.ReusedTokens)
	st := b.c.Stats().Tier(3)
	require.Positive(t, st.Corrupt)
	require.Positive(t, b.c.Stats().Tier(1).Failed)
}

func TestStoreDownThenBack(t *testing.T) {
	fp := tierstore.Fingerprint("tiny", tinyLayout(t), 11)
	store := tierstore.NewMemStore(fp)
	var down atomic.Bool
	store.Fail = func(string, []kvcache.UnitKey) error {
		if down.Load() {
			return errors.New("connection refused")
		}
		return nil
	}
	a := newServer(t, store, 8, 8, 64)
	prompt := kvcache.Request{Tokens: tokens(16, 1)}
	a.serve(t, store, prompt)
	a.pushDown(t, 2, 100000)
	b := newServer(t, store, 8, 8, 64)
	_, err := tierstore.Lookup(context.Background(), store, b.c, prompt, 3)
	require.NoError(t, err)
	down.Store(true)
	plan := b.serve(t, store, prompt) // the loads fail: recomputed, checked
	require.Equal(t, 16, plan.ReusedTokens)
	require.Equal(t, uint64(8), b.c.Stats().Tier(1).Failed)
	calls, failed := b.e.StoreCalls()
	require.Positive(t, failed)
	require.GreaterOrEqual(t, calls, failed)
	_, err = tierstore.Lookup(context.Background(), store, b.c, kvcache.Request{Tokens: tokens(16, 5)}, 3)
	require.ErrorIs(t, err, tierstore.ErrUnavailable)

	down.Store(false)
	c := newServer(t, store, 8, 8, 64)
	plan = c.serve(t, store, prompt)
	require.Equal(t, 16, plan.ReusedTokens)
	require.Zero(t, c.c.Stats().Tier(1).Failed, "the store back, loads succeed without a restart")
}

// TestRandomServersSharingAFlakyStore runs servers over one store that
// fails, loses and damages values at random; every byte every server
// reads is checked, and the caches' invariants hold.
func TestRandomServersSharingAFlakyStore(t *testing.T) {
	steps := 400
	if testing.Short() {
		steps = 100
	}
	for seed := range uint64(3) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 1))
			fp := tierstore.Fingerprint("tiny", tinyLayout(t), 11)
			store := tierstore.NewMemStore(fp)
			// The store fails on the engines' goroutines, with its own
			// generator.
			var (
				failMu   sync.Mutex
				failRate float64
				failRng  = rand.New(rand.NewPCG(seed, 2))
			)
			store.Fail = func(op string, keys []kvcache.UnitKey) error {
				failMu.Lock()
				defer failMu.Unlock()
				if failRng.Float64() < failRate {
					return fmt.Errorf("injected %s failure", op)
				}
				return nil
			}
			servers := []*server{newServer(t, store, 12, 8, 24), newServer(t, store, 12, 8, 24)}
			for step := range steps {
				failMu.Lock()
				failRate = []float64{0, 0, 0.1, 0.5}[rng.IntN(4)]
				failMu.Unlock()
				s := servers[rng.IntN(len(servers))]
				prefix := uint32(rng.IntN(6)) * 1000
				n := (1 + rng.IntN(4)) * blockTokens
				req := kvcache.Request{Tokens: append(tokens(8, prefix), tokens(n, prefix+500+uint32(rng.IntN(3))*50)...)}
				if rng.IntN(5) == 0 {
					req.Namespace = "other"
				}
				if rng.IntN(10) == 0 {
					// Damage or drop a random stored unit of the request.
					keys, err := s.c.UnitKeys(nil, req)
					require.NoError(t, err)
					k := keys[rng.IntN(len(keys))]
					if v := store.Value(k); v != nil {
						v = append([]byte(nil), v...)
						if rng.IntN(2) == 0 {
							v[rng.IntN(len(v))] ^= byte(1 + rng.IntN(255))
						} else {
							v = v[:rng.IntN(len(v))]
						}
						store.Set(k, v)
					}
				}
				s.serve(t, store, req)
				if step%10 == 0 {
					s.drain(t)
				}
			}
			for _, s := range servers {
				s.drain(t)
				st := s.c.Stats()
				t.Logf("adopted %d onboards %d failed loads %d corrupt %d missing %d", st.Tier(3).Adopted, st.Onboards, st.Tier(1).Failed, st.Tier(3).Corrupt, st.Tier(3).Missing)
			}
		})
	}
}

func TestEngineConfigAndClose(t *testing.T) {
	_, err := tierstore.NewEngine(tierstore.EngineConfig{})
	require.ErrorIs(t, err, tierstore.ErrInvalidConfig)
	l := tinyLayout(t)
	mem, err := kvcache.NewMemoryStore(l, kvcache.GPUAndCPU(kvcache.Capacity{Units: 4}, kvcache.Capacity{Units: 4}))
	require.NoError(t, err)
	_, err = tierstore.NewEngine(tierstore.EngineConfig{Memory: mem, Stores: map[kvcache.Tier]tierstore.Store{3: nil}})
	require.ErrorIs(t, err, tierstore.ErrInvalidConfig)
	_, err = tierstore.NewEngine(tierstore.EngineConfig{Memory: mem, MaxBatch: -1})
	require.ErrorIs(t, err, tierstore.ErrInvalidConfig)
	e, err := tierstore.NewEngine(tierstore.EngineConfig{Memory: mem, Stores: map[kvcache.Tier]tierstore.Store{3: tierstore.NewMemStore(1)}})
	require.NoError(t, err)
	done := make(chan error, 1)
	e.Start([]kvcache.Copy{{From: kvcache.CPU, To: 3}}, func(err error) { done <- err })
	require.ErrorIs(t, <-done, tierstore.ErrNoKey)
	e.Start([]kvcache.Copy{{From: kvcache.GPU, To: kvcache.CPU, ToSlot: 1}}, func(err error) { done <- err })
	require.NoError(t, <-done)
	e.Close()
	e.Close()
	e.Start(nil, func(err error) { done <- err })
	require.ErrorIs(t, <-done, tierstore.ErrClosed)
}

func TestCodec(t *testing.T) {
	k := kvcache.UnitKey{Shared: true, Hash: 42, Parent: 41, HasParent: true, Depth: 2, Slice: 1,
		Keys: radix.Keys{Namespace: "ns", LoRA: "l"}, Tokens: []uint32{1, 2, 3, 4}, Extra: []radix.ExtraKey{{Pos: 5, Value: 9}}}
	payload := []byte("0123456789abcdef")
	v := tierstore.Encode(nil, 7, k, payload)
	require.Len(t, v, tierstore.HeaderSize(k)+len(payload)+8)
	dst := make([]byte, len(payload))
	require.NoError(t, tierstore.Decode(v, 7, k, dst))
	require.Equal(t, payload, dst)
	other := func(f func(*kvcache.UnitKey)) kvcache.UnitKey {
		o := k
		o.Tokens = append([]uint32(nil), k.Tokens...)
		f(&o)
		return o
	}
	for name, o := range map[string]kvcache.UnitKey{
		"namespace": other(func(o *kvcache.UnitKey) { o.Keys.Namespace = "nt" }),
		"lora":      other(func(o *kvcache.UnitKey) { o.Keys.LoRA = "" }),
		"parent":    other(func(o *kvcache.UnitKey) { o.Parent = 40 }),
		"first":     other(func(o *kvcache.UnitKey) { o.HasParent = false }),
		"tokens":    other(func(o *kvcache.UnitKey) { o.Tokens[3] = 5 }),
		"extra":     other(func(o *kvcache.UnitKey) { o.Extra = nil }),
		"slice":     other(func(o *kvcache.UnitKey) { o.Slice = 0 }),
		"depth":     other(func(o *kvcache.UnitKey) { o.Depth = 3 }),
	} {
		require.ErrorIs(t, tierstore.Decode(v, 7, o, dst), kvcache.ErrUnitCorrupt, name)
	}
	require.ErrorIs(t, tierstore.Decode(v, 8, k, dst), kvcache.ErrUnitCorrupt, "fingerprint")
	require.ErrorIs(t, tierstore.Decode(v, 7, k, dst[:3]), kvcache.ErrUnitCorrupt, "size")
	for i := range v {
		bad := append([]byte(nil), v...)
		bad[i] ^= 0x10
		require.ErrorIs(t, tierstore.Decode(bad, 7, k, dst), kvcache.ErrUnitCorrupt, "byte %d flipped", i)
	}
	for n := range len(v) {
		require.ErrorIs(t, tierstore.Decode(v[:n], 7, k, dst), kvcache.ErrUnitCorrupt, "truncated to %d", n)
	}
	// A unit's Unit id does not name a shared unit: two caches give it
	// different ids.
	o := k
	o.Unit = 99
	require.NoError(t, tierstore.Decode(v, 7, o, dst))
	require.NotEqual(t, tierstore.Name(7, k, ':'), tierstore.Name(7, other(func(o *kvcache.UnitKey) { o.Keys.Namespace = "" }), ':'))
	require.NotEqual(t, tierstore.Name(7, k, ':'), tierstore.Name(8, k, ':'))
}

func TestNameOfLongKeys(t *testing.T) {
	long := string(make([]byte, 300))
	k := kvcache.UnitKey{Shared: true, Hash: 1, Keys: radix.Keys{Namespace: long, LoRA: long + "x"}}
	n := tierstore.Name(1, k, '/')
	require.Less(t, len(n), 120)
	for _, part := range strings.Split(n, "/") {
		require.LessOrEqual(t, len(part), 255)
	}
	k2 := k
	k2.Keys.Namespace = long + "y"
	require.NotEqual(t, n, tierstore.Name(1, k2, '/'))
}
