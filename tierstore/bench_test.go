package tierstore_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/radix"
	"github.com/kvtier/kvtier/tierstore"
)

// The hot paths of every store, against a plain copy() of the same bytes:
//
//	go test ./tierstore/ -run '^$' -bench . -benchtime 1s -count 3

const (
	benchUnit   = 1 << 20 // a unit of 1 MiB
	benchTokens = 512     // tokens in its header
	benchFP     = 0x6b7674696572
)

// benchKey returns the key of the i-th unit of a chain of blocks of
// benchTokens tokens each.
func benchKey(rng *rand.Rand, i int) kvcache.UnitKey {
	toks := make([]uint32, benchTokens)
	for j := range toks {
		toks[j] = uint32(rng.IntN(128256))
	}
	return kvcache.UnitKey{Shared: true, Unit: kvcache.UnitID(i), Hash: rng.Uint64(), Parent: rng.Uint64(), HasParent: i > 0,
		Depth: i + 1, Slice: i % 32, Keys: radix.Keys{Namespace: "bench"}, Tokens: toks}
}

func benchPayload(rng *rand.Rand) []byte {
	b := make([]byte, benchUnit)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// BenchmarkCopy1MiB is the baseline: what moving the unit within the CPU
// tier costs.
func BenchmarkCopy1MiB(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	src, dst := benchPayload(rng), make([]byte, benchUnit)
	b.ReportAllocs()
	b.SetBytes(benchUnit)
	for b.Loop() {
		copy(dst, src)
	}
}

// BenchmarkEncode1MiB encodes a unit into a reused buffer (header,
// payload copy, xxhash64 of both): what every store's Put does first.
func BenchmarkEncode1MiB(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	k, payload := benchKey(rng, 1), benchPayload(rng)
	var dst []byte
	b.ReportAllocs()
	b.SetBytes(benchUnit)
	for b.Loop() {
		dst = tierstore.Encode(dst[:0], benchFP, k, payload)
	}
	if len(dst) != tierstore.HeaderSize(k)+benchUnit+8 {
		b.Fatalf("encoded %d bytes", len(dst))
	}
}

// BenchmarkDecode1MiB checks an encoded unit (checksum, header) and
// copies its payload out: what every store's Get does last.
func BenchmarkDecode1MiB(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	k, payload := benchKey(rng, 1), benchPayload(rng)
	value := tierstore.Encode(nil, benchFP, k, payload)
	dst := make([]byte, benchUnit)
	b.ReportAllocs()
	b.SetBytes(benchUnit)
	for b.Loop() {
		if err := tierstore.Decode(value, benchFP, k, dst); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMemStorePutGet16 stores a batch of 16 units of 1 MiB into a
// MemStore and loads it back: encoding (into a new value per unit, as
// MemStore keeps it) and decoding without I/O. Bytes count both
// directions (2 × 16 MiB per op), so MB/s compares with copy's.
func BenchmarkMemStorePutGet16(b *testing.B) {
	const batch = 16
	rng := rand.New(rand.NewPCG(1, 2))
	keys := make([]kvcache.UnitKey, batch)
	vals, dst := make([][]byte, batch), make([][]byte, batch)
	for i := range keys {
		keys[i], vals[i], dst[i] = benchKey(rng, i), benchPayload(rng), make([]byte, benchUnit)
	}
	s := tierstore.NewMemStore(benchFP)
	ctx := context.Background()
	b.ReportAllocs()
	b.SetBytes(2 * batch * benchUnit)
	for b.Loop() {
		if err := s.Put(ctx, keys, vals); err != nil {
			b.Fatal(err)
		}
		if err := s.Get(ctx, keys, dst); err != nil {
			b.Fatal(err)
		}
	}
}
