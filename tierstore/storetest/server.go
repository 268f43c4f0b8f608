package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/layout"
	"github.com/kvtier/kvtier/tierstore"
)

// BlockTokens is the token block of Layout.
const BlockTokens = 4

// HashSeed is the hash seed of every Server's cache.
const HashSeed = 11

// Layout returns the small layout every Server uses: two layers, paged
// per layer (two units of 32 bytes per block of BlockTokens tokens).
func Layout(t testing.TB) *layout.Layout {
	t.Helper()
	l, err := layout.New(layout.Model{Name: "tiny", Layers: 2, QueryHeads: 4, KVHeads: 2, HeadDim: 2, ElemBytes: 1}, layout.PagedLayer, BlockTokens)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Fingerprint is the deployment fingerprint of every Server.
func Fingerprint(t testing.TB) uint64 { return tierstore.Fingerprint("tiny", Layout(t), HashSeed) }

// Config sizes a Server: its tiers in units, and whether the shared tier
// (tier 3, on Store) is written through.
type Config struct {
	Store            tierstore.Store
	GPU, CPU, Shared int64
	WriteThrough     bool
	Timeout          time.Duration // the engine's; 0 means 2 s
	OnError          func(kvcache.Tier, int, error)
	NoLookup         bool // Serve does not call tierstore.Lookup
	LookupTimeout    time.Duration
}

// Server is one cache over its own GPU and CPU memory and a store as tier
// 3, moved by a tierstore.Engine.
type Server struct {
	Cache  *kvcache.Cache
	Engine *tierstore.Engine
	Memory *kvcache.MemoryStore
	cfg    Config
}

// NewServer builds a Server; the engine is closed when the test ends.
func NewServer(t testing.TB, cfg Config) *Server {
	t.Helper()
	l := Layout(t)
	tiers := []kvcache.TierConfig{{Capacity: kvcache.Capacity{Units: cfg.GPU}}, {Capacity: kvcache.Capacity{Units: cfg.CPU}},
		{Name: "shared", Capacity: kvcache.Capacity{Units: cfg.Shared}, WriteThrough: cfg.WriteThrough}}
	mem, err := kvcache.NewMemoryStore(l, tiers[:2])
	if err != nil {
		t.Fatal(err)
	}
	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = 2 * time.Second
	}
	e, err := tierstore.NewEngine(tierstore.EngineConfig{Memory: mem, Stores: map[kvcache.Tier]tierstore.Store{3: cfg.Store},
		Timeout: timeout, OnError: cfg.OnError})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	c, err := kvcache.New(kvcache.Config{Layout: l, Tiers: tiers, Engine: e, HashSeed: HashSeed})
	if err != nil {
		t.Fatal(err)
	}
	return &Server{Cache: c, Engine: e, Memory: mem, cfg: cfg}
}

// Content is the byte at offset o of slice sl of the block with chain
// hash h: what any server computes for that block.
func Content(h uint64, sl, o int) byte { return byte(h>>(8*(o%8))) ^ byte(sl*7+o) }

// Tokens returns n tokens from base.
func Tokens(n int, base uint32) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = base + uint32(i)
	}
	return out
}

// Serve runs req as a server would: it asks the store what it holds
// (tierstore.Lookup, whose error it ignores: the request is served
// anyway), acquires, waits for the loads, computes (writes Content into)
// what the plan and the failed loads say, checks every byte of every full
// block, commits and releases. It returns the plan.
func (s *Server) Serve(t testing.TB, req kvcache.Request) kvcache.Plan {
	t.Helper()
	ctx := context.Background()
	if !s.cfg.NoLookup {
		lctx, cancel := context.WithTimeout(ctx, max(s.cfg.LookupTimeout, time.Second))
		_, _ = tierstore.Lookup(lctx, s.cfg.Store, s.Cache, req, 3)
		cancel()
	}
	c := s.Cache
	plan, err := c.Acquire(req)
	if errors.Is(err, kvcache.ErrNoSpace) {
		// Units in flight (backups being written) are not evictable:
		// a server waits for its transfers and tries again.
		s.Drain(t)
		plan, err = c.Acquire(req)
	}
	if err != nil {
		t.Fatal(err)
	}
	keys, err := c.UnitKeys(nil, req)
	if err != nil {
		t.Fatal(err)
	}
	slices := c.Layout().UnitsPerBlock()
	// A fresh unit's slot may still be read by its victim's move down:
	// the server writes nothing before the sequence is ready.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	redo, err := c.WaitReady(wctx, plan.Seq, -1)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range append(plan.Compute, redo...) {
		for sl := range slices {
			table, err := c.BlockTable(nil, plan.Seq, sl)
			if err != nil {
				t.Fatal(err)
			}
			for i := r.Start / BlockTokens; i < (r.End+BlockTokens-1)/BlockTokens; i++ {
				buf := s.Memory.Bytes(kvcache.GPU, c.SlicePool(sl), table[i])
				for o := range buf {
					buf[o] = Content(keys[i*slices+sl].Hash, sl, o)
				}
			}
		}
	}
	for sl := range slices {
		table, err := c.BlockTable(nil, plan.Seq, sl)
		if err != nil {
			t.Fatal(err)
		}
		for i := range len(req.Tokens) / BlockTokens {
			buf := s.Memory.Bytes(kvcache.GPU, c.SlicePool(sl), table[i])
			for o := range buf {
				if want := Content(keys[i*slices+sl].Hash, sl, o); buf[o] != want {
					t.Fatalf("block %d slice %d byte %d served wrong: %d, want %d", i, sl, o, buf[o], want)
				}
			}
		}
	}
	if err := c.Commit(plan.Seq, len(req.Tokens)); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(plan.Seq); err != nil {
		t.Fatal(err)
	}
	return plan
}

// Drain waits until the server has no transfer in flight.
func (s *Server) Drain(t testing.TB) {
	t.Helper()
	for range 30000 {
		if _, err := s.Cache.Poll(); err != nil {
			t.Fatal(err)
		}
		if s.Cache.Stats().Transfers == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("transfers never drain")
}

// PushDown serves n filler prompts of 16 tokens (from base, 1000 apart)
// without lookups, draining after each, so that what the server held
// moves down its tiers.
func (s *Server) PushDown(t testing.TB, n int, base uint32) {
	t.Helper()
	lookup := s.cfg.NoLookup
	s.cfg.NoLookup = true
	defer func() { s.cfg.NoLookup = lookup }()
	for i := range n {
		s.Serve(t, kvcache.Request{Tokens: Tokens(16, base+uint32(i)*1000)})
		s.Drain(t)
	}
}
