package tierstore_test

import (
	"bytes"
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
	"github.com/kvtier/kvtier/radix"
	"github.com/kvtier/kvtier/tierstore"
	"github.com/kvtier/kvtier/tierstore/storetest"
	"github.com/stretchr/testify/require"
)

func TestTwoServersShareAPrefixThroughAStore(t *testing.T) {
	fp := storetest.Fingerprint(t)
	store := tierstore.NewMemStore(fp)
	a := storetest.NewServer(t, storetest.Config{Store: store, GPU: 8, CPU: 8, Shared: 64})
	prompt := kvcache.Request{Tokens: storetest.Tokens(16, 1)}
	a.Serve(t, prompt)
	a.PushDown(t, 2, 100000)
	require.Equal(t, uint64(8), a.Cache.Stats().Tier(3).MovedIn)
	require.GreaterOrEqual(t, store.Len(), 8)

	b := storetest.NewServer(t, storetest.Config{Store: store, GPU: 8, CPU: 8, Shared: 64})
	plan := b.Serve(t, prompt)
	require.Equal(t, 16, plan.ReusedTokens, "the second server loads the first one's prefix")
	st := b.Cache.Stats()
	require.Equal(t, uint64(8), st.Tier(3).Adopted)
	require.Zero(t, st.Tier(3).Missing+st.Tier(3).Corrupt)
	require.Equal(t, uint64(8), st.Onboards)

	// Another namespace reuses nothing.
	plan = b.Serve(t, kvcache.Request{Tokens: prompt.Tokens, Namespace: "tenant-b"})
	require.Zero(t, plan.ReusedTokens)
}

// TestWriteThroughPublishesAtOnce: with write-through to the shared tier,
// a committed prefix is in the store as soon as the server's transfers
// are done, while it still holds it on its GPU; another server loads it.
func TestWriteThroughPublishesAtOnce(t *testing.T) {
	fp := storetest.Fingerprint(t)
	store := tierstore.NewMemStore(fp)
	a := storetest.NewServer(t, storetest.Config{Store: store, GPU: 16, CPU: 8, Shared: 64, WriteThrough: true})
	prompt := kvcache.Request{Tokens: storetest.Tokens(16, 1)}
	a.Serve(t, prompt)
	a.Drain(t)
	st := a.Cache.Stats()
	require.Equal(t, int64(8), st.Tier(kvcache.GPU).Cached, "the prefix stays on the GPU")
	require.Equal(t, uint64(8), st.Tier(3).BackupsWritten)
	require.Equal(t, 8, store.Len())

	b := storetest.NewServer(t, storetest.Config{Store: store, GPU: 16, CPU: 8, Shared: 64})
	plan := b.Serve(t, prompt)
	require.Equal(t, 16, plan.ReusedTokens)
	require.Equal(t, uint64(8), b.Cache.Stats().Onboards)

	// a evicts the prefix: its moves down to the backups cost no copy.
	a.PushDown(t, 3, 100000)
	st = a.Cache.Stats()
	require.Zero(t, st.Tier(3).Failed)
	plan = a.Serve(t, prompt)
	require.Equal(t, 16, plan.ReusedTokens)
}

// pushedDown returns a MemStore of deployment fp holding the 8 units of
// a 16-token prompt, which server a computed and pushed down to it, and
// their keys.
func pushedDown(t *testing.T) (fp uint64, store *tierstore.MemStore, a *storetest.Server, prompt kvcache.Request, keys []kvcache.UnitKey) {
	t.Helper()
	fp = storetest.Fingerprint(t)
	store = tierstore.NewMemStore(fp)
	a = storetest.NewServer(t, storetest.Config{Store: store, GPU: 8, CPU: 8, Shared: 64})
	prompt = kvcache.Request{Tokens: storetest.Tokens(16, 1)}
	a.Serve(t, prompt)
	a.PushDown(t, 2, 100000)
	keys, err := a.Cache.UnitKeys(nil, prompt)
	require.NoError(t, err)
	require.Len(t, keys, 8)
	return fp, store, a, prompt, keys
}

func TestCorruptAndCollidingValuesAreNeverServed(t *testing.T) {
	fp, store, a, prompt, keys := pushedDown(t)
	// Block 1 slice 0: one payload byte flipped. Block 2 slice 1: the
	// value of a block with other tokens under the same hash (a forced
	// collision), with a valid checksum.
	v := store.Value(keys[2])
	require.NotNil(t, v)
	v[len(v)-9] ^= 1
	forged := keys[5]
	forged.Tokens = []uint32{9, 9, 9, 9}
	store.Set(keys[5], tierstore.Encode(nil, fp, forged, make([]byte, len(a.Memory.Bytes(kvcache.GPU, 0, 0)))))

	b := storetest.NewServer(t, storetest.Config{Store: store, GPU: 8, CPU: 8, Shared: 64})
	plan := b.Serve(t, prompt) // checks every byte
	require.Equal(t, 16, plan.ReusedTokens)
	// Exactly the two damaged units fail and are recomputed: the engine
	// reports each unit's error (kvcache.CopyErrors), so the other 6
	// units of the transfers are kept.
	st := b.Cache.Stats()
	require.Equal(t, uint64(2), st.Tier(3).Corrupt)
	require.Zero(t, st.Tier(3).Missing)
	require.Equal(t, uint64(2), st.Tier(kvcache.GPU).Failed)
	require.Equal(t, uint64(8), st.Onboards, "counted as planned")
}

// TestAVanishedUnitCostsOneRecompute: a unit the store lost (as Redis's
// own eviction does) between the lookup and the load fails its own load
// only, and OnError hears of that one unit.
func TestAVanishedUnitCostsOneRecompute(t *testing.T) {
	_, store, _, prompt, keys := pushedDown(t)

	var mu sync.Mutex
	var reported []int
	var reportedErrs []error
	b := storetest.NewServer(t, storetest.Config{Store: store, GPU: 8, CPU: 8, Shared: 64,
		OnError: func(_ kvcache.Tier, units int, err error) {
			// (An engine goroutine: recorded, checked by the test's.)
			mu.Lock()
			defer mu.Unlock()
			reported, reportedErrs = append(reported, units), append(reportedErrs, err)
		}})
	_, err := tierstore.Lookup(context.Background(), store, b.Cache, prompt, 3)
	require.NoError(t, err)
	store.Delete(keys[3])
	plan := b.Serve(t, prompt) // checks every byte
	require.Equal(t, 16, plan.ReusedTokens)
	st := b.Cache.Stats()
	require.Equal(t, uint64(1), st.Tier(3).Missing)
	require.Equal(t, uint64(1), st.Tier(kvcache.GPU).Failed, "the other 7 loads are kept")
	require.Equal(t, uint64(8), st.Onboards)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int{1}, reported)
	require.ErrorIs(t, reportedErrs[0], kvcache.ErrUnitMissing)
}

func TestStoreDownThenBack(t *testing.T) {
	fp := storetest.Fingerprint(t)
	store := tierstore.NewMemStore(fp)
	var down atomic.Bool
	store.Fail = func(string, []kvcache.UnitKey) error {
		if down.Load() {
			return errors.New("connection refused")
		}
		return nil
	}
	a := storetest.NewServer(t, storetest.Config{Store: store, GPU: 8, CPU: 8, Shared: 64})
	prompt := kvcache.Request{Tokens: storetest.Tokens(16, 1)}
	a.Serve(t, prompt)
	a.PushDown(t, 2, 100000)
	b := storetest.NewServer(t, storetest.Config{Store: store, GPU: 8, CPU: 8, Shared: 64})
	_, err := tierstore.Lookup(context.Background(), store, b.Cache, prompt, 3)
	require.NoError(t, err)
	down.Store(true)
	plan := b.Serve(t, prompt) // the loads fail: recomputed, checked
	require.Equal(t, 16, plan.ReusedTokens)
	require.Equal(t, uint64(8), b.Cache.Stats().Tier(1).Failed)
	calls, failed := b.Engine.StoreCalls()
	require.Positive(t, failed)
	require.GreaterOrEqual(t, calls, failed)
	_, err = tierstore.Lookup(context.Background(), store, b.Cache, kvcache.Request{Tokens: storetest.Tokens(16, 5)}, 3)
	require.ErrorIs(t, err, tierstore.ErrUnavailable)

	down.Store(false)
	c := storetest.NewServer(t, storetest.Config{Store: store, GPU: 8, CPU: 8, Shared: 64})
	plan = c.Serve(t, prompt)
	require.Equal(t, 16, plan.ReusedTokens)
	require.Zero(t, c.Cache.Stats().Tier(1).Failed, "the store back, loads succeed without a restart")
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
			fp := storetest.Fingerprint(t)
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
				if op == "get" && failRng.IntN(20) == 0 {
					// The store evicts a unit between the lookup and
					// the load.
					store.Delete(keys[failRng.IntN(len(keys))])
				}
				return nil
			}
			servers := []*storetest.Server{storetest.NewServer(t, storetest.Config{Store: store, GPU: 12, CPU: 8, Shared: 24, WriteThrough: true}), storetest.NewServer(t, storetest.Config{Store: store, GPU: 12, CPU: 8, Shared: 24})}
			for step := range steps {
				failMu.Lock()
				failRate = []float64{0, 0, 0.1, 0.5}[rng.IntN(4)]
				failMu.Unlock()
				s := servers[rng.IntN(len(servers))]
				prefix := uint32(rng.IntN(6)) * 1000
				n := (1 + rng.IntN(4)) * storetest.BlockTokens
				req := kvcache.Request{Tokens: append(storetest.Tokens(8, prefix), storetest.Tokens(n, prefix+500+uint32(rng.IntN(3))*50)...)}
				if rng.IntN(5) == 0 {
					req.Namespace = "other"
				}
				if rng.IntN(10) == 0 {
					// Damage or drop a random stored unit of the request.
					keys, err := s.Cache.UnitKeys(nil, req)
					require.NoError(t, err)
					k := keys[rng.IntN(len(keys))]
					// A value truncated to nothing earlier is left as
					// it is: there is no byte to damage.
					if v := store.Value(k); len(v) > 0 {
						v = append([]byte(nil), v...)
						if rng.IntN(3) == 0 {
							store.Delete(k)
						} else if rng.IntN(2) == 0 {
							v[rng.IntN(len(v))] ^= byte(1 + rng.IntN(255))
						} else {
							v = v[:rng.IntN(len(v))]
						}
						if store.Value(k) != nil {
							store.Set(k, v)
						}
					}
				}
				s.Serve(t, req)
				if step%10 == 0 {
					s.Drain(t)
				}
			}
			for _, s := range servers {
				s.Drain(t)
				st := s.Cache.Stats()
				t.Logf("adopted %d onboards %d failed loads %d corrupt %d missing %d", st.Tier(3).Adopted, st.Onboards, st.Tier(1).Failed, st.Tier(3).Corrupt, st.Tier(3).Missing)
			}
		})
	}
}

func TestEngineConfigAndClose(t *testing.T) {
	_, err := tierstore.NewEngine(tierstore.EngineConfig{})
	require.ErrorIs(t, err, tierstore.ErrInvalidConfig)
	l := storetest.Layout(t)
	mem, err := kvcache.NewMemoryStore(l, kvcache.GPUAndCPU(kvcache.Capacity{Units: 4}, kvcache.Capacity{Units: 4}))
	require.NoError(t, err)
	_, err = tierstore.NewEngine(tierstore.EngineConfig{Memory: mem, Stores: map[kvcache.Tier]tierstore.Store{3: nil}})
	require.ErrorIs(t, err, tierstore.ErrInvalidConfig)
	_, err = tierstore.NewEngine(tierstore.EngineConfig{Memory: mem, MaxBatch: -1})
	require.ErrorIs(t, err, tierstore.ErrInvalidConfig)
	// A Store for a tier Memory holds (the GPU, the CPU) would take its
	// copies, and every load from that tier would fail; tier 0 and tiers
	// past MaxTiers are no tiers.
	for _, tier := range []kvcache.Tier{kvcache.Dropped, kvcache.GPU, kvcache.CPU, kvcache.MaxTiers + 1} {
		_, err = tierstore.NewEngine(tierstore.EngineConfig{Memory: mem, Stores: map[kvcache.Tier]tierstore.Store{tier: tierstore.NewMemStore(1)}})
		require.ErrorIs(t, err, tierstore.ErrInvalidConfig, "tier %d", tier)
		require.ErrorContains(t, err, fmt.Sprintf("tier %d", tier))
	}
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

// TestEngineReportsEachCopy drives an Engine directly over two stores
// (tiers 3 and 4) and memory: a unit missing from tier 3 fails its own
// copy, in a memory load and in a store-to-store move (whose other units
// reach tier 4); a store that is down fails its batch and every copy
// after it, untried.
func TestEngineReportsEachCopy(t *testing.T) {
	l := storetest.Layout(t)
	mem, err := kvcache.NewMemoryStore(l, kvcache.GPUAndCPU(kvcache.Capacity{Units: 8}, kvcache.Capacity{Units: 8}))
	require.NoError(t, err)
	s3, s4 := tierstore.NewMemStore(1), tierstore.NewMemStore(1)
	e, err := tierstore.NewEngine(tierstore.EngineConfig{Memory: mem, Stores: map[kvcache.Tier]tierstore.Store{3: s3, 4: s4}, MaxBatch: 2})
	require.NoError(t, err)
	defer e.Close()
	run := func(copies []kvcache.Copy, keys []kvcache.UnitKey) error {
		done := make(chan error, 1)
		e.StartKeyed(copies, keys, func(err error) { done <- err })
		return <-done
	}
	keys := make([]kvcache.UnitKey, 5)
	size := len(mem.Bytes(kvcache.GPU, 0, 0))
	for i := range keys {
		keys[i] = kvcache.UnitKey{Shared: true, Hash: uint64(100 + i), Depth: 1, Tokens: []uint32{uint32(i)}}
		v := bytes.Repeat([]byte{byte(i + 1)}, size)
		if i != 2 {
			require.NoError(t, s3.Put(context.Background(), keys[i:i+1], [][]byte{v}))
		}
	}
	// Loads of units 0-4 into GPU slots 0-4, in batches of 2: unit 2 is
	// missing.
	var loads []kvcache.Copy
	for i := range keys {
		loads = append(loads, kvcache.Copy{From: 3, To: kvcache.GPU, ToSlot: int32(i)})
	}
	err = run(loads, keys)
	var errs kvcache.CopyErrors
	require.ErrorAs(t, err, &errs)
	require.Len(t, errs, 5)
	for i, err := range errs {
		if i == 2 {
			require.ErrorIs(t, err, kvcache.ErrUnitMissing)
			continue
		}
		require.NoError(t, err, "copy %d", i)
		require.Equal(t, bytes.Repeat([]byte{byte(i + 1)}, size), mem.Bytes(kvcache.GPU, 0, int32(i)))
	}
	// The same units moved from tier 3 to tier 4.
	moves := make([]kvcache.Copy, len(keys))
	for i := range moves {
		moves[i] = kvcache.Copy{From: 3, To: 4, FromSlot: int32(i), ToSlot: int32(i)}
	}
	err = run(moves, keys)
	require.ErrorAs(t, err, &errs)
	require.ErrorIs(t, errs[2], kvcache.ErrUnitMissing)
	require.Len(t, errs.Unwrap(), 1)
	require.Equal(t, 4, s4.Len(), "the units read were stored")
	for i := range keys {
		if i == 2 {
			continue
		}
		got := [][]byte{make([]byte, size)}
		require.NoError(t, s4.Get(context.Background(), keys[i:i+1], got))
		require.Equal(t, bytes.Repeat([]byte{byte(i + 1)}, size), got[0], "unit %d on tier 4", i)
	}

	// Tier 4 refuses the Puts of a store-to-store move: each batch fails
	// whole, with the Put's error (the one whose Get missed unit 2 too).
	// Each Put waits until all three have begun (or a second passed), so
	// that no batch fails before the last one starts: the engine starts
	// a transfer's batches at once (Parallel 4), and one that began after
	// a failure would not be tried.
	var puts atomic.Int32
	allBegun := make(chan struct{})
	s4.Fail = func(op string, _ []kvcache.UnitKey) error {
		if op == "put" {
			if puts.Add(1) == 3 {
				close(allBegun)
			}
			select {
			case <-allBegun:
			case <-time.After(time.Second):
			}
			return errors.New("OOM command not allowed")
		}
		return nil
	}
	err = run(moves, keys)
	require.ErrorAs(t, err, &errs)
	require.Len(t, errs.Unwrap(), 5)
	for i, err := range errs {
		require.ErrorIs(t, err, tierstore.ErrUnavailable, "copy %d", i)
		require.ErrorContains(t, err, "OOM", "copy %d", i)
	}
	require.Equal(t, int32(3), puts.Load(), "3 batches (MaxBatch 2), all started at once (Parallel 4)")
	s4.Fail = nil

	// Tier 3 down: its batch fails, and so does the memory copy after it.
	s3.Fail = func(string, []kvcache.UnitKey) error { return errors.New("connection refused") }
	err = run([]kvcache.Copy{loads[0], {From: kvcache.GPU, To: kvcache.CPU}}, append(keys[:1:1], kvcache.UnitKey{}))
	require.ErrorAs(t, err, &errs)
	require.Len(t, errs.Unwrap(), 2)
	require.ErrorContains(t, errs[1], "not tried")
}

// TestEngineStopsAtAStoreThatIsDown: with one call at a time, a store
// that is down is called once per transfer, not once per batch; a store
// that reports an unavailable unit among others (a kvcache.CopyErrors)
// stops the transfer too, and a CopyErrors without an error is success.
func TestEngineStopsAtAStoreThatIsDown(t *testing.T) {
	l := storetest.Layout(t)
	mem, err := kvcache.NewMemoryStore(l, kvcache.GPUAndCPU(kvcache.Capacity{Units: 8}, kvcache.Capacity{Units: 8}))
	require.NoError(t, err)
	var calls atomic.Int32
	var reply atomic.Value // func(n int) error
	store := funcStore{get: func(keys []kvcache.UnitKey) error {
		calls.Add(1)
		return reply.Load().(func(int) error)(len(keys))
	}}
	e, err := tierstore.NewEngine(tierstore.EngineConfig{Memory: mem, Stores: map[kvcache.Tier]tierstore.Store{3: store}, MaxBatch: 2, Parallel: 1})
	require.NoError(t, err)
	defer e.Close()
	copies := make([]kvcache.Copy, 6)
	keys := make([]kvcache.UnitKey, 6)
	for i := range copies {
		copies[i] = kvcache.Copy{From: 3, To: kvcache.GPU, ToSlot: int32(i)}
		keys[i] = kvcache.UnitKey{Shared: true, Hash: uint64(i), Depth: 1}
	}
	run := func() kvcache.CopyErrors {
		calls.Store(0)
		done := make(chan error, 1)
		e.StartKeyed(copies, keys, func(err error) { done <- err })
		err := <-done
		if err == nil {
			return nil
		}
		var errs kvcache.CopyErrors
		require.ErrorAs(t, err, &errs)
		return errs
	}

	reply.Store(func(int) error { return fmt.Errorf("%w: connection refused", tierstore.ErrUnavailable) })
	errs := run()
	require.Equal(t, int32(1), calls.Load(), "the batches after the first are not tried")
	require.Len(t, errs.Unwrap(), 6)
	require.ErrorContains(t, errs[5], "not tried")

	reply.Store(func(n int) error {
		var errs kvcache.CopyErrors
		return errs.Set(1, n, fmt.Errorf("%w: one connection reset", tierstore.ErrUnavailable))
	})
	errs = run()
	require.Equal(t, int32(1), calls.Load())
	require.NoError(t, errs[0], "the unit the store read")
	require.ErrorIs(t, errs[1], tierstore.ErrUnavailable)
	require.ErrorContains(t, errs[2], "not tried")

	reply.Store(func(n int) error {
		var errs kvcache.CopyErrors
		return errs.Set(0, n, fmt.Errorf("%w: evicted", kvcache.ErrUnitMissing))
	})
	errs = run()
	require.Equal(t, int32(3), calls.Load(), "a missing unit stops nothing")
	require.Len(t, errs.Unwrap(), 3)

	reply.Store(func(n int) error { return fmt.Errorf("wrapped: %w", make(kvcache.CopyErrors, n)) })
	require.Nil(t, run(), "a CopyErrors without an error, even wrapped, is success")
	require.Equal(t, int32(3), calls.Load())
}

// funcStore is a Store whose Get answers with get (writing nothing).
type funcStore struct {
	get func(keys []kvcache.UnitKey) error
}

func (s funcStore) Put(context.Context, []kvcache.UnitKey, [][]byte) error { return nil }
func (s funcStore) Get(_ context.Context, keys []kvcache.UnitKey, _ [][]byte) error {
	return s.get(keys)
}
func (s funcStore) Contains(_ context.Context, keys []kvcache.UnitKey) ([]bool, error) {
	return make([]bool, len(keys)), nil
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

func TestMemStoreConformance(t *testing.T) {
	stores := map[uint64]*tierstore.MemStore{}
	storetest.TestStore(t, func(t *testing.T, fp uint64) tierstore.Store {
		if s, ok := stores[fp]; ok {
			return s
		}
		stores[fp] = tierstore.NewMemStore(fp)
		return stores[fp]
	})
}
