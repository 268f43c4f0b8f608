package kvevents

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
)

// Encoding selects the event layout.
type Encoding int

const (
	// Positional writes each event as [tag, fields...] (vLLM array_like).
	Positional Encoding = iota
	// TaggedMap writes each event as {"type": tag, field: value, ...}.
	TaggedMap
)

// HashEncoding selects how block hashes are written.
type HashEncoding int

const (
	// HashInt writes hashes as msgpack unsigned integers.
	HashInt HashEncoding = iota
	// HashBytes writes hashes as 8-byte big-endian msgpack bin values.
	HashBytes
)

// BatchLayout selects how the batch around the events is written.
type BatchLayout int

const (
	// BatchArray writes a batch as [ts, events, data_parallel_rank]
	// (vLLM's EventBatch while it was array_like; what most consumers
	// decode).
	BatchArray BatchLayout = iota
	// BatchMap writes a batch as {"ts": ..., "events": [...],
	// "data_parallel_rank": ...}, the rank left out when nil: vLLM's
	// EventBatch since it is no longer array_like, whose consumers
	// decode a batch only as a map.
	BatchMap
)

// EncoderOptions configures an Encoder. The zero value is vLLM's classic
// format: a positional batch of positional events, integer hashes. Each
// choice is independent: a consumer built on a given vLLM revision
// decodes the layouts of that revision's definitions (the events as
// arrays or tagged maps, the batch as an array or a map).
type EncoderOptions struct {
	Encoding     Encoding
	HashEncoding HashEncoding
	Batch        BatchLayout
}

// Encoder serializes batches. It is safe for concurrent use.
type Encoder struct {
	opts EncoderOptions
	pool sync.Pool // *encState
}

type encState struct {
	buf     bytes.Buffer
	enc     *msgpack.Encoder
	scratch [8]byte // hash bytes; lives on the heap so it is not reallocated
}

// NewEncoder returns an Encoder with the given options.
func NewEncoder(opts EncoderOptions) (*Encoder, error) {
	if opts.Encoding != Positional && opts.Encoding != TaggedMap {
		return nil, fmt.Errorf("kvevents: unknown encoding %d", opts.Encoding)
	}
	if opts.HashEncoding != HashInt && opts.HashEncoding != HashBytes {
		return nil, fmt.Errorf("kvevents: unknown hash encoding %d", opts.HashEncoding)
	}
	if opts.Batch != BatchArray && opts.Batch != BatchMap {
		return nil, fmt.Errorf("kvevents: unknown batch layout %d", opts.Batch)
	}
	e := &Encoder{opts: opts}
	e.pool.New = func() any {
		s := &encState{}
		s.enc = msgpack.NewEncoder(&s.buf)
		return s
	}
	return e, nil
}

// Options returns the encoder's options.
func (e *Encoder) Options() EncoderOptions { return e.opts }

// Encode returns the msgpack payload of b. The returned slice is owned by
// the caller.
func (e *Encoder) Encode(b Batch) ([]byte, error) {
	s := e.pool.Get().(*encState)
	s.buf.Reset()
	w := writer{enc: s.enc, opts: e.opts, scratch: s.scratch[:]}
	w.batch(&b)
	if w.err != nil {
		e.pool.Put(s)
		return nil, w.err
	}
	out := bytes.Clone(s.buf.Bytes())
	if s.buf.Cap() <= 1<<20 { // do not pin huge buffers in the pool
		e.pool.Put(s)
	}
	return out, nil
}

// writer carries the first error so the emit code stays linear.
type writer struct {
	enc     *msgpack.Encoder
	opts    EncoderOptions
	scratch []byte
	err     error
}

func (w *writer) set(err error) {
	if err != nil && w.err == nil {
		w.err = err
	}
}

func (w *writer) arrayLen(n int) { w.set(w.enc.EncodeArrayLen(n)) }
func (w *writer) mapLen(n int)   { w.set(w.enc.EncodeMapLen(n)) }
func (w *writer) str(s string)   { w.set(w.enc.EncodeString(s)) }
func (w *writer) nil_()          { w.set(w.enc.EncodeNil()) }
func (w *writer) int(v int)      { w.set(w.enc.EncodeInt(int64(v))) }

func (w *writer) optStr(s string) {
	if s == "" {
		w.nil_()
		return
	}
	w.str(s)
}

func (w *writer) optInt(p *int) {
	if p == nil {
		w.nil_()
		return
	}
	w.int(*p)
}

func (w *writer) hash(h uint64) {
	if w.opts.HashEncoding == HashBytes {
		binary.BigEndian.PutUint64(w.scratch, h)
		w.set(w.enc.EncodeBytes(w.scratch))
		return
	}
	w.set(w.enc.EncodeUint(h))
}

func (w *writer) optHash(p *uint64) {
	if p == nil {
		w.nil_()
		return
	}
	w.hash(*p)
}

func (w *writer) hashes(hs []uint64) {
	w.arrayLen(len(hs))
	for _, h := range hs {
		w.hash(h)
	}
}

func (w *writer) tokens(ts []uint32) {
	w.arrayLen(len(ts))
	for _, t := range ts {
		w.set(w.enc.EncodeUint(uint64(t)))
	}
}

func (w *writer) extraKeys(ek [][]any) {
	if ek == nil {
		w.nil_()
		return
	}
	w.arrayLen(len(ek))
	for _, keys := range ek {
		if keys == nil {
			w.nil_()
			continue
		}
		w.arrayLen(len(keys))
		for _, k := range keys {
			w.set(w.enc.Encode(k))
		}
	}
}

func (w *writer) key(k string) {
	if w.opts.Encoding == TaggedMap {
		w.str(k)
	}
}

func (w *writer) batch(b *Batch) {
	n := 3
	if b.DPRank == nil {
		n = 2 // the default omitted: trailing, or a map key left out
	}
	if w.opts.Batch == BatchMap {
		w.mapLen(n)
		w.str("ts")
	} else {
		w.arrayLen(n)
	}
	w.set(w.enc.EncodeFloat64(b.Timestamp))
	if w.opts.Batch == BatchMap {
		w.str("events")
	}
	w.arrayLen(len(b.Events))
	for _, ev := range b.Events {
		w.event(ev)
		if w.err != nil {
			return
		}
	}
	if b.DPRank != nil {
		if w.opts.Batch == BatchMap {
			w.str("data_parallel_rank")
		}
		w.int(*b.DPRank)
	}
}

func (w *writer) event(ev Event) {
	switch e := valueOf(ev).(type) {
	case BlockStored:
		w.blockStored(&e)
	case BlockRemoved:
		w.blockRemoved(&e)
	case AllBlocksCleared:
		w.header(TagAllBlocksCleared, 0)
	case nil:
		w.set(fmt.Errorf("kvevents: nil event %T", ev))
	default:
		w.set(fmt.Errorf("kvevents: unsupported event type %T", ev))
	}
}

// header starts an event with nfields fields.
func (w *writer) header(tag string, nfields int) {
	if w.opts.Encoding == TaggedMap {
		w.mapLen(nfields + 1)
		w.str("type")
	} else {
		w.arrayLen(nfields + 1)
	}
	w.str(tag)
}

func (w *writer) blockStored(e *BlockStored) {
	if e.ExtraKeys != nil && len(e.ExtraKeys) != len(e.BlockHashes) {
		w.set(fmt.Errorf("kvevents: BlockStored has %d extra_keys entries for %d blocks",
			len(e.ExtraKeys), len(e.BlockHashes)))
		return
	}
	const required = 7
	set := [4]bool{
		e.ExtraKeys != nil,
		e.GroupIdx != nil,
		e.KVCacheSpecKind != "",
		e.KVCacheSpecSlidingWindow != nil,
	}
	n := required
	if w.opts.Encoding == TaggedMap {
		for _, s := range set {
			if s {
				n++
			}
		}
	} else {
		for i := len(set) - 1; i >= 0; i-- {
			if set[i] {
				n = required + i + 1
				break
			}
		}
	}
	w.header(TagBlockStored, n)
	w.key("block_hashes")
	w.hashes(e.BlockHashes)
	w.key("parent_block_hash")
	w.optHash(e.ParentBlockHash)
	w.key("token_ids")
	w.tokens(e.TokenIDs)
	w.key("block_size")
	w.int(e.BlockSize)
	w.key("lora_id")
	w.optInt(e.LoRAID)
	w.key("medium")
	w.optStr(e.Medium)
	w.key("lora_name")
	w.optStr(e.LoRAName)
	// Optional fields: positional emits all up to the last set one (unset
	// ones as nil); tagged map emits only the set ones.
	emit := func(i int) bool {
		if w.opts.Encoding == TaggedMap {
			return set[i]
		}
		return required+i < n
	}
	if emit(0) {
		w.key("extra_keys")
		w.extraKeys(e.ExtraKeys)
	}
	if emit(1) {
		w.key("group_idx")
		w.optInt(e.GroupIdx)
	}
	if emit(2) {
		w.key("kv_cache_spec_kind")
		w.optStr(e.KVCacheSpecKind)
	}
	if emit(3) {
		w.key("kv_cache_spec_sliding_window")
		w.optInt(e.KVCacheSpecSlidingWindow)
	}
}

func (w *writer) blockRemoved(e *BlockRemoved) {
	n := 2
	if e.GroupIdx != nil {
		n = 3
	}
	w.header(TagBlockRemoved, n)
	w.key("block_hashes")
	w.hashes(e.BlockHashes)
	w.key("medium")
	w.optStr(e.Medium)
	if e.GroupIdx != nil {
		w.key("group_idx")
		w.int(*e.GroupIdx)
	}
}
