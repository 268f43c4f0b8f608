package radix

import (
	"encoding/binary"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mustHasher(t testing.TB, b int, seed uint64) *Hasher {
	t.Helper()
	h, err := NewHasher(b, seed)
	require.NoError(t, err)
	return h
}

// seq returns n tokens with token i = f(i).
func seq(n int, f func(i int) uint32) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

func TestNewHasherBlockSize(t *testing.T) {
	for _, b := range []int{-4, 0, 1, 3, 6, 24, MaxBlockTokens * 2} {
		_, err := NewHasher(b, 0)
		require.ErrorIs(t, err, ErrInvalidBlockSize, "block size %d", b)
		assert.True(t, strings.HasPrefix(err.Error(), "radix: "))
		assert.Contains(t, err.Error(), ": "+strconv.Itoa(b)+" tokens")
		_, err = NewTree[int](b, 0)
		require.ErrorIs(t, err, ErrInvalidBlockSize)
	}
	for _, b := range []int{2, 16, 512, MaxBlockTokens} {
		h, err := NewHasher(b, 9)
		require.NoError(t, err)
		assert.Equal(t, b, h.BlockTokens())
		assert.Equal(t, uint64(9), h.Seed())
	}
}

// refBlockHash is the documented encoding written the plain way (append to
// a byte slice, one Sum64), independent of the encoder's scratch buffer
// and streaming.
func refBlockHash(seed, parent uint64, first bool, k Keys, start int, tokens []uint32, extra []ExtraKey) uint64 {
	var b []byte
	if first {
		b = binary.LittleEndian.AppendUint64(b, seed)
		b = append(b, 'N')
		b = binary.LittleEndian.AppendUint64(b, uint64(len(k.Namespace)))
		b = append(b, k.Namespace...)
		b = append(b, 'L')
		b = binary.LittleEndian.AppendUint64(b, uint64(len(k.LoRA)))
		b = append(b, k.LoRA...)
	} else {
		b = binary.LittleEndian.AppendUint64(b, parent)
	}
	b = append(b, 'T')
	b = binary.LittleEndian.AppendUint32(b, uint32(len(tokens)))
	for _, v := range tokens {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	for _, x := range extra {
		b = append(b, 'X')
		b = binary.LittleEndian.AppendUint32(b, uint32(x.Pos-start))
		b = binary.LittleEndian.AppendUint64(b, x.Value)
	}
	return xxhash.Sum64(b)
}

func refChain(seed uint64, b int, k Keys, tokens []uint32, extra []ExtraKey) []uint64 {
	var out []uint64
	var parent uint64
	for i := 0; (i+1)*b <= len(tokens); i++ {
		parent = refBlockHash(seed, parent, i == 0, k, i*b, tokens[i*b:(i+1)*b], blockExtra(extra, i*b, (i+1)*b))
		out = append(out, parent)
	}
	return out
}

// TestHasherMatchesEncoding checks the hasher against the plain encoding,
// including inputs far larger than the encoder's scratch (long keys, big
// blocks, many extra keys) that take the streaming path.
// TestZeroHasherFails: the zero Hasher has no block size; hashing with it
// is an error, not a loop that never advances.
func TestZeroHasherFails(t *testing.T) {
	var h Hasher
	for _, tokens := range [][]uint32{nil, {1, 2, 3}} {
		dst, err := h.Hash(nil, Keys{}, tokens, nil)
		require.ErrorIs(t, err, ErrInvalidBlockSize)
		require.Empty(t, dst)
		st := h.Start(Keys{Namespace: "a"})
		_, st2, err := h.Append(nil, st, tokens, nil)
		require.ErrorIs(t, err, ErrInvalidBlockSize)
		require.Equal(t, st, st2)
	}
}

func TestHasherMatchesEncoding(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for iter := range 300 {
		b := 2 << r.IntN(10) // 2 .. 1024
		seed := r.Uint64()
		k := Keys{Namespace: strings.Repeat("n", r.IntN(600)), LoRA: strings.Repeat("l", r.IntN(40))}
		tokens := seq(r.IntN(5*b+3), func(int) uint32 { return r.Uint32() })
		var extra []ExtraKey
		for p := 0; p < len(tokens)+b; p += 1 + r.IntN(b) {
			if r.IntN(3) == 0 {
				extra = append(extra, ExtraKey{Pos: p, Value: r.Uint64()})
			}
		}
		h := mustHasher(t, b, seed)
		got, err := h.Hash(nil, k, tokens, extra)
		require.NoError(t, err)
		want := refChain(seed, b, k, tokens, extra)
		require.Equal(t, len(want), len(got), "iteration %d", iter)
		if len(want) > 0 {
			require.Equal(t, want, got, "iteration %d: block size %d", iter, b)
		}
	}
}

func TestHasherChain(t *testing.T) {
	h := mustHasher(t, 4, 1)
	base := seq(16, func(i int) uint32 { return uint32(i) })
	hb, err := h.Hash(nil, Keys{}, base, nil)
	require.NoError(t, err)
	require.Len(t, hb, 4)
	for j := range 4 {
		changed := append([]uint32(nil), base...)
		changed[j*4+1] = 99
		hc, err := h.Hash(nil, Keys{}, changed, nil)
		require.NoError(t, err)
		assert.Equal(t, hb[:j], hc[:j], "blocks before the change keep their hash")
		for i := j; i < 4; i++ {
			assert.NotEqual(t, hb[i], hc[i], "block %d after a change in block %d", i, j)
		}
	}
	// Same tokens, different seed: different chain from the first block.
	other, err := mustHasher(t, 4, 2).Hash(nil, Keys{}, base, nil)
	require.NoError(t, err)
	for i := range hb {
		assert.NotEqual(t, hb[i], other[i])
	}
	// A trailing partial block is not hashed.
	hp, err := h.Hash(nil, Keys{}, base[:15], nil)
	require.NoError(t, err)
	assert.Equal(t, hb[:3], hp)
}

// TestHasherKeysAreSeparated checks that the namespace and LoRA fields
// cannot be confused by concatenation or swapped.
func TestHasherKeysAreSeparated(t *testing.T) {
	h := mustHasher(t, 2, 0)
	tokens := []uint32{5, 6, 7, 8}
	variants := []Keys{
		{},
		{Namespace: "x"},
		{LoRA: "x"},
		{Namespace: "xy"},
		{Namespace: "x", LoRA: "y"},
		{LoRA: "xy"},
		{Namespace: "y", LoRA: "x"},
		{Namespace: "N"},
		{LoRA: "L"},
		{Namespace: "\x00"},
	}
	seen := map[uint64]Keys{}
	for _, k := range variants {
		hs, err := h.Hash(nil, k, tokens, nil)
		require.NoError(t, err)
		if prev, dup := seen[hs[0]]; dup {
			t.Fatalf("keys %+v and %+v give the same first-block hash", prev, k)
		}
		seen[hs[0]] = k
	}
	// Keys and tokens cannot trade places either: a namespace spelling the
	// bytes of a token must not equal the token.
	a, err := h.Hash(nil, Keys{Namespace: "\x05\x00\x00\x00"}, []uint32{6, 7}, nil)
	require.NoError(t, err)
	b, err := h.Hash(nil, Keys{}, []uint32{5, 6}, nil)
	require.NoError(t, err)
	assert.NotEqual(t, a, b)
}

func TestHasherExtraKeys(t *testing.T) {
	h := mustHasher(t, 4, 0)
	tokens := seq(12, func(i int) uint32 { return 1 })
	plain, err := h.Hash(nil, Keys{}, tokens, nil)
	require.NoError(t, err)

	withKey, err := h.Hash(nil, Keys{}, tokens, []ExtraKey{{Pos: 5, Value: 42}})
	require.NoError(t, err)
	assert.Equal(t, plain[0], withKey[0], "a key in block 1 leaves block 0 alone")
	assert.NotEqual(t, plain[1], withKey[1])
	assert.NotEqual(t, plain[2], withKey[2], "and reaches later blocks through the chain")

	moved, err := h.Hash(nil, Keys{}, tokens, []ExtraKey{{Pos: 6, Value: 42}})
	require.NoError(t, err)
	assert.NotEqual(t, withKey[1], moved[1], "the offset inside the block counts")
	otherValue, err := h.Hash(nil, Keys{}, tokens, []ExtraKey{{Pos: 5, Value: 43}})
	require.NoError(t, err)
	assert.NotEqual(t, withKey[1], otherValue[1])

	beyond, err := h.Hash(nil, Keys{}, tokens, []ExtraKey{{Pos: 12, Value: 1}, {Pos: 100, Value: 2}})
	require.NoError(t, err)
	assert.Equal(t, plain, beyond, "keys past the full blocks are ignored")

	for _, bad := range [][]ExtraKey{
		{{Pos: -1, Value: 1}},
		{{Pos: 3, Value: 1}, {Pos: 2, Value: 1}},
	} {
		dst := []uint64{7}
		st := h.Start(Keys{Namespace: "a"})
		got, st2, err := h.Append(dst, st, tokens, bad)
		require.ErrorIs(t, err, ErrInvalidExtraKey)
		assert.Equal(t, dst, got)
		assert.Equal(t, st, st2)
	}
}

// TestHasherIncremental checks that hashing a sequence in pieces, the way
// decode commits blocks, gives the one-shot chain, and that a node's State
// continues it.
func TestHasherIncremental(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 200 {
		b := 2 << r.IntN(4)
		h := mustHasher(t, b, r.Uint64())
		k := Keys{Namespace: "t" + strconv.Itoa(r.IntN(3)), LoRA: "l"}
		tokens := seq(r.IntN(8*b), func(int) uint32 { return uint32(r.IntN(4)) })
		var extra []ExtraKey
		for p := 0; p < len(tokens); p += 1 + r.IntN(2*b) {
			extra = append(extra, ExtraKey{Pos: p, Value: uint64(r.IntN(3))})
		}
		want, err := h.Hash(nil, k, tokens, extra)
		require.NoError(t, err)

		st := h.Start(k)
		var got []uint64
		pos := 0
		for pos < len(tokens) {
			// Feed a random amount; the hasher consumes whole blocks and
			// the rest is passed again, as a decoding sequence would.
			end := min(len(tokens), pos+r.IntN(3*b))
			got, st, err = h.Append(got, st, tokens[pos:end], extra)
			require.NoError(t, err)
			pos = st.Blocks() * b
			if end == len(tokens) && len(tokens)-pos < b {
				break
			}
		}
		require.Equal(t, len(want), st.Blocks())
		require.Equal(t, len(want), len(got))
		if len(want) > 0 {
			require.Equal(t, want, got)
			require.Equal(t, want[len(want)-1], st.Hash())
		}

		tr := newTree[int](h)
		nodes, _, err := tr.Insert(nil, k, tokens, extra)
		require.NoError(t, err)
		if len(nodes) > 1 {
			cut := r.IntN(len(nodes) - 1)
			rest, _, err := h.Append(nil, nodes[cut].State(), tokens[(cut+1)*b:], extra)
			require.NoError(t, err)
			require.Equal(t, want[cut+1:], rest, "continuing from a node's state")
		}
		if len(want) > 0 {
			// Resuming from a kept hash continues the chain exactly.
			cut := r.IntN(len(want) + 1)
			st := h.Resume(k, 0, 0)
			if cut > 0 {
				st = h.Resume(Keys{Namespace: "ignored"}, want[cut-1], cut)
			}
			rest, _, err := h.Append(nil, st, tokens[cut*b:], extra)
			require.NoError(t, err)
			require.Equal(t, len(want)-cut, len(rest))
			if cut < len(want) {
				require.Equal(t, want[cut:], rest, "resuming after %d blocks", cut)
			}
		}
	}
}

func TestHasherAllocs(t *testing.T) {
	h := mustHasher(t, 16, 7)
	tokens := seq(4096, func(i int) uint32 { return uint32(i * 7) })
	extra := []ExtraKey{{Pos: 3, Value: 1}, {Pos: 900, Value: 2}}
	dst := make([]uint64, 0, 256)
	for _, k := range []Keys{{}, {Namespace: strings.Repeat("s", 1000), LoRA: "adapter"}} {
		allocs := testing.AllocsPerRun(50, func() {
			var err error
			dst, err = h.Hash(dst[:0], k, tokens, extra)
			if err != nil {
				t.Fatal(err)
			}
		})
		assert.Zero(t, allocs, "Hash with a preallocated destination")
		assert.Len(t, dst, 256)
	}
	// Incremental, one block at a time.
	allocs := testing.AllocsPerRun(50, func() {
		st := h.Start(Keys{LoRA: "x"})
		dst = dst[:0]
		for i := 0; i < len(tokens); i += 16 {
			dst, st, _ = h.Append(dst, st, tokens[i:i+16], extra)
		}
	})
	assert.Zero(t, allocs, "block-by-block Append")
	assert.Len(t, dst, 256)
}
