package radix

import (
	"encoding/binary"
	"runtime"
	"strconv"
	"testing"

	"github.com/cespare/xxhash/v2"
)

const (
	benchBlock  = 16
	benchPrompt = 32 << 10 // tokens: 2048 blocks of 16
)

// benchTree builds the tree the match benchmarks read: 1000 unrelated
// one-block sequences (a wide root), a 1024-token system prompt, and 32
// prompts of 32k tokens that share it and then diverge (a node with 32
// children). It returns the tree and one of the cached 32k prompts.
func benchTree(b *testing.B, scanLimit int32) (*Tree[int], []uint32) {
	tr, err := NewTree[int](benchBlock, 1)
	if err != nil {
		b.Fatal(err)
	}
	tr.scanLimit = scanLimit
	for i := range 1000 {
		if _, _, err := tr.Insert(nil, Keys{}, seq(benchBlock, func(j int) uint32 { return uint32(1e6 + i*benchBlock + j) }), nil); err != nil {
			b.Fatal(err)
		}
	}
	var prompt []uint32
	for p := range 32 {
		prompt = seq(benchPrompt, func(j int) uint32 {
			if j < 1024 {
				return uint32(j)
			}
			return uint32(p<<20 + j)
		})
		if _, _, err := tr.Insert(nil, Keys{}, prompt, nil); err != nil {
			b.Fatal(err)
		}
	}
	return tr, prompt
}

// BenchmarkMatch32k matches a fully cached 32k-token prompt: the owner's
// path, where matched blocks take their hashes from the nodes. scan is the
// fan-out up to which children are compared directly instead of hashing the
// block and probing the index (0: always probe).
func BenchmarkMatch32k(b *testing.B) {
	for _, scan := range []int32{0, defaultScanLimit, 64} {
		b.Run("scan="+strconv.Itoa(int(scan)), func(b *testing.B) {
			tr, prompt := benchTree(b, scan)
			dst := make([]*Node[int], 0, benchPrompt/benchBlock)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				var err error
				dst, err = tr.Match(dst[:0], Keys{}, prompt, nil)
				if err != nil || len(dst) != benchPrompt/benchBlock {
					b.Fatal(err, len(dst))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(dst)), "ns/block")
		})
	}
}

// BenchmarkHashAndMatch32k hashes all 2048 blocks of the prompt and then
// matches it: the literal reading of the target "hash + match a fully
// cached 32k prompt in 30 us", for an owner that wants every block hash up
// front.
func BenchmarkHashAndMatch32k(b *testing.B) {
	tr, prompt := benchTree(b, defaultScanLimit)
	dst := make([]*Node[int], 0, benchPrompt/benchBlock)
	hashes := make([]uint64, 0, benchPrompt/benchBlock)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		var err error
		hashes, err = tr.Hasher().Hash(hashes[:0], Keys{}, prompt, nil)
		if err != nil {
			b.Fatal(err)
		}
		dst, err = tr.Match(dst[:0], Keys{}, prompt, nil)
		if err != nil || len(dst) != len(hashes) {
			b.Fatal(err)
		}
	}
}

// BenchmarkHash32k hashes the 2048 blocks of a 32k-token prompt.
func BenchmarkHash32k(b *testing.B) {
	h := mustHasher(b, benchBlock, 1)
	prompt := seq(benchPrompt, func(j int) uint32 { return uint32(j * 31) })
	hashes := make([]uint64, 0, benchPrompt/benchBlock)
	b.SetBytes(int64(4 * len(prompt)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		hashes, _ = h.Hash(hashes[:0], Keys{}, prompt, nil)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(hashes)), "ns/block")
}

// BenchmarkInsertChild commits one new block under the previous one, as a
// decoding sequence does when a block fills.
func BenchmarkInsertChild(b *testing.B) {
	tr, err := NewTree[int](benchBlock, 1)
	if err != nil {
		b.Fatal(err)
	}
	block := seq(benchBlock, func(j int) uint32 { return uint32(j) })
	var last *Node[int]
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if i%65536 == 0 && i > 0 {
			b.StopTimer()
			tr.Clear(nil)
			last = nil
			b.StartTimer()
		}
		block[0] = uint32(i)
		n, created, err := tr.InsertChild(last, Keys{}, block, nil)
		if err != nil || !created {
			b.Fatal(err)
		}
		last = n
	}
}

// BenchmarkInsert32k inserts a new 32k-token prompt (2048 blocks) into a
// tree that already holds another.
func BenchmarkInsert32k(b *testing.B) {
	tr, err := NewTree[int](benchBlock, 1)
	if err != nil {
		b.Fatal(err)
	}
	other := seq(benchPrompt, func(j int) uint32 { return uint32(j) })
	prompt := seq(benchPrompt, func(j int) uint32 { return uint32(j + 7) })
	if _, _, err := tr.Insert(nil, Keys{}, other, nil); err != nil {
		b.Fatal(err)
	}
	dst := make([]*Node[int], 0, benchPrompt/benchBlock)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		var created int
		dst, created, err = tr.Insert(dst[:0], Keys{}, prompt, nil)
		if err != nil || created != len(dst) {
			b.Fatal(err)
		}
		b.StopTimer()
		if _, err := tr.RemoveSubtree(dst[0], nil); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkNodeBytes reports the heap bytes per node (block) of a tree of
// 100k 16-token blocks, hash index included: as 100 sequences of 1000
// blocks ("chains") and as 100k one-block sequences ("wide"). The payload
// is an int.
func BenchmarkNodeBytes(b *testing.B) {
	const nodes = 100_000
	for _, shape := range []struct {
		name      string
		sequences int
	}{{"chains", 100}, {"wide", nodes}} {
		b.Run(shape.name, func(b *testing.B) {
			per := nodes / shape.sequences * benchBlock
			prompts := make([][]uint32, shape.sequences)
			for s := range prompts {
				prompts[s] = seq(per, func(j int) uint32 { return uint32(s*per + j) })
			}
			var total float64
			for range b.N {
				before := heapInUse()
				tr, err := NewTree[int](benchBlock, 1)
				if err != nil {
					b.Fatal(err)
				}
				for _, p := range prompts {
					if _, _, err := tr.Insert(nil, Keys{}, p, nil); err != nil {
						b.Fatal(err)
					}
				}
				after := heapInUse()
				if tr.Len() != nodes {
					b.Fatal(tr.Len())
				}
				total += float64(after-before) / nodes
				runtime.KeepAlive(tr)
			}
			b.ReportMetric(total/float64(b.N), "bytes/node")
		})
	}
}

// BenchmarkXXHashFloor32k is the baseline for BenchmarkHash32k: one
// xxhash.Sum64 per block over the block's bytes already encoded (77 bytes:
// parent hash, tag, count, 16 tokens), so it measures xxhash alone.
// "independent" hashes the blocks without a dependency between them, which
// lets the CPU overlap them; "chained" writes each hash into the next
// block's parent field first, the dependency a chain hash cannot avoid.
func BenchmarkXXHashFloor32k(b *testing.B) {
	const blocks = benchPrompt / benchBlock
	encoded := make([][]byte, blocks)
	for i := range encoded {
		encoded[i] = make([]byte, 13+4*benchBlock)
		encoded[i][8] = byte(i)
	}
	for _, chained := range []bool{false, true} {
		name := "independent"
		if chained {
			name = "chained"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			var sink uint64
			for range b.N {
				var h uint64
				for _, e := range encoded {
					if chained {
						binary.LittleEndian.PutUint64(e, h)
					}
					h = xxhash.Sum64(e)
					sink += h
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/blocks, "ns/block")
			runtime.KeepAlive(sink)
		})
	}
}
