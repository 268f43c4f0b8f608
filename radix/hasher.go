package radix

import (
	"encoding/binary"
	"fmt"

	"github.com/cespare/xxhash/v2"
)

// MaxBlockTokens is the largest block size NewHasher and NewTree accept. It
// keeps block offsets and token counts inside the uint32 fields of the hash
// encoding.
const MaxBlockTokens = 1 << 30

// Hasher turns token sequences into per-block chain hashes:
//
//	h_0 = xxhash64(seed, namespace, LoRA, tokens of block 0, extra keys of block 0)
//	h_i = xxhash64(h_(i-1), tokens of block i, extra keys of block i)
//
// Every field of the hashed input is tagged and, where its length varies,
// length-prefixed, so no two different inputs encode to the same bytes: a
// LoRA name equal to a namespace string, or a key moved between fields, gives
// a different hash. The seed is the chain's initial value, so hashers with
// different seeds never agree on a block.
//
// A Hasher is immutable after NewHasher and safe for concurrent use. Hashing
// allocates nothing beyond growing the destination slice the caller passes.
// Use the constructor; the zero Hasher is not valid (hashing with it returns
// an error wrapping ErrInvalidBlockSize).
type Hasher struct {
	blockTokens int
	seed        uint64
	// mask is ANDed into every hash. It is all ones outside tests; tests
	// narrow it to force collisions and prove that token verification, not
	// the hash, decides what matches.
	mask uint64
}

// NewHasher returns a Hasher for blocks of blockTokens tokens, which must be a
// power of two between 2 and MaxBlockTokens; otherwise the error wraps
// ErrInvalidBlockSize. seed is mixed into every chain.
func NewHasher(blockTokens int, seed uint64) (*Hasher, error) {
	if blockTokens < 2 || blockTokens > MaxBlockTokens || blockTokens&(blockTokens-1) != 0 {
		return nil, fmt.Errorf("%w: %d tokens per block (want a power of two from 2 to %d)",
			ErrInvalidBlockSize, blockTokens, MaxBlockTokens)
	}
	return &Hasher{blockTokens: blockTokens, seed: seed, mask: ^uint64(0)}, nil
}

// BlockTokens returns the number of tokens per block.
func (h *Hasher) BlockTokens() int { return h.blockTokens }

// Seed returns the seed the hasher mixes into every chain.
func (h *Hasher) Seed() uint64 { return h.seed }

// State is where a chain of block hashes stands: the hash of the last block
// hashed and how many blocks precede the next one. Hasher.Start makes the
// state of an empty sequence; Hasher.Append returns the state after the
// blocks it hashed; Node.State gives the state after a cached node, so
// hashing continues from a matched prefix without rehashing it. The zero
// State is an empty sequence with zero Keys.
type State struct {
	hash   uint64
	blocks int
	// keys only matter while blocks is 0: they enter the first block.
	keys Keys
}

// Hash returns the hash of the last block hashed, or 0 when no block has
// been hashed yet.
func (s State) Hash() uint64 { return s.hash }

// Blocks returns the number of blocks hashed so far in the sequence.
func (s State) Blocks() int { return s.blocks }

// Start returns the state of an empty sequence with keys k.
func (h *Hasher) Start(k Keys) State { return State{keys: k} }

// Resume returns the state after blocks blocks of a sequence with keys k
// whose last block hashed to hash, as Append would have returned it: an
// owner that keeps block hashes (not States) continues a chain from one.
// With blocks 0 it is Start(k) and hash is ignored. A negative blocks is
// taken as 0.
func (h *Hasher) Resume(k Keys, hash uint64, blocks int) State {
	if blocks <= 0 {
		return h.Start(k)
	}
	return State{hash: hash, blocks: blocks}
}

// Append hashes the full blocks of tokens, which continue the sequence
// described by st: tokens[0] is the token at position
// st.Blocks()*BlockTokens() of the sequence. It appends one hash per full
// block to dst and returns dst and the state after the last of them. A
// trailing partial block is not hashed: it has no hash until it fills, and
// the caller passes it again once it does. extra holds the sequence's extra
// keys, sorted by absolute position; keys outside the hashed blocks are
// ignored. Unsorted or negative positions return an error wrapping
// ErrInvalidExtraKey, and the zero Hasher one wrapping ErrInvalidBlockSize,
// with dst and st unchanged. Append allocates only to grow dst.
func (h *Hasher) Append(dst []uint64, st State, tokens []uint32, extra []ExtraKey) ([]uint64, State, error) {
	b := h.blockTokens
	if b == 0 {
		// A zero block size would never advance through tokens.
		return dst, st, fmt.Errorf("%w: zero Hasher (build one with NewHasher)", ErrInvalidBlockSize)
	}
	if err := checkExtra(extra); err != nil {
		return dst, st, err
	}
	var enc encoder
	cursor := 0
	for off := 0; off+b <= len(tokens); off += b {
		start := st.blocks * b
		bx := takeExtra(extra, &cursor, start, start+b)
		st.hash = h.hashBlock(&enc, st.hash, st.blocks == 0, st.keys, start, tokens[off:off+b], bx)
		st.blocks++
		dst = append(dst, st.hash)
	}
	if st.blocks > 0 {
		// The keys are in the chain now; dropping them keeps a long-lived
		// State from pinning the strings.
		st.keys = Keys{}
	}
	return dst, st, nil
}

// Hash hashes every full block of a sequence with keys k from its first
// token, appending one hash per block to dst. It is Append from Start(k).
func (h *Hasher) Hash(dst []uint64, k Keys, tokens []uint32, extra []ExtraKey) ([]uint64, error) {
	dst, _, err := h.Append(dst, h.Start(k), tokens, extra)
	return dst, err
}

// Field tags of the hash encoding. Each field starts with its tag, so fields
// can never be confused by concatenation.
const (
	tagNamespace = 'N'
	tagLoRA      = 'L'
	tagTokens    = 'T'
	tagExtra     = 'X'
)

// hashBlock hashes one block. parent is the previous block's hash; for the
// first block (first true) the seed takes its place and the keys follow it.
// start is the absolute position of the block's first token: extra keys
// enter with their offset inside the block.
func (h *Hasher) hashBlock(enc *encoder, parent uint64, first bool, k Keys, start int, tokens []uint32, extra []ExtraKey) uint64 {
	if !first && len(extra) == 0 && 13+4*len(tokens) <= len(enc.buf) {
		// The hot case, a later block without extra keys, written in
		// straight-line code; it produces the same bytes as the general
		// path below.
		b := enc.buf[:13+4*len(tokens)]
		binary.LittleEndian.PutUint64(b, parent)
		b[8] = tagTokens
		binary.LittleEndian.PutUint32(b[9:], uint32(len(tokens)))
		// Block sizes are even: store two tokens per 8-byte write.
		tb := b[13:]
		for ; len(tokens) >= 2; tokens = tokens[2:] {
			binary.LittleEndian.PutUint64(tb, uint64(tokens[0])|uint64(tokens[1])<<32)
			tb = tb[8:]
		}
		for _, v := range tokens {
			binary.LittleEndian.PutUint32(tb, v)
		}
		return xxhash.Sum64(b) & h.mask
	}
	enc.reset()
	if first {
		enc.u64(h.seed)
		enc.str(tagNamespace, k.Namespace)
		enc.str(tagLoRA, k.LoRA)
	} else {
		enc.u64(parent)
	}
	enc.tag(tagTokens)
	enc.u32(uint32(len(tokens)))
	enc.tokens(tokens)
	for _, x := range extra {
		enc.tag(tagExtra)
		enc.u32(uint32(x.Pos - start))
		enc.u64(x.Value)
	}
	return enc.sum() & h.mask
}

// encoderBytes is the scratch size of an encoder: a 16-token block with its
// parent hash fits many times over, so the common case is one xxhash.Sum64
// call over stack memory. Longer inputs stream through a Digest.
const encoderBytes = 256

// encoder serializes one block's hash input into stack scratch and hashes
// it. The result equals xxhash.Sum64 over the whole encoding, whether or not
// it streamed.
type encoder struct {
	buf       [encoderBytes]byte
	n         int
	streaming bool
	d         xxhash.Digest
}

func (e *encoder) reset() {
	e.n = 0
	e.streaming = false
}

// room makes sure k more bytes fit in the scratch, flushing it into the
// digest when they do not.
func (e *encoder) room(k int) {
	if e.n+k <= len(e.buf) {
		return
	}
	if !e.streaming {
		e.d.Reset()
		e.streaming = true
	}
	_, _ = e.d.Write(e.buf[:e.n]) // Digest.Write never fails.
	e.n = 0
}

func (e *encoder) tag(t byte) {
	e.room(1)
	e.buf[e.n] = t
	e.n++
}

func (e *encoder) u32(v uint32) {
	e.room(4)
	b := e.buf[e.n : e.n+4]
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	e.n += 4
}

func (e *encoder) u64(v uint64) {
	e.room(8)
	b := e.buf[e.n : e.n+8]
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	b[4], b[5], b[6], b[7] = byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56)
	e.n += 8
}

// str writes a tagged, length-prefixed string.
func (e *encoder) str(t byte, s string) {
	e.tag(t)
	e.u64(uint64(len(s)))
	for len(s) > 0 {
		e.room(1)
		c := copy(e.buf[e.n:], s)
		e.n += c
		s = s[c:]
	}
}

// tokens writes tokens little-endian, as many per pass as fit.
func (e *encoder) tokens(ts []uint32) {
	for len(ts) > 0 {
		e.room(4)
		k := min((len(e.buf)-e.n)/4, len(ts))
		b := e.buf[e.n : e.n+4*k]
		for i, v := range ts[:k] {
			b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
		}
		e.n += 4 * k
		ts = ts[k:]
	}
}

func (e *encoder) sum() uint64 {
	if !e.streaming {
		return xxhash.Sum64(e.buf[:e.n])
	}
	_, _ = e.d.Write(e.buf[:e.n])
	return e.d.Sum64()
}
