package kvcache

import (
	"fmt"
	"testing"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/layout"
	"github.com/stretchr/testify/require"
)

// insertLog wraps a policy and remembers every key ever inserted into it.
type insertLog struct {
	eviction.Policy[UnitID]
	seen  map[UnitID]int
	twice []UnitID
}

func (p *insertLog) Insert(k UnitID, e eviction.Entry) error {
	p.seen[k]++
	if p.seen[k] == 2 {
		p.twice = append(p.twice, k)
	}
	return p.Policy.Insert(k, e)
}

// TestUnitIDNamesOneBlock: block records are reused, but a UnitID names one
// block for the cache's lifetime, so with prompts that never repeat no
// policy sees a key inserted twice (a policy with ghosts or counts would
// otherwise mix a new block's history with an old one's), Clear included.
// It also checks S3-FIFO's symptom: with keys reused, a brand-new block was
// found in the ghost queue and promoted straight to main.
func TestUnitIDNamesOneBlock(t *testing.T) {
	for _, cpu := range []Capacity{{}, {Units: 8}} {
		t.Run(fmt.Sprintf("cpu-%d", cpu.Units), func(t *testing.T) {
			l := tinyLayout(t, layout.AllLayers, nil) // one unit per block
			var logs []*insertLog
			factory := func(info PoolInfo) (eviction.Policy[UnitID], error) {
				p, err := S3FIFOPolicy(eviction.S3FIFOConfig{})(info)
				if err != nil {
					return nil, err
				}
				lg := &insertLog{Policy: p, seen: map[UnitID]int{}}
				logs = append(logs, lg)
				return lg, nil
			}
			c, err := New(Config{Layout: l, Tiers: tiersOf(Capacity{Units: 20}, cpu, factory, factory)})
			require.NoError(t, err)
			for i := range 400 {
				// One-block prompts that never repeat.
				p, err := c.Acquire(Request{Tokens: seqTokens(4, uint32(1000+4*i))})
				require.NoError(t, err)
				finish(t, c, p.Seq)
				if i == 200 {
					require.NoError(t, c.Clear())
				}
			}
			for _, lg := range logs {
				require.Empty(t, lg.twice, "keys inserted twice into one policy")
			}
		})
	}
}

// TestUnitIDOfAFreedBlockIsStale: a policy that returns, from Evict, the
// key of a unit whose block was forgotten (its record reused since) names
// no unit: the cache reports ErrPolicy instead of evicting the record's new
// block.
func TestUnitIDOfAFreedBlockIsStale(t *testing.T) {
	l := tinyLayout(t, layout.AllLayers, nil)
	factory, lying := tierPolicy(GPU, newLying)
	c, err := New(Config{Layout: l, Tiers: tiersOf(Capacity{Units: 2}, Capacity{}, factory, nil)})
	require.NoError(t, err)
	a, err := c.Acquire(Request{Tokens: seqTokens(4, 0)})
	require.NoError(t, err)
	c.mu.Lock()
	old := c.units.id(c.seqs[a.Seq].blocks[0], 0)
	c.mu.Unlock()
	finish(t, c, a.Seq)
	require.NoError(t, c.Clear()) // the record is free; the next block reuses it
	b, err := c.Acquire(Request{Tokens: seqTokens(4, 100)})
	require.NoError(t, err)
	finish(t, c, b.Seq)
	c.mu.Lock()
	require.NotEqual(t, old, c.units.id(c.units.blk(0).node.Value, 0), "a reused record gets a new UnitID")
	c.mu.Unlock()
	_, err = c.Acquire(Request{Tokens: seqTokens(4, 200)})
	require.NoError(t, err)
	gp := lying()
	gp.lie = func() (UnitID, bool) { return old, true }
	gp.armed = true
	before := c.Stats()
	_, err = c.Acquire(Request{Tokens: seqTokens(4, 300)})
	require.ErrorIs(t, err, ErrPolicy)
	require.Equal(t, before, c.Stats())
	require.NoError(t, c.checkInvariants())
}

// TestStatesOf checks that statesOf gives every unit's state of a record,
// by slice, both when a record's states lie in one chunk of the state
// array (a slice of it) and when records are wider than a chunk (a copy).
func TestStatesOf(t *testing.T) {
	for _, shift := range []uint{0, 5, 8, 9} {
		t.Run(fmt.Sprint(shift), func(t *testing.T) {
			ut, err := newUnitTable(shift)
			require.NoError(t, err)
			var recs []int32
			for i := range 5 {
				recs = append(recs, ut.alloc(i, 5, 0, 0))
			}
			for _, b := range recs {
				for s := range 1 << shift {
					ut.of(ut.id(b, s)).slot = int32(int(b)*100000 + s)
				}
			}
			for _, b := range recs {
				states := ut.statesOf(b)
				require.Len(t, states, 1<<shift)
				for s := range states {
					require.Equal(t, int32(int(b)*100000+s), states[s].slot, "record %d slice %d", b, s)
				}
			}
		})
	}
}
