package kvcache

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier/layout"
	"github.com/kvtier/kvtier/radix"
	"github.com/stretchr/testify/require"
)

// TestAsyncConcurrentStress runs many goroutines as the requests of a
// server against one cache whose transfers an AsyncMemoryStore performs on
// its own workers, failing one in five. Each request waits for readiness,
// recomputes what it is told to, writes its blocks and checks every byte
// of every block it holds. Run with -race: a transfer writing a slot that
// a request reads or writes after it was told the slot is ready is a data
// race the detector reports (the requests' own reads and writes are
// serialized by one mutex, as kernels on one device are).
func TestAsyncConcurrentStress(t *testing.T) {
	l, err := layout.New(layout.Model{Name: "tiny", Layers: 2, QueryHeads: 4, KVHeads: 2, HeadDim: 2, ElemBytes: 1}, layout.PagedLayer, 4)
	require.NoError(t, err)
	tiers := GPUAndCPU(Capacity{Units: 48}, Capacity{Units: 64})
	store, err := NewMemoryStore(l, tiers)
	require.NoError(t, err)
	var transfers, failures atomic.Int64
	engine, err := NewAsyncMemoryStore(store, AsyncOptions{Workers: 3, CopyTime: 5 * time.Microsecond,
		Fail: func([]Copy) error {
			if transfers.Add(1)%5 == 0 {
				failures.Add(1)
				return errors.New("injected")
			}
			return nil
		}})
	require.NoError(t, err)
	defer engine.Close()
	c, err := New(Config{Layout: l, Tiers: tiers, Engine: engine})
	require.NoError(t, err)

	workers, ops := 8, 150
	if testing.Short() {
		ops = 50
	}
	bases := [][]uint32{seqTokens(24, 0), seqTokens(24, 100), seqTokens(16, 200)}
	var serverMu sync.Mutex // one device: kernels do not overlap
	B := c.BlockTokens()
	// write fills blocks [from, to) of sequence id (tokens toks) with
	// their bytes; check verifies every block of it.
	unitBytes := func(toks []uint32, i, sl int, o int) byte {
		ph := prefixHashes(radix.Keys{}, toks[:min((i+1)*B, len(toks))])
		return expectedByte(ph[len(ph)-1], sl, int64(o))
	}
	write := func(id SeqID, toks []uint32, from, to int) error {
		for sl := range l.UnitsPerBlock() {
			table, err := c.BlockTable(nil, id, sl)
			if err != nil {
				return err
			}
			for i := from; i < to; i++ {
				buf := store.Bytes(GPU, c.SlicePool(sl), table[i])
				for o := range buf {
					buf[o] = unitBytes(toks, i, sl, o)
				}
			}
		}
		return nil
	}
	check := func(id SeqID, toks []uint32) error {
		for sl := range l.UnitsPerBlock() {
			table, err := c.BlockTable(nil, id, sl)
			if err != nil {
				return err
			}
			for i, slot := range table {
				buf := store.Bytes(GPU, c.SlicePool(sl), slot)
				for o := range buf {
					if buf[o] != unitBytes(toks, i, sl, o) {
						return errors.New("a request read wrong bytes")
					}
				}
			}
		}
		return nil
	}
	// serve computes what plan p and the readiness of its sequence ask,
	// then checks every block.
	serve := func(id SeqID, toks []uint32, compute []TokenRange) error {
		recompute, err := c.WaitReady(context.Background(), id, -1)
		if err != nil {
			return err
		}
		serverMu.Lock()
		defer serverMu.Unlock()
		for _, r := range append(compute, recompute...) {
			if err := write(id, toks, r.Start/B, (r.End+B-1)/B); err != nil {
				return err
			}
		}
		return check(id, toks)
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	var served atomic.Int64
	for w := range workers {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			for range ops {
				base := bases[rng.IntN(len(bases))]
				toks := append([]uint32(nil), base[:4+rng.IntN(len(base)-3)]...)
				p, err := c.Acquire(Request{Tokens: toks, MaxLoadTokens: []int{0, 8}[rng.IntN(2)]})
				if errors.Is(err, ErrNoSpace) {
					continue
				}
				if err == nil {
					err = serve(p.Seq, toks, p.Compute)
				}
				if err == nil && rng.IntN(2) == 0 {
					var a Plan
					extra := uint32(1000 + rng.IntN(3))
					if a, err = c.Append(p.Seq, extra); err == nil {
						toks = append(toks, extra)
						err = serve(p.Seq, toks, a.Compute)
					} else if errors.Is(err, ErrNoSpace) {
						err = nil
					}
				}
				if err == nil {
					err = c.Commit(p.Seq, len(toks))
				}
				if err == nil {
					err = c.Release(p.Seq)
					served.Add(1)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	checkWhileRunning(t, c, &wg, errs, time.Millisecond)
	for i := 0; c.Stats().Transfers > 0; i++ {
		require.Less(t, i, 10000, "transfers never finish")
		select {
		case <-c.Completed():
		case <-time.After(10 * time.Millisecond):
		}
		_, err := c.Poll()
		require.NoError(t, err)
	}
	require.NoError(t, c.checkInvariants())
	st := c.Stats()
	require.Zero(t, st.Sequences)
	require.Zero(t, st.Tier(GPU).Pinned)
	require.Zero(t, st.Tier(CPU).Pinned)
	require.Positive(t, served.Load())
	require.Positive(t, failures.Load())
	require.Positive(t, st.Onboards)
	require.Positive(t, st.Tier(GPU).Failed+st.Tier(CPU).Failed)
	t.Logf("served %d, %d transfers, %d failed, stats %+v", served.Load(), transfers.Load(), failures.Load(), st.Tiers)
	require.NoError(t, c.Clear())
}
