package kvcache

import (
	"testing"

	"github.com/kvtier/kvtier/layout"
	"github.com/stretchr/testify/require"
)

// writeThroughCache is a paged cache (two units per block) over a
// MemoryStore, with write-through to the CPU, moved by store itself or,
// with async, by a queueEngine over it.
func writeThroughCache(t *testing.T, async bool) (*Cache, *MemoryStore, *queueEngine) {
	t.Helper()
	l := tinyLayout(t, layout.PagedLayer, nil)
	tiers := GPUAndCPU(Capacity{Units: 4}, Capacity{Units: 8})
	tiers[1].WriteThrough = true
	store, err := NewMemoryStore(l, tiers)
	require.NoError(t, err)
	cfg := Config{Layout: l, Tiers: tiers, Mover: store}
	var e *queueEngine
	if async {
		e = &queueEngine{store: store}
		cfg.Mover, cfg.Engine = nil, e
	}
	c, err := New(cfg)
	require.NoError(t, err)
	return c, store, e
}

// TestWriteThrough: committed GPU units are copied to the CPU at once, so
// evicting them later copies nothing, and loading them back keeps their
// CPU copies; every copy holds the right bytes.
func TestWriteThrough(t *testing.T) {
	for _, async := range []bool{false, true} {
		t.Run(map[bool]string{false: "mover", true: "engine"}[async], func(t *testing.T) {
			c, store, e := writeThroughCache(t, async)
			drain := func() {
				if e != nil {
					e.completeAll(t, c)
				}
			}
			p1, p2 := seqTokens(8, 100), seqTokens(8, 200)
			serve := func(p []uint32) Plan {
				plan, err := c.Acquire(Request{Tokens: p})
				require.NoError(t, err)
				drain()
				if len(plan.Compute) > 0 {
					writeBlocks(t, c, store, plan.Seq, p, 0, 2)
				}
				requireBlocks(t, c, store, plan.Seq, p)
				require.NoError(t, c.Commit(plan.Seq, len(p)))
				drain()
				require.NoError(t, c.Release(plan.Seq))
				require.NoError(t, c.checkInvariants())
				return plan
			}
			serve(p1)
			cpu := c.Stats().Tier(CPU)
			require.Equal(t, int64(4), cpu.Backups, "p1's units were written through")
			require.Equal(t, uint64(4), cpu.BackupsWritten)
			require.Equal(t, int64(4), cpu.Cached)
			bytes := c.Stats().BytesMoved

			plan := serve(p2) // evicts p1: to its backups, no copy
			require.Equal(t, 4, plan.Offloaded)
			require.Empty(t, plan.Executed, "the victims' moves down copy nothing")
			require.Equal(t, bytes, c.Stats().BytesMoved)
			cpu = c.Stats().Tier(CPU)
			require.Equal(t, uint64(4), cpu.MovedIn)
			require.Equal(t, int64(4), cpu.Backups, "p2's, written through; p1's backups are its locations now")
			require.Equal(t, int64(8), cpu.Cached)

			plan = serve(p1) // loads p1 back, evicting p2 to its backups
			require.Equal(t, 4, plan.Onboarded)
			require.Equal(t, 4, plan.Offloaded)
			require.Len(t, plan.Executed, 4, "the loads only")
			cpu = c.Stats().Tier(CPU)
			require.Equal(t, int64(4), cpu.Backups, "p1's copies stay as its backups")
			require.Equal(t, int64(8), cpu.Cached)
			require.Equal(t, uint64(8), cpu.BackupsWritten, "nothing written again")

			// Backups are evictable like any unit: a prompt that needs
			// the CPU's room takes them, for free.
			serve(seqTokens(8, 300))
			require.NoError(t, c.checkInvariants())
			require.NoError(t, c.Clear())
			require.Zero(t, c.Stats().Tier(CPU).Cached)
			require.Zero(t, c.Stats().Tier(CPU).Backups)
		})
	}
}

func TestWriteThroughOnOneTierBelowTheGPU(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	three := func() []TierConfig {
		return append(GPUAndCPU(Capacity{Units: 4}, Capacity{Units: 8}), TierConfig{Name: "disk", Capacity: Capacity{Units: 8}})
	}
	tiers := three()
	tiers[0].WriteThrough = true
	_, err := New(Config{Layout: l, Tiers: tiers})
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.ErrorContains(t, err, "GPU")
	tiers = three()
	tiers[1].WriteThrough, tiers[2].WriteThrough = true, true
	_, err = New(Config{Layout: l, Tiers: tiers})
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.ErrorContains(t, err, "tiers 2 and 3")
	for _, i := range []int{1, 2} {
		tiers = three()
		tiers[i].WriteThrough = true
		_, err = New(Config{Layout: l, Tiers: tiers})
		require.NoError(t, err)
	}
}
