package kvevents

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// checkIndexInvariants checks, on a quiescent Index (no call running),
// what the design promises: every holder names a live id at most once per
// block, with a non-empty mask; a live id's count is its holders; byName
// and the live records agree; a free id is blank and holds nothing.
func checkIndexInvariants(t *testing.T, ix *Index, msg string) {
	t.Helper()
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	require.False(t, ix.purging, "%s: purging left set", msg)
	count := make([]int, len(ix.servers))
	for h, hs := range ix.blocks {
		require.NotEmpty(t, hs, "%s: empty entry %d", msg, h)
		var ids []uint32
		for _, x := range hs {
			require.Less(t, int(x.server), len(ix.servers), "%s: block %d: id out of range", msg, h)
			require.NotZero(t, x.mask, "%s: block %d: empty mask", msg, h)
			require.True(t, ix.servers[x.server].live, "%s: block %d: holder of non-live id %d (%+v)", msg, h, x.server, ix.servers[x.server])
			require.NotContains(t, ids, x.server, "%s: block %d: id %d twice", msg, h, x.server)
			ids = append(ids, x.server)
			count[x.server]++
		}
	}
	live := 0
	for id, s := range ix.servers {
		if s.live {
			live++
			require.Equal(t, uint32(id), ix.byName[s.name], "%s: byName(%q)", msg, s.name)
			require.Equal(t, count[id], s.blocks, "%s: count of id %d (%q)", msg, id, s.name)
		}
	}
	require.Equal(t, len(ix.byName), live, "%s: byName vs live ids", msg)
	for _, id := range ix.free {
		require.Equal(t, serverRec{}, ix.servers[id], "%s: free id %d", msg, id)
		require.Zero(t, count[id], "%s: free id %d holds blocks", msg, id)
	}
	require.Equal(t, len(ix.servers), live+len(ix.free), "%s: ids neither live nor free (leaked)", msg)
}

// TestIndexPurgesTheEmptyServerName: a server named "" (vLLM's default
// topic) that clears its blocks 100 times and is forgotten leaves no
// holder, no dead id and no id unaccounted for, and a Score over the one
// server left allocates nothing.
func TestIndexPurgesTheEmptyServerName(t *testing.T) {
	var ix Index
	for i := range 100 {
		ix.Apply("", Batch{Events: []Event{
			BlockStored{BlockHashes: []uint64{uint64(3 * i), uint64(3*i + 1), uint64(3*i + 2)}, Medium: MediumGPU},
			AllBlocksCleared{},
		}})
	}
	ix.Forget("")
	require.Zero(t, ix.Len(""))
	require.Empty(t, slices.Collect(ix.Servers()))
	ix.mu.RLock()
	blocks := len(ix.blocks)
	ix.mu.RUnlock()
	require.Zero(t, blocks, "block entries left after Forget(\"\")")
	checkIndexInvariants(t, &ix, "after Forget(\"\")")
	ix.Apply("a", Batch{Events: []Event{BlockStored{BlockHashes: []uint64{1}, Medium: MediumGPU}}})
	allocs := testing.AllocsPerRun(100, func() { _ = ix.Score(make([]Score, 0, 4), []uint64{1}, nil) })
	require.Zero(t, allocs, "Score allocations with 1 live server")
}

// TestIndexStraysRegisterNoMedium: removals from 64 media never stored
// on are strays that take none of the 64 media an Index tells apart, so a
// block stored on two more media and removed from one is still held on
// the other.
func TestIndexStraysRegisterNoMedium(t *testing.T) {
	var ix Index
	ref := newRefIndex(false)
	var b Batch
	// 64 removals of blocks never stored, on media named m00..m63: strays
	// that nonetheless use up every mask bit.
	for i := range 64 {
		b.Events = append(b.Events, BlockRemoved{BlockHashes: []uint64{999}, Medium: fmt.Sprintf("m%02d", i)})
	}
	b.Events = append(b.Events,
		BlockStored{BlockHashes: []uint64{1}, Medium: "m63"},
		BlockStored{BlockHashes: []uint64{1}, Medium: MediumGPU},
		BlockRemoved{BlockHashes: []uint64{1}, Medium: MediumGPU},
	)
	ix.Apply("a", b)
	ref.apply("a", b)
	require.Equal(t, ref.strays, ix.Strays(), "strays")
	require.Equal(t, ref.servers["a"][1], ix.Media("a", 1), "Media(a, 1) after storing on m63 and GPU, removing from GPU")
}

// TestIndexConcurrentInvariants: writers store long runs (the map grows
// while a purge ranges over it), clear their servers inside batches and
// Forget their own and each other's servers (Forgets land in paused
// Applies and in purges); then the Index, quiescent, holds no dead
// holder, no id twice in a block, right counts, and every id live or
// free.
func TestIndexConcurrentInvariants(t *testing.T) {
	const writers = 4
	for round := range 6 {
		ix := &Index{}
		var wg sync.WaitGroup
		for i := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(round), uint64(i)))
				next := uint64(i) << 40
				for op := range 40 {
					s := fmt.Sprintf("s%d", rng.IntN(writers+2))
					switch rng.IntN(6) {
					case 0:
						ix.Forget(s)
					default:
						var b Batch
						for range 1 + rng.IntN(3) {
							switch rng.IntN(5) {
							case 0:
								b.Events = append(b.Events, AllBlocksCleared{})
							case 1:
								hs := make([]uint64, rng.IntN(2*step))
								for k := range hs {
									hs[k] = next - uint64(rng.IntN(4*step)+1)
								}
								b.Events = append(b.Events, BlockRemoved{BlockHashes: hs, Medium: MediumGPU})
							default:
								hs := make([]uint64, rng.IntN(3*step))
								for k := range hs {
									if rng.IntN(3) == 0 {
										hs[k] = uint64(rng.IntN(2 * step)) // shared blocks
									} else {
										next++
										hs[k] = next
									}
								}
								b.Events = append(b.Events, BlockStored{BlockHashes: hs, Medium: []string{MediumGPU, MediumCPU}[rng.IntN(2)]})
							}
						}
						ix.Apply(s, b)
					}
					_ = op
				}
			}()
		}
		wg.Wait()
		checkIndexInvariants(t, ix, fmt.Sprintf("round %d", round))
	}
}

// TestIndexForgetWhileAnotherServerClears: a Forget of a large server
// returns while another server clears its blocks over and over (each
// clear drops an id the Forget's purge does not wait for).
func TestIndexForgetWhileAnotherServerClears(t *testing.T) {
	const blocks = 1 << 16
	build := func() *Index {
		ix := &Index{}
		hs := make([]uint64, blocks)
		for i := range hs {
			hs[i] = uint64(i + 1)
		}
		ix.Apply("big", Batch{Events: []Event{BlockStored{BlockHashes: hs, Medium: MediumGPU}}})
		for i := range hs {
			hs[i] += 1 << 32
		}
		// A bystander that keeps its blocks: every pass ranges over them too.
		ix.Apply("bystander", Batch{Events: []Event{BlockStored{BlockHashes: hs, Medium: MediumGPU}}})
		return ix
	}
	ix := build()
	start := time.Now()
	ix.Forget("big")
	alone := time.Since(start)

	ix = build()
	var stop atomic.Bool
	var clears atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			ix.Apply("other", Batch{Events: []Event{AllBlocksCleared{}, BlockStored{BlockHashes: []uint64{1 << 40}, Medium: MediumGPU}}})
			clears.Add(1)
		}
	}()
	const limit = 30 * time.Second
	returned := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		ix.Forget("big")
		returned <- time.Since(start)
	}()
	var took time.Duration
	select {
	case took = <-returned:
	case <-time.After(limit):
		ix.mu.RLock()
		ids := len(ix.servers)
		ix.mu.RUnlock()
		stop.Store(true)
		took = <-returned
		t.Errorf("Forget(big) alone: %v; with another server clearing: still running after %v (%d clears by the other server meanwhile, %d ids allocated), returned %v after the other server stopped", alone, limit, clears.Load(), ids, took)
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("alone %v, contended %v", alone, took)
}

// TestIndexIdsStayFew: a batch of 1,000 clears of a server leaves it one
// id (clearing a server that holds nothing keeps its id), and a Score
// allocates nothing.
func TestIndexIdsStayFew(t *testing.T) {
	var ix Index
	var b Batch
	for range 1000 {
		b.Events = append(b.Events, AllBlocksCleared{})
	}
	ix.Apply("a", b)
	ix.Apply("a", Batch{Events: []Event{BlockStored{BlockHashes: []uint64{1}, Medium: MediumGPU}}})
	ix.mu.RLock()
	ids := len(ix.servers)
	ix.mu.RUnlock()
	require.LessOrEqual(t, ids, 2, "ids for 1 server")
	allocs := testing.AllocsPerRun(100, func() { _ = ix.Score(make([]Score, 0, 4), []uint64{1}, nil) })
	require.Zero(t, allocs, "Score allocations")
}

// TestScoreNaNWeightCountsAsUnnamed: a NaN weight counts as a medium
// Weights does not name (1), as in the reference, so no Value is NaN.
func TestScoreNaNWeightCountsAsUnnamed(t *testing.T) {
	var ix Index
	ref := newRefIndex(false)
	b := Batch{Events: []Event{
		BlockStored{BlockHashes: []uint64{1}, Medium: MediumGPU},
		BlockStored{BlockHashes: []uint64{1}, Medium: MediumCPU},
	}}
	ix.Apply("a", b)
	ref.apply("a", b)
	w := Weights{MediumGPU: math.NaN()}
	require.Equal(t, fmt.Sprint(ref.score([]uint64{1}, w)), fmt.Sprint(ix.Score(nil, []uint64{1}, w)))
}
