package kvevents

import (
	"fmt"
	"testing"
)

// indexFleet is the fleet the Index benchmarks model: 16 servers with
// 64K blocks each, 1M blocks in all.
const (
	fleetServers = 16
	fleetBlocks  = 1 << 16
)

// fleetNames are the servers' names, made once so that the benchmarks
// measure the Index.
var fleetNames = func() (names [fleetServers]string) {
	for i := range names {
		names[i] = fmt.Sprintf("server-%02d", i)
	}
	return names
}()

func fleetServer(i int) string { return fleetNames[i%fleetServers] }

// fleetHash is the hash of block i of server s: spread like real ones.
func fleetHash(s, i int) uint64 { return (uint64(s)<<40 | uint64(i)) * 0x9e3779b97f4a7c15 }

// applier is what the ingest benchmark drives: the Index or the
// reference.
type applier interface{ apply(server string, b Batch) }

type indexApplier struct{ *Index }

func (a indexApplier) apply(server string, b Batch) { a.Apply(server, b) }

// BenchmarkIndexApply measures ingest in steady state: each server keeps
// fleetBlocks blocks, and each batch stores a run of new blocks on one
// server (a decode step's one block, or a prefill's 16) and removes as
// many of its oldest. events/s counts both kinds of events, blocks/s the
// blocks they name. The reference is per-server maps without a lock (the
// Index before it was shared by goroutines).
func BenchmarkIndexApply(b *testing.B) {
	for _, run := range []int{1, 16} {
		for _, impl := range []string{"index", "reference"} {
			b.Run(fmt.Sprintf("run=%d/%s", run, impl), func(b *testing.B) {
				var ix applier = indexApplier{&Index{}}
				if impl == "reference" {
					ix = newRefIndex(false)
				}
				next := make([]int, fleetServers)
				for s := range fleetServers {
					hs := make([]uint64, fleetBlocks)
					for i := range hs {
						hs[i] = fleetHash(s, i)
					}
					ix.apply(fleetServer(s), Batch{Events: []Event{BlockStored{BlockHashes: hs, Medium: MediumGPU}}})
					next[s] = fleetBlocks
				}
				stored := &BlockStored{BlockHashes: make([]uint64, run), Medium: MediumGPU}
				removed := &BlockRemoved{BlockHashes: make([]uint64, run), Medium: MediumGPU}
				batch := Batch{Events: []Event{stored, removed}}
				var parent uint64
				stored.ParentBlockHash = &parent
				b.ReportAllocs()
				s := 0
				for b.Loop() {
					s = (s + 1) % fleetServers
					n := next[s]
					parent = fleetHash(s, n-1)
					for i := range run {
						stored.BlockHashes[i] = fleetHash(s, n+i)
						removed.BlockHashes[i] = fleetHash(s, n+i-fleetBlocks)
					}
					next[s] = n + run
					ix.apply(fleetServer(s), batch)
				}
				b.ReportMetric(2*float64(b.N)/b.Elapsed().Seconds(), "events/s")
				b.ReportMetric(2*float64(run)*float64(b.N)/b.Elapsed().Seconds(), "blocks/s")
			})
		}
	}
}

// BenchmarkIndexScore scores a 32k-token prompt (2,048 blocks of 16
// tokens) over 16 servers that hold 1M blocks between them: server k
// holds the prompt's first (k+1)*128 blocks (the last holds all of it),
// half of them on the GPU and half on the CPU, besides 64K blocks of its
// own. The reference asks each server's map for the prompt's blocks in
// turn (per-server Match, then the weights), as a router built on the
// earlier Index would.
func BenchmarkIndexScore(b *testing.B) {
	const promptBlocks = 2048
	prompt := make([]uint64, promptBlocks)
	for i := range prompt {
		prompt[i] = fleetHash(99, i)
	}
	ix, ref := &Index{}, newRefIndex(false)
	for s := range fleetServers {
		own := make([]uint64, fleetBlocks)
		for i := range own {
			own[i] = fleetHash(s, i)
		}
		held := prompt[:(s+1)*promptBlocks/fleetServers]
		batch := Batch{Events: []Event{
			BlockStored{BlockHashes: own, Medium: MediumGPU},
			BlockStored{BlockHashes: held[:len(held)/2], Medium: MediumGPU},
			BlockStored{BlockHashes: held[len(held)/2:], Medium: MediumCPU},
		}}
		ix.Apply(fleetServer(s), batch)
		ref.apply(fleetServer(s), batch)
	}
	w := Weights{MediumGPU: 1, MediumCPU: 0.6}
	b.Run("index", func(b *testing.B) {
		var dst []Score
		b.ReportAllocs()
		for b.Loop() {
			dst = ix.Score(dst[:0], prompt, w)
		}
		if dst[0].Server != fleetServer(fleetServers-1) || dst[0].Blocks != promptBlocks {
			b.Fatalf("best %+v", dst[0])
		}
	})
	b.Run("reference", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = ref.score(prompt, w)
		}
	})
}
