package kvevents

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"runtime"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// decodeCases are events of every kind with every field set or unset.
func decodeCases() []Event {
	return []Event{
		BlockStored{BlockHashes: []uint64{math.MaxUint64 - 5, 7}, TokenIDs: []uint32{1, 2, 70000, math.MaxUint32}, BlockSize: 2},
		&BlockStored{BlockHashes: []uint64{1}, ParentBlockHash: Ptr[uint64](math.MaxUint64), TokenIDs: []uint32{5},
			BlockSize: 1, LoRAID: Ptr(3), Medium: MediumCPU, LoRAName: "ad"},
		BlockStored{BlockHashes: []uint64{1}, TokenIDs: []uint32{5}, BlockSize: 1, Medium: MediumGPU, GroupIdx: Ptr(0)},
		BlockStored{BlockHashes: []uint64{1, 2}, TokenIDs: []uint32{5, 6}, BlockSize: 1, Medium: "DISK",
			ExtraKeys: [][]any{nil, {"salt", int64(-3), int64(9), []byte{1}}}, GroupIdx: Ptr(2),
			KVCacheSpecKind: "sliding_window", KVCacheSpecSlidingWindow: Ptr(4096)},
		&BlockRemoved{BlockHashes: []uint64{math.MaxUint64}, Medium: MediumGPU},
		BlockRemoved{BlockHashes: []uint64{9}, GroupIdx: Ptr(1)},
		AllBlocksCleared{},
		&AllBlocksCleared{},
	}
}

// TestDecodeInvertsEncode: Decode gives back every event an Encoder
// wrote, in both layouts and both hash encodings, with and without a DP
// rank.
func TestDecodeInvertsEncode(t *testing.T) {
	for _, o := range []EncoderOptions{{Positional, HashInt, BatchArray}, {Positional, HashBytes, BatchArray}, {TaggedMap, HashInt, BatchArray}, {TaggedMap, HashBytes, BatchArray},
		{Positional, HashInt, BatchMap}, {TaggedMap, HashBytes, BatchMap}} {
		for _, rank := range []*int{nil, Ptr(5)} {
			in := Batch{Timestamp: 1.7e9 + 0.25, Events: decodeCases(), DPRank: rank}
			got, err := Decode(encodeOrFail(t, o, in))
			if err != nil {
				t.Fatalf("%+v: %v", o, err)
			}
			want := Batch{Timestamp: in.Timestamp, DPRank: rank}
			for _, e := range in.Events {
				want.Events = append(want.Events, valueOf(e))
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%+v rank %v:\ngot  %#v\nwant %#v", o, rank, got, want)
			}
		}
	}
}

// TestDecodeForeignLayouts: what vLLM may send beside what an Encoder
// writes: a batch as a map, trailing fields Decode does not know, a
// 32-byte hash (its low 64 bits), an integer timestamp.
func TestDecodeForeignLayouts(t *testing.T) {
	full := make([]byte, 32)
	for i := range full {
		full[i] = byte(i)
	}
	raw, err := msgpack.Marshal(map[string]any{
		"ts": 12,
		"events": []any{
			[]any{TagBlockStored, []any{full}, nil, []any{1, 2}, 2, nil, "GPU", nil, nil, nil, nil, nil, "future"},
			map[string]any{"type": TagBlockRemoved, "block_hashes": []any{uint64(3)}, "medium": "CPU", "locality": "rack1"},
		},
		"data_parallel_rank": 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	want := Batch{Timestamp: 12, DPRank: Ptr(2), Events: []Event{
		BlockStored{BlockHashes: []uint64{0x18191a1b1c1d1e1f}, TokenIDs: []uint32{1, 2}, BlockSize: 2, Medium: "GPU"},
		BlockRemoved{BlockHashes: []uint64{3}, Medium: "CPU"},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %#v\nwant %#v", got, want)
	}
}

// TestDecodeRejects: every malformed payload is an error wrapping
// ErrMalformed, never a panic.
func TestDecodeRejects(t *testing.T) {
	for name, v := range map[string]any{
		"not an array":       "batch",
		"short batch":        []any{1.0},
		"long batch":         []any{1.0, []any{}, 0, 1},
		"bad timestamp":      []any{"now", []any{}},
		"bad rank":           []any{1.0, []any{}, "zero"},
		"events not a list":  []any{1.0, 5},
		"empty event":        []any{1.0, []any{[]any{}}},
		"unknown tag":        []any{1.0, []any{[]any{"BlockEvicted", []any{1}}}},
		"unknown type":       []any{1.0, []any{map[string]any{"type": "X"}}},
		"event not a list":   []any{1.0, []any{7}},
		"negative hash":      []any{1.0, []any{[]any{TagBlockRemoved, []any{-1}, "GPU"}}},
		"empty bytes hash":   []any{1.0, []any{[]any{TagBlockRemoved, []any{[]byte{}}, "GPU"}}},
		"hashes not a list":  []any{1.0, []any{[]any{TagBlockRemoved, 5, "GPU"}}},
		"bad medium":         []any{1.0, []any{[]any{TagBlockRemoved, []any{1}, 5}}},
		"bad parent":         []any{1.0, []any{[]any{TagBlockStored, []any{1}, "p", []any{1}, 1, nil, "GPU", nil}}},
		"negative token":     []any{1.0, []any{[]any{TagBlockStored, []any{1}, nil, []any{-1}, 1, nil, "GPU", nil}}},
		"huge token":         []any{1.0, []any{[]any{TagBlockStored, []any{1}, nil, []any{uint64(1) << 32}, 1, nil, "GPU", nil}}},
		"bad block size":     []any{1.0, []any{[]any{TagBlockStored, []any{1}, nil, []any{1}, "one", nil, "GPU", nil}}},
		"extra keys count":   []any{1.0, []any{[]any{TagBlockStored, []any{1}, nil, []any{1}, 1, nil, "GPU", nil, []any{nil, nil}}}},
		"extra keys entry":   []any{1.0, []any{[]any{TagBlockStored, []any{1}, nil, []any{1}, 1, nil, "GPU", nil, []any{5}}}},
		"no events":          []any{1.0, nil},
		"map without events": map[string]any{"ts": 1.0},
		"no token ids":       []any{1.0, []any{[]any{TagBlockStored, []any{1}, nil, nil, 1, nil, "GPU", nil}}},
		"int map key":        []any{1.0, []any{map[int]any{1: 2}}},
	} {
		raw, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Decode(raw); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: error %v, want ErrMalformed", name, err)
		}
	}
	// Untrusted lengths and depths: an array, map, str, bin or ext header
	// claiming billions of elements or bytes in a few bytes must not
	// allocate them, and deep nesting must not exhaust the stack.
	deep := bytes.Repeat([]byte{0x91}, 5<<20)
	for _, raw := range [][]byte{nil, {0xc1}, {0x92, 0xcb}, append(encodeOrFail(t, EncoderOptions{}, Batch{}), 0),
		{0xdd, 0xff, 0xff, 0xff, 0xff}, {0xdf, 0x10, 0, 0, 0}, {0xdf, 0x01, 0, 0, 0}, {0xdb, 0xff, 0xff, 0xff, 0xff},
		{0xc6, 0xff, 0xff, 0xff, 0xff}, {0xc6, 0x92, 0x30, 0x35, 0x30, 0x1a, 0x30, 0x30}, {0xc9, 0xff, 0xff, 0xff, 0xff, 0x05},
		{0xc5, 0xff, 0xff}, {0xda, 0xff, 0xff}, {0x92, 0x01, 0x91, 0xc6, 0x7f, 0xff, 0xff, 0xff}, {0xc4, 0x02, 0x00},
		deep, append(bytes.Repeat([]byte{0x91}, MaxDepth+2), 0xc0)} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := Decode(raw)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%x: error %v, want ErrMalformed", raw[:min(len(raw), 16)], err)
		}
		// The bound is loose (other goroutines may allocate meanwhile);
		// a header's claimed length is gigabytes.
		if alloc, limit := after.TotalAlloc-before.TotalAlloc, uint64(1<<20+16*len(raw)); alloc > limit {
			t.Errorf("%x: Decode allocated %d bytes for a %d-byte payload, want at most %d",
				raw[:min(len(raw), 16)], alloc, len(raw), limit)
		}
	}
}

// FuzzDecode: Decode never panics, and what it accepts an Encoder writes
// back to a payload that decodes to the same batch.
func FuzzDecode(f *testing.F) {
	for _, o := range []EncoderOptions{{Positional, HashInt, BatchArray}, {TaggedMap, HashBytes, BatchArray}} {
		f.Add(encodeOrFail(f, o, Batch{Timestamp: 3, Events: decodeCases(), DPRank: Ptr(1)}))
	}
	f.Add([]byte{0x92, 0x01, 0x90})
	enc, err := NewEncoder(EncoderOptions{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		b, err := Decode(raw)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		again, err := enc.Encode(b)
		if err != nil {
			return // e.g. extra_keys holding a value msgpack cannot write back
		}
		b2, err := Decode(again)
		if err != nil {
			t.Fatalf("re-encoded batch does not decode: %v", err)
		}
		if !reflect.DeepEqual(normalize(b), normalize(b2)) {
			t.Fatalf("round trip changed the batch:\n%#v\n%#v", b, b2)
		}
	})
}

// normalize makes a batch comparable after a round trip: NaN timestamps
// compare unequal to themselves, and the empty events list may come back
// as a non-nil empty slice.
func normalize(b Batch) Batch {
	if math.IsNaN(b.Timestamp) {
		b.Timestamp = 0
	}
	if len(b.Events) == 0 {
		b.Events = nil
	}
	return b
}

// TestIndexSkipsNilEvents: a nil event pointer in a batch is skipped by
// Index.Apply, not dereferenced.
func TestIndexSkipsNilEvents(t *testing.T) {
	var ix Index
	ix.Apply("s", Batch{Events: []Event{(*BlockStored)(nil), (*BlockRemoved)(nil), (*AllBlocksCleared)(nil), nil,
		BlockStored{BlockHashes: []uint64{1}, TokenIDs: []uint32{1}, BlockSize: 1, Medium: MediumGPU}}})
	if got := ix.Media("s", 1); len(got) != 1 || got[0] != MediumGPU {
		t.Fatalf("media %v", got)
	}
}
