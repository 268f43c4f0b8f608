package kvevents

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// ErrMalformed is wrapped by the errors of Decode: the payload is not a
// batch in vLLM's format.
var ErrMalformed = errors.New("kvevents: malformed payload")

// Decode parses a payload in vLLM's format, as an Encoder writes it or
// vLLM publishes it: events positional or tagged maps, hashes integers or
// bytes, the batch an array [ts, events, dp_rank] (or a map with the keys
// "ts", "events" and "data_parallel_rank"). Fields it does not know (a
// newer vLLM's trailing fields) are skipped. A bytes hash longer than 8
// bytes is read as its low 64 bits (its last 8 bytes, big-endian), the
// way vLLM turns a full hash into an integer one. Events come back as
// values (BlockStored, not *BlockStored); integers among extra keys come
// back as int64, or uint64 above math.MaxInt64, whatever width the sender
// wrote.
//
// Decode is for consumers: a router written in Go, a test, an audit. It
// reads untrusted bytes: what it allocates is bounded by the payload's
// size, and values nest at most MaxDepth deep. Its errors wrap
// ErrMalformed.
func Decode(payload []byte) (Batch, error) {
	// A bytes.Reader is an io.ByteScanner, so the decoder reads it
	// without a buffer of its own and r.Len says what is left.
	r := bytes.NewReader(payload)
	p := parser{payload: payload, r: r, dec: msgpack.NewDecoder(r)}
	v, err := p.value(0)
	if err != nil {
		return Batch{}, err
	}
	if r.Len() > 0 {
		return Batch{}, fmt.Errorf("%w: %d bytes after the batch", ErrMalformed, r.Len())
	}
	var ts, events, rank any
	switch b := v.(type) {
	case []any:
		if len(b) < 2 || len(b) > 3 {
			return Batch{}, fmt.Errorf("%w: a batch array of %d elements, want 2 or 3", ErrMalformed, len(b))
		}
		ts, events = b[0], b[1]
		if len(b) == 3 {
			rank = b[2]
		}
	case map[string]any:
		ts, events, rank = b["ts"], b["events"], b["data_parallel_rank"]
	default:
		return Batch{}, fmt.Errorf("%w: a batch of type %T", ErrMalformed, v)
	}
	var out Batch
	var ok bool
	if out.Timestamp, ok = toFloat(ts); !ok {
		return Batch{}, fmt.Errorf("%w: timestamp %v", ErrMalformed, ts)
	}
	if rank != nil {
		r, err := toInt("data_parallel_rank", rank)
		if err != nil {
			return Batch{}, err
		}
		out.DPRank = &r
	}
	evs, ok := events.([]any)
	if !ok {
		return Batch{}, fmt.Errorf("%w: events of type %T", ErrMalformed, events)
	}
	out.Events = make([]Event, 0, len(evs))
	for i, e := range evs {
		ev, err := decodeEvent(e)
		if err != nil {
			return Batch{}, fmt.Errorf("event %d: %w", i, err)
		}
		out.Events = append(out.Events, ev)
	}
	return out, nil
}

// fields names the fields of each event kind in their positional order.
var fields = map[string][]string{
	TagBlockStored: {"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium",
		"lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window"},
	TagBlockRemoved:     {"block_hashes", "medium", "group_idx"},
	TagAllBlocksCleared: {},
}

// decodeEvent turns one decoded event, an array or a map, into an Event.
func decodeEvent(v any) (Event, error) {
	var tag string
	f := map[string]any{}
	switch e := v.(type) {
	case []any:
		if len(e) == 0 {
			return nil, fmt.Errorf("%w: an empty event", ErrMalformed)
		}
		tag, _ = e[0].(string)
		names, ok := fields[tag]
		if !ok {
			return nil, fmt.Errorf("%w: event tag %v", ErrMalformed, e[0])
		}
		for i, x := range e[1:] {
			if i < len(names) {
				f[names[i]] = x
			}
		}
	case map[string]any:
		tag, _ = e["type"].(string)
		if _, ok := fields[tag]; !ok {
			return nil, fmt.Errorf("%w: event type %v", ErrMalformed, e["type"])
		}
		f = e
	default:
		return nil, fmt.Errorf("%w: an event of type %T", ErrMalformed, v)
	}
	var err error
	switch tag {
	case TagBlockStored:
		var s BlockStored
		if s.BlockHashes, err = toHashes(f["block_hashes"]); err != nil {
			return nil, err
		}
		if p := f["parent_block_hash"]; p != nil {
			h, err := toHash(p)
			if err != nil {
				return nil, err
			}
			s.ParentBlockHash = &h
		}
		if s.TokenIDs, err = toTokens(f["token_ids"]); err != nil {
			return nil, err
		}
		if s.BlockSize, err = toInt("block_size", f["block_size"]); err != nil {
			return nil, err
		}
		if s.LoRAID, err = toOptInt("lora_id", f["lora_id"]); err != nil {
			return nil, err
		}
		if s.Medium, err = toStr("medium", f["medium"]); err != nil {
			return nil, err
		}
		if s.LoRAName, err = toStr("lora_name", f["lora_name"]); err != nil {
			return nil, err
		}
		if s.ExtraKeys, err = toExtraKeys(f["extra_keys"], len(s.BlockHashes)); err != nil {
			return nil, err
		}
		if s.GroupIdx, err = toOptInt("group_idx", f["group_idx"]); err != nil {
			return nil, err
		}
		if s.KVCacheSpecKind, err = toStr("kv_cache_spec_kind", f["kv_cache_spec_kind"]); err != nil {
			return nil, err
		}
		if s.KVCacheSpecSlidingWindow, err = toOptInt("kv_cache_spec_sliding_window", f["kv_cache_spec_sliding_window"]); err != nil {
			return nil, err
		}
		return s, nil
	case TagBlockRemoved:
		var r BlockRemoved
		if r.BlockHashes, err = toHashes(f["block_hashes"]); err != nil {
			return nil, err
		}
		if r.Medium, err = toStr("medium", f["medium"]); err != nil {
			return nil, err
		}
		if r.GroupIdx, err = toOptInt("group_idx", f["group_idx"]); err != nil {
			return nil, err
		}
		return r, nil
	}
	return AllBlocksCleared{}, nil
}

// MaxDepth is how deep Decode lets values nest: a batch, its events, an
// event, its extra keys and their values need 5 or 6 levels.
const MaxDepth = 32

// parser reads msgpack values with the limits untrusted input needs:
// msgpack's own generic decoding sizes a slice or map from its length
// header, so 5 bytes can claim 4 billion elements; it allocates a bin
// value's bytes from its header too (5 bytes can claim 4 GiB); and it
// recurses without a bound.
type parser struct {
	payload []byte
	r       *bytes.Reader // reads payload; the decoder has no buffer of its own
	dec     *msgpack.Decoder
}

// sized returns the length that the str, bin or ext header at the
// reader's position claims for its data, and how many bytes the header
// takes. ok is false for any other value, and for a header cut short
// (which the decoder reports).
func (p *parser) sized() (n, header int, ok bool) {
	b := p.payload[len(p.payload)-p.r.Len():]
	if len(b) == 0 {
		return 0, 0, false
	}
	c := b[0]
	var width int
	switch c {
	case msgpcode.Str8, msgpcode.Bin8, msgpcode.Ext8:
		width = 1
	case msgpcode.Str16, msgpcode.Bin16, msgpcode.Ext16:
		width = 2
	case msgpcode.Str32, msgpcode.Bin32, msgpcode.Ext32:
		width = 4
	default:
		if msgpcode.IsFixedString(c) {
			return int(c & 0x1f), 1, true
		}
		return 0, 0, false
	}
	header = 1 + width
	if msgpcode.IsExt(c) {
		header++ // the ext type byte
	}
	if len(b) < header {
		return 0, 0, false
	}
	for _, x := range b[1 : 1+width] {
		n = n<<8 | int(x)
	}
	return n, header, true
}

// value reads one value at nesting depth. Every integer comes back as an
// int64, or a uint64 when it does not fit, whatever width the sender
// chose. (msgpack's loose mode would do that too, but it also turns bytes
// into strings, and a bytes hash is not a string.) Maps must have string
// keys.
func (p *parser) value(depth int) (any, error) {
	if depth > MaxDepth {
		return nil, fmt.Errorf("%w: values nest deeper than %d", ErrMalformed, MaxDepth)
	}
	c, err := p.dec.PeekCode()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	switch {
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		n, err := p.dec.DecodeArrayLen()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
		}
		if n > p.r.Len() { // every element takes a byte at least
			return nil, fmt.Errorf("%w: an array of %d elements in %d bytes", ErrMalformed, n, p.r.Len())
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = p.value(depth + 1); err != nil {
				return nil, err
			}
		}
		return out, nil
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		n, err := p.dec.DecodeMapLen()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
		}
		if n > p.r.Len()/2 {
			return nil, fmt.Errorf("%w: a map of %d entries in %d bytes", ErrMalformed, n, p.r.Len())
		}
		out := make(map[string]any, n)
		for range n {
			k, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			key, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("%w: a map key %v of type %T", ErrMalformed, k, k)
			}
			if out[key], err = p.value(depth + 1); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	// A scalar. A str, bin or ext value must fit in what is left before
	// the decoder allocates its length.
	if n, header, ok := p.sized(); ok && n > p.r.Len()-header {
		return nil, fmt.Errorf("%w: a value of %d bytes in %d", ErrMalformed, n, p.r.Len()-header)
	}
	v, err := p.dec.DecodeInterface()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	switch x := v.(type) {
	case int8:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case uint8:
		return int64(x), nil
	case uint16:
		return int64(x), nil
	case uint32:
		return int64(x), nil
	case uint64:
		if x <= math.MaxInt64 {
			return int64(x), nil
		}
	}
	return v, nil
}

func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case int64:
		return float64(x), true
	case uint64:
		return float64(x), true
	}
	return 0, false
}

func toInt(name string, v any) (int, error) {
	switch x := v.(type) {
	case int64:
		if x >= math.MinInt && x <= math.MaxInt {
			return int(x), nil
		}
	case uint64:
		if x <= math.MaxInt {
			return int(x), nil
		}
	}
	return 0, fmt.Errorf("%w: %s %v is not an int", ErrMalformed, name, v)
}

func toOptInt(name string, v any) (*int, error) {
	if v == nil {
		return nil, nil
	}
	n, err := toInt(name, v)
	return &n, err
}

func toStr(name string, v any) (string, error) {
	if v == nil {
		return "", nil
	}
	if s, ok := v.(string); ok {
		return s, nil
	}
	return "", fmt.Errorf("%w: %s %v is not a string", ErrMalformed, name, v)
}

func toHash(v any) (uint64, error) {
	switch x := v.(type) {
	case uint64:
		return x, nil
	case int64:
		if x >= 0 {
			return uint64(x), nil
		}
	case []byte:
		if len(x) > 0 {
			if len(x) > 8 {
				x = x[len(x)-8:]
			}
			var b [8]byte
			copy(b[8-len(x):], x)
			return binary.BigEndian.Uint64(b[:]), nil
		}
	}
	return 0, fmt.Errorf("%w: block hash %v", ErrMalformed, v)
}

func toHashes(v any) ([]uint64, error) {
	xs, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: block_hashes of type %T", ErrMalformed, v)
	}
	out := make([]uint64, len(xs))
	for i, x := range xs {
		h, err := toHash(x)
		if err != nil {
			return nil, err
		}
		out[i] = h
	}
	return out, nil
}

func toTokens(v any) ([]uint32, error) {
	xs, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: token_ids of type %T", ErrMalformed, v)
	}
	out := make([]uint32, len(xs))
	for i, x := range xs {
		n, err := toInt("token id", x)
		if err != nil || n < 0 || n > math.MaxUint32 {
			return nil, fmt.Errorf("%w: token id %v", ErrMalformed, x)
		}
		out[i] = uint32(n)
	}
	return out, nil
}

func toExtraKeys(v any, blocks int) ([][]any, error) {
	if v == nil {
		return nil, nil
	}
	xs, ok := v.([]any)
	if !ok || len(xs) != blocks {
		return nil, fmt.Errorf("%w: extra_keys %v for %d blocks", ErrMalformed, v, blocks)
	}
	out := make([][]any, len(xs))
	for i, x := range xs {
		if x == nil {
			continue
		}
		keys, ok := x.([]any)
		if !ok {
			return nil, fmt.Errorf("%w: extra_keys entry %v", ErrMalformed, x)
		}
		out[i] = keys
	}
	return out, nil
}
