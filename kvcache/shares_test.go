package kvcache_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/layout"
)

// sharesLayout is a small all-layers layout with 4-token blocks: one unit
// per block, so a tier's slots are its blocks.
func sharesLayout(t testing.TB) *layout.Layout {
	l, err := layout.New(layout.Model{Name: "tiny", Layers: 2, QueryHeads: 2, KVHeads: 1, HeadDim: 4, ElemBytes: 2}, layout.AllLayers, 4)
	require.NoError(t, err)
	return l
}

// sharesCache returns a cache with a GPU of gpu blocks and a CPU of cpu
// blocks with the given shares (none when nil), events on.
func sharesCache(t testing.TB, gpu, cpu int, shares []kvcache.Share) *kvcache.Cache {
	tiers := kvcache.GPUAndCPU(kvcache.Capacity{Units: int64(gpu)}, kvcache.Capacity{Units: int64(cpu)})
	tiers[1].Shares = shares
	c, err := kvcache.New(kvcache.Config{Layout: sharesLayout(t), Tiers: tiers, EventBuffer: 1 << 16})
	require.NoError(t, err)
	return c
}

// serveOne runs a prompt of namespace ns through c (acquire, commit,
// release) and returns the tokens it reused.
func serveOne(t testing.TB, c *kvcache.Cache, ns string, prompt []uint32) int {
	p, err := c.Acquire(kvcache.Request{Tokens: prompt, Namespace: ns})
	require.NoError(t, err)
	require.NoError(t, c.Commit(p.Seq, len(prompt)))
	require.NoError(t, c.Release(p.Seq))
	return p.ReusedTokens
}

// prompt returns n blocks of 4 tokens starting at token base.
func prompt(base, blocks int) []uint32 {
	p := make([]uint32, 4*blocks)
	for i := range p {
		p[i] = uint32(base + i)
	}
	return p
}

// shareOf returns the ShareStats of namespace ns on the CPU.
func shareOf(t testing.TB, c *kvcache.Cache, ns string) kvcache.ShareStats {
	for _, s := range c.Stats().Tiers[1].Shares {
		if s.Namespace == ns {
			return s
		}
	}
	t.Fatalf("no share of namespace %q", ns)
	return kvcache.ShareStats{}
}

func TestSharesConfigErrors(t *testing.T) {
	l := sharesLayout(t)
	for _, tc := range []struct {
		name   string
		mutate func(cfg *kvcache.Config)
		want   string
	}{
		{"with block keys", func(cfg *kvcache.Config) { cfg.BlockKeys = true }, "BlockKeys"},
		{"negative reserve", func(cfg *kvcache.Config) { cfg.Tiers[1].Shares[0].Reserve = -0.1 }, "Reserve -0.1"},
		{"NaN reserve", func(cfg *kvcache.Config) { cfg.Tiers[1].Shares[0].Reserve = math.NaN() }, "Reserve NaN"},
		{"cap above 1", func(cfg *kvcache.Config) { cfg.Tiers[1].Shares[0].Cap = 1.5 }, "Cap 1.5"},
		{"cap below reserve", func(cfg *kvcache.Config) { cfg.Tiers[1].Shares[0].Cap = 0.2 }, "Cap 0.2"},
		{"twice", func(cfg *kvcache.Config) {
			cfg.Tiers[1].Shares = append(cfg.Tiers[1].Shares, kvcache.Share{Namespace: "a"})
		}, `two Shares for namespace "a"`},
		{"over the tier", func(cfg *kvcache.Config) {
			cfg.Tiers[1].Shares = append(cfg.Tiers[1].Shares, kvcache.Share{Namespace: "b", Reserve: 0.7})
		}, "more than 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tiers := kvcache.GPUAndCPU(kvcache.Capacity{Units: 8}, kvcache.Capacity{Units: 8})
			tiers[1].Shares = []kvcache.Share{{Namespace: "a", Reserve: 0.4, Cap: 0.5}}
			cfg := kvcache.Config{Layout: l, Tiers: tiers}
			tc.mutate(&cfg)
			_, err := kvcache.New(cfg)
			require.ErrorIs(t, err, kvcache.ErrInvalidConfig)
			require.ErrorContains(t, err, tc.want)
		})
	}
	// A failing factory is named with the namespace it was building for.
	tiers := kvcache.GPUAndCPU(kvcache.Capacity{Units: 8}, kvcache.Capacity{Units: 8})
	calls := 0
	tiers[1].Policy = func(info kvcache.PoolInfo) (eviction.Policy[kvcache.UnitID], error) {
		if calls++; calls > 1 {
			return nil, errors.New("no more")
		}
		return kvcache.LRUPolicy()(info)
	}
	tiers[1].Shares = []kvcache.Share{{Namespace: "a"}}
	_, err := kvcache.New(kvcache.Config{Layout: l, Tiers: tiers})
	require.ErrorIs(t, err, kvcache.ErrInvalidConfig)
	require.ErrorContains(t, err, `namespace "a": no more`)
}

// TestQuietTenantKeepsItsReservation: a quiet namespace caches 8 blocks,
// which the GPU pushes down to the CPU; then a noisy one sends 200 new
// prompts. With a reservation of half the CPU (8 of 16 blocks), the quiet
// namespace keeps all 8 there through the flood (not one of its units is
// evicted), whether the noisy namespace has no share or a reservation of
// the other half (then neither is above its reservation when the CPU is
// full, and the noisy one's units make room for its own), and reuses its
// prompts whole afterwards; without shares, the flood evicts them all and
// it reuses nothing.
func TestQuietTenantKeepsItsReservation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		shares []kvcache.Share
	}{
		{"no shares", nil},
		{"quiet reserved", []kvcache.Share{{Namespace: "quiet", Reserve: 0.5}}},
		{"both reserved", []kvcache.Share{{Namespace: "quiet", Reserve: 0.5}, {Namespace: "noisy", Reserve: 0.5}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := sharesCache(t, 8, 16, tc.shares)
			quiet := [][]uint32{prompt(0, 4), prompt(100, 4)}
			for _, p := range quiet {
				serveOne(t, c, "quiet", p)
			}
			last := 0
			for i := range 200 {
				serveOne(t, c, "noisy", prompt(1000+100*i, 2+i%3))
				if tc.shares != nil {
					// Its blocks come down from the GPU as the flood
					// pushes them, and stay.
					s := shareOf(t, c, "quiet")
					require.Zero(t, s.Evictions, "flood request %d evicted a unit of the quiet namespace", i)
					require.GreaterOrEqual(t, s.Used, last, "flood request %d", i)
					last = s.Used
				}
			}
			reused := 0
			for _, p := range quiet {
				reused += serveOne(t, c, "quiet", p)
			}
			if tc.shares == nil {
				require.Zero(t, reused, "without shares the flood should have evicted the quiet namespace's blocks")
				return
			}
			require.Equal(t, 8, last, "the quiet namespace's blocks on the CPU after the flood")
			require.Equal(t, 8*4, reused, "both prompts reused whole")
			s := shareOf(t, c, "quiet")
			require.Equal(t, 8, s.Reserved)
			require.Equal(t, 16, s.Cap)
		})
	}
}

// TestNoisyTenantStaysUnderItsCap: a namespace capped at a quarter of the
// CPU (4 of 16 blocks) never holds more there, whatever it sends: at its
// cap its own units make room for its next ones, and the rest of the CPU
// stays free for the others.
func TestNoisyTenantStaysUnderItsCap(t *testing.T) {
	c := sharesCache(t, 8, 16, []kvcache.Share{{Namespace: "noisy", Cap: 0.25}})
	for i := range 100 {
		serveOne(t, c, "noisy", prompt(1000+100*i, 1+i%4))
		s := shareOf(t, c, "noisy")
		require.LessOrEqual(t, s.Used, 4, "request %d", i)
	}
	s := shareOf(t, c, "noisy")
	require.Equal(t, 4, s.Used)
	require.Positive(t, s.Evictions, "at its cap it should lose its own units")
	st := c.Stats().Tiers[1]
	require.Equal(t, int64(12), st.Free, "the CPU beyond the cap stays free")
}

// TestSharesRandomWorkload: three namespaces with shares of the CPU (one
// reserved, one capped, one neither) and the default namespace send random
// prompts that share prefixes. After every request: no namespace holds
// more CPU slots than its cap; a namespace that held no more than its
// reservation lost no more units from the CPU (moved down or dropped)
// than it brought in; and the shares' counts add up to the tier's.
func TestSharesRandomWorkload(t *testing.T) {
	shares := []kvcache.Share{
		{Namespace: "r", Reserve: 0.25, Cap: 0.5},
		{Namespace: "c", Cap: 0.25},
		{Namespace: "n"},
	}
	for seed := range uint64(4) {
		c := sharesCache(t, 10, 20, shares)
		rng := rand.New(rand.NewPCG(seed, 3))
		namespaces := []string{"r", "c", "n", ""}
		for i := range 400 {
			before := c.Stats().Tiers[1].Shares
			ns := namespaces[rng.IntN(len(namespaces))]
			if ns == "r" && rng.IntN(3) > 0 {
				ns = namespaces[1+rng.IntN(3)] // the reserved namespace is quiet
			}
			serveOne(t, c, ns, prompt(100*rng.IntN(30), 1+rng.IntN(4)))
			evs, dropped, err := c.TakeEvents(nil)
			require.NoError(t, err)
			require.Zero(t, dropped)
			in, out := map[string]int{}, map[string]int{}
			for _, e := range evs {
				if e.Kind != kvcache.UnitMoved {
					continue
				}
				switch {
				case e.To == kvcache.CPU && e.From == kvcache.GPU:
					in[e.Namespace]++
				case e.From == kvcache.CPU && e.To == kvcache.Dropped:
					out[e.Namespace]++
				}
			}
			st := c.Stats().Tiers[1]
			used := 0
			for k, s := range st.Shares {
				msg := fmt.Sprintf("seed %d request %d (%s), namespace %q", seed, i, ns, s.Namespace)
				require.LessOrEqual(t, s.Used, s.Cap, msg)
				if before[k].Used <= before[k].Reserved {
					require.LessOrEqual(t, out[s.Namespace], in[s.Namespace], "%s: held %d of its %d reserved and lost units to others", msg, before[k].Used, before[k].Reserved)
				}
				used += s.Used
			}
			require.LessOrEqual(t, int64(used), st.Capacity-st.Free)
		}
		var names []string
		for _, s := range c.Stats().Tiers[1].Shares {
			names = append(names, fmt.Sprintf("%s:%d/%d ev %d drops %d", s.Namespace, s.Used, s.Cap, s.Evictions, s.DropsAtCap))
		}
		t.Logf("seed %d: %s", seed, strings.Join(names, ", "))
	}
}

// TestGPUCapLimitsANamespace: a namespace capped at half the GPU (4 of 8
// blocks) gets ErrNoSpace, as Admit predicts, for a prompt beyond its cap
// and, while its live sequence holds 4 blocks, for any more; another
// namespace uses the rest.
func TestGPUCapLimitsANamespace(t *testing.T) {
	tiers := kvcache.GPUAndCPU(kvcache.Capacity{Units: 8}, kvcache.Capacity{})
	tiers[0].Shares = []kvcache.Share{{Namespace: "big", Cap: 0.5}}
	c, err := kvcache.New(kvcache.Config{Layout: sharesLayout(t), Tiers: tiers})
	require.NoError(t, err)
	try := func(ns string, p []uint32) (kvcache.Plan, error) {
		adm, err := c.Admit(kvcache.Request{Tokens: p, Namespace: ns})
		require.NoError(t, err)
		plan, err := c.Acquire(kvcache.Request{Tokens: p, Namespace: ns})
		require.Equal(t, adm.Fits, err == nil, "Admit %+v, Acquire %v", adm, err)
		return plan, err
	}
	_, err = try("big", prompt(0, 5))
	require.ErrorIs(t, err, kvcache.ErrNoSpace)
	held, err := try("big", prompt(100, 4))
	require.NoError(t, err)
	_, err = try("big", prompt(200, 1))
	require.ErrorIs(t, err, kvcache.ErrNoSpace)
	other, err := try("other", prompt(300, 4))
	require.NoError(t, err)
	for _, p := range []kvcache.Plan{other, held} {
		require.NoError(t, c.Commit(p.Seq, 16))
		require.NoError(t, c.Release(p.Seq))
	}
	// Cached, its blocks are its own to replace: a new prompt of 4 at its
	// cap evicts them, not the other namespace's.
	_, err = try("big", prompt(400, 4))
	require.NoError(t, err)
	require.Equal(t, 16, serveOne(t, c, "other", prompt(300, 4)), "the other namespace's blocks stayed")
	s := c.Stats().Tiers[0].Shares[0]
	require.Equal(t, uint64(4), s.Evictions)
	require.Equal(t, 4, s.Used)
}

// TestGPUReservationKeepsCachedBlocks: a namespace reserves half the GPU
// (no tier below); its 4 cached blocks stay through another namespace's
// 100 prompts, which fit in the other half or are refused (ErrNoSpace)
// rather than evict them, and it reuses its prompt whole afterwards.
func TestGPUReservationKeepsCachedBlocks(t *testing.T) {
	tiers := kvcache.GPUAndCPU(kvcache.Capacity{Units: 8}, kvcache.Capacity{})
	tiers[0].Shares = []kvcache.Share{{Namespace: "q", Reserve: 0.5}}
	c, err := kvcache.New(kvcache.Config{Layout: sharesLayout(t), Tiers: tiers})
	require.NoError(t, err)
	serveOne(t, c, "q", prompt(0, 4))
	refused := 0
	for i := range 100 {
		p := prompt(1000+100*i, 1+i%6)
		plan, err := c.Acquire(kvcache.Request{Tokens: p, Namespace: "n"})
		if errors.Is(err, kvcache.ErrNoSpace) {
			refused++
			continue
		}
		require.NoError(t, err)
		require.NoError(t, c.Commit(plan.Seq, len(p)))
		require.NoError(t, c.Release(plan.Seq))
		require.Equal(t, 4, c.Stats().Tiers[0].Shares[0].Used, "request %d", i)
	}
	require.Positive(t, refused, "prompts of 5 and 6 blocks do not fit beside the reservation")
	require.Equal(t, 16, serveOne(t, c, "q", prompt(0, 4)))
}
