package redisstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kvtier/kvtier/internal/cputime"
	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/layout"
	"github.com/kvtier/kvtier/tierstore"
)

// countingStore counts the Contains calls and keys that reach its store.
type countingStore struct {
	tierstore.Store
	calls, keys int
}

func (s *countingStore) Contains(ctx context.Context, keys []kvcache.UnitKey) ([]bool, error) {
	s.calls++
	s.keys += len(keys)
	return s.Store.Contains(ctx, keys)
}

// BenchmarkLookup looks up a 32k-token prompt (seed model, paged per
// layer, 16-token blocks: 2,048 blocks, 57,344 units) that a shared store
// holds whole: in process memory (memstore: a store that does no I/O) and
// against the loopback redis-servers that scripts/redis.sh starts (single,
// cluster). probe is tierstore.Lookup; all-units asks about every unit of
// the prompt in one Contains call and adopts its longest whole prefix, as
// Lookup did before it probed. With held, the cache holds the prompt
// already (the common case of a server that asks before every request);
// with new, it holds none of it (Clear, untimed, between lookups), so the
// lookup adopts every block; adopt-only is that Adopt alone, without a
// query. The "-blockkeys" modes run on a cache with one policy key per
// block (kvcache.Config.BlockKeys). Reported per lookup: keys and Contains calls, the process's CPU
// time (cpu-µs: the Redis client's goroutines and the garbage collector
// included, the server not), and wall time (ns/op).
func BenchmarkLookup(b *testing.B) {
	l, err := layout.New(layout.SeedModel(), layout.PagedLayer, 16)
	if err != nil {
		b.Fatal(err)
	}
	prompt := make([]uint32, 32<<10)
	for i := range prompt {
		prompt[i] = uint32(i*7 + 3)
	}
	req := kvcache.Request{Tokens: prompt}
	tiers := kvcache.GPUAndCPU(kvcache.Capacity{Units: 28 * 64}, kvcache.Capacity{Units: 28 * 64})
	tiers = append(tiers, kvcache.TierConfig{Name: "shared", Capacity: kvcache.Capacity{Units: 28 * 4096}})
	c, err := kvcache.New(kvcache.Config{Layout: l, Tiers: tiers})
	if err != nil {
		b.Fatal(err)
	}
	// cb is the same cache with one policy key per block (BlockKeys).
	cb, err := kvcache.New(kvcache.Config{Layout: l, Tiers: tiers, BlockKeys: true})
	if err != nil {
		b.Fatal(err)
	}
	keys, err := c.UnitKeys(nil, req)
	if err != nil {
		b.Fatal(err)
	}
	blocks := len(keys) / l.UnitsPerBlock()
	fill := func(s tierstore.Store) {
		values := make([][]byte, len(keys))
		for i := range values {
			values[i] = []byte{byte(i)}
		}
		for i := 0; i < len(keys); i += 4096 {
			end := min(i+4096, len(keys))
			if err := s.Put(context.Background(), keys[i:end], values[i:end]); err != nil {
				b.Fatal(err)
			}
		}
	}
	stores := []struct {
		name string
		open func(b *testing.B) tierstore.Store
	}{
		{"memstore", func(b *testing.B) tierstore.Store { return tierstore.NewMemStore(1) }},
	}
	for _, srv := range []string{"single", "cluster"} {
		stores = append(stores, struct {
			name string
			open func(b *testing.B) tierstore.Store
		}{srv, func(b *testing.B) tierstore.Store {
			for _, s := range servers(b) {
				if s.name == srv {
					return open(b, s, prefix(b, s), 1)
				}
			}
			b.Fatalf("no server %s", srv)
			return nil
		}})
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			store := st.open(b)
			fill(store)
			for _, mode := range []string{"probe/held", "probe/new", "all-units/held", "all-units/new", "adopt-only",
				"probe/new-blockkeys", "adopt-only-blockkeys"} {
				b.Run(mode, func(b *testing.B) {
					c := c
					if m, ok := strings.CutSuffix(mode, "-blockkeys"); ok {
						c, mode = cb, m
					}
					cs := &countingStore{Store: store}
					var cpu time.Duration
					reset := func() {
						if mode == "probe/held" || mode == "all-units/held" {
							if n, err := c.HeldBlocks(req); err == nil && n == blocks {
								return
							}
						}
						if err := c.Clear(); err != nil {
							b.Fatal(err)
						}
						if mode == "probe/held" || mode == "all-units/held" {
							if _, err := c.Adopt(req, blocks, 3); err != nil {
								b.Fatal(err)
							}
						}
					}
					reset()
					b.ReportAllocs()
					b.ResetTimer()
					for range b.N {
						b.StopTimer()
						reset()
						b.StartTimer()
						c0, _ := cputime.Process()
						n, err := lookup(mode, cs, c, req)
						c1, _ := cputime.Process()
						cpu += c1 - c0
						if err != nil {
							b.Fatal(err)
						}
						if n != blocks {
							b.Fatalf("found %d blocks, want %d", n, blocks)
						}
					}
					b.ReportMetric(float64(cs.keys)/float64(b.N), "keys/op")
					b.ReportMetric(float64(cs.calls)/float64(b.N), "calls/op")
					b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
				})
			}
		})
	}
}

// lookup is tierstore.Lookup (probe), or what it did before it probed
// (all-units): one key per unit of the prompt, one Contains call, the
// longest prefix of whole blocks adopted.
func lookup(mode string, s tierstore.Store, c *kvcache.Cache, req kvcache.Request) (int, error) {
	ctx := context.Background()
	switch mode {
	case "probe/held", "probe/new":
		return tierstore.Lookup(ctx, s, c, req, 3)
	case "adopt-only":
		pk, err := c.PromptKeys(req)
		if err != nil {
			return 0, err
		}
		return c.Adopt(req, pk.Blocks(), 3)
	}
	keys, err := c.UnitKeys(nil, req)
	if err != nil {
		return 0, err
	}
	have, err := s.Contains(ctx, keys)
	if err != nil {
		return 0, err
	}
	slices := c.Layout().UnitsPerBlock()
	blocks := 0
	for blocks*slices < len(keys) {
		whole := true
		for _, h := range have[blocks*slices : (blocks+1)*slices] {
			whole = whole && h
		}
		if !whole {
			break
		}
		blocks++
	}
	return c.Adopt(req, blocks, 3)
}
