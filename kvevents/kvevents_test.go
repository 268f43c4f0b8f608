package kvevents

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
)

// ---- independent minimal msgpack decoder (test only) ----

// mpBin distinguishes bin from str in decoded values.
type mpBin []byte

// mpMap keeps key order.
type mpMap struct {
	keys []string
	vals []any
}

type mpDec struct {
	b []byte
	i int
}

var errShort = errors.New("short buffer")

func (d *mpDec) take(n int) ([]byte, error) {
	if d.i+n > len(d.b) {
		return nil, errShort
	}
	s := d.b[d.i : d.i+n]
	d.i += n
	return s, nil
}

func (d *mpDec) uintN(n int) (uint64, error) {
	s, err := d.take(n)
	if err != nil {
		return 0, err
	}
	var v uint64
	for _, c := range s {
		v = v<<8 | uint64(c)
	}
	return v, nil
}

// decode returns nil, bool, int64 (negative or small), uint64 (for uint
// formats and positive fixints), float64, string, mpBin, []any, mpMap.
func (d *mpDec) decode() (any, error) {
	s, err := d.take(1)
	if err != nil {
		return nil, err
	}
	c := s[0]
	switch {
	case c <= 0x7f:
		return uint64(c), nil
	case c >= 0xe0:
		return int64(int8(c)), nil
	case c&0xe0 == 0xa0:
		return d.str(int(c & 0x1f))
	case c&0xf0 == 0x90:
		return d.array(int(c & 0x0f))
	case c&0xf0 == 0x80:
		return d.mapN(int(c & 0x0f))
	}
	switch c {
	case 0xc0:
		return nil, nil
	case 0xc2:
		return false, nil
	case 0xc3:
		return true, nil
	case 0xc4, 0xc5, 0xc6:
		n, err := d.uintN(1 << (c - 0xc4))
		if err != nil {
			return nil, err
		}
		b, err := d.take(int(n))
		return mpBin(bytes.Clone(b)), err
	case 0xcb:
		v, err := d.uintN(8)
		return math.Float64frombits(v), err
	case 0xcc, 0xcd, 0xce, 0xcf:
		return d.uintN(1 << (c - 0xcc))
	case 0xd0, 0xd1, 0xd2, 0xd3:
		n := 1 << (c - 0xd0)
		v, err := d.uintN(n)
		if err != nil {
			return nil, err
		}
		shift := 64 - 8*n
		return int64(v<<shift) >> shift, nil
	case 0xd9, 0xda, 0xdb:
		n, err := d.uintN(1 << (c - 0xd9))
		if err != nil {
			return nil, err
		}
		return d.str(int(n))
	case 0xdc, 0xdd:
		n, err := d.uintN(2 << (c - 0xdc))
		if err != nil {
			return nil, err
		}
		return d.array(int(n))
	case 0xde, 0xdf:
		n, err := d.uintN(2 << (c - 0xde))
		if err != nil {
			return nil, err
		}
		return d.mapN(int(n))
	}
	return nil, fmt.Errorf("unsupported msgpack byte 0x%02x at %d", c, d.i-1)
}

func (d *mpDec) str(n int) (any, error) {
	b, err := d.take(n)
	return string(b), err
}

func (d *mpDec) array(n int) (any, error) {
	out := make([]any, n)
	for i := range out {
		v, err := d.decode()
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func (d *mpDec) mapN(n int) (any, error) {
	var m mpMap
	for range n {
		k, err := d.decode()
		if err != nil {
			return nil, err
		}
		ks, ok := k.(string)
		if !ok {
			return nil, fmt.Errorf("non-string map key %T", k)
		}
		v, err := d.decode()
		if err != nil {
			return nil, err
		}
		m.keys = append(m.keys, ks)
		m.vals = append(m.vals, v)
	}
	return m, nil
}

func mpDecode(t testing.TB, b []byte) any {
	t.Helper()
	d := &mpDec{b: b}
	v, err := d.decode()
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if d.i != len(b) {
		t.Fatalf("trailing %d bytes", len(b)-d.i)
	}
	return v
}

// ---- round trip ----

func encodeOrFail(t testing.TB, o EncoderOptions, b Batch) []byte {
	t.Helper()
	enc, err := NewEncoder(o)
	if err != nil {
		t.Fatal(err)
	}
	p, err := enc.Encode(b)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// h is how a hash must appear after decoding.
func h(o EncoderOptions, v uint64) any {
	if o.HashEncoding == HashBytes {
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], v)
		return mpBin(b[:])
	}
	return v
}

func u(v uint64) any { return v }

// expect builds the expected decoded event from ordered (name, value) pairs
// for either layout.
func expect(o EncoderOptions, tag string, kv ...any) any {
	if o.Encoding == TaggedMap {
		m := mpMap{keys: []string{"type"}, vals: []any{tag}}
		for i := 0; i < len(kv); i += 2 {
			m.keys = append(m.keys, kv[i].(string))
			m.vals = append(m.vals, kv[i+1])
		}
		return m
	}
	a := []any{tag}
	for i := 1; i < len(kv); i += 2 {
		a = append(a, kv[i])
	}
	return a
}

// expectBatch builds the expected decoded batch for o's layout: vLLM's
// EventBatch fields in declaration order (ts, events, data_parallel_rank),
// the rank, whose default is None, left out when rank is nil.
func expectBatch(o EncoderOptions, ts float64, events []any, rank any) any {
	if o.Batch == BatchMap {
		m := mpMap{keys: []string{"ts", "events"}, vals: []any{ts, events}}
		if rank != nil {
			m.keys = append(m.keys, "data_parallel_rank")
			m.vals = append(m.vals, rank)
		}
		return m
	}
	if rank != nil {
		return []any{ts, events, rank}
	}
	return []any{ts, events}
}

func TestRoundTrip(t *testing.T) {
	for _, o := range []EncoderOptions{
		{Positional, HashInt, BatchArray}, {Positional, HashBytes, BatchArray},
		{TaggedMap, HashInt, BatchArray}, {TaggedMap, HashBytes, BatchArray},
		{Positional, HashInt, BatchMap}, {TaggedMap, HashBytes, BatchMap},
	} {
		t.Run(fmt.Sprintf("enc%d_hash%d_batch%d", o.Encoding, o.HashEncoding, o.Batch), func(t *testing.T) {
			const big = math.MaxUint64 - 5
			tokens := []uint32{1, 2, 70000, math.MaxUint32}
			cases := []struct {
				name string
				ev   Event
				want any
			}{
				{"stored_minimal", &BlockStored{
					BlockHashes: []uint64{big, 7}, TokenIDs: tokens, BlockSize: 2,
				}, expect(o, TagBlockStored,
					"block_hashes", []any{h(o, big), h(o, 7)},
					"parent_block_hash", nil,
					"token_ids", []any{u(1), u(2), u(70000), u(math.MaxUint32)},
					"block_size", u(2),
					"lora_id", nil,
					"medium", nil,
					"lora_name", nil)},
				{"stored_required_set", BlockStored{
					BlockHashes: []uint64{1}, ParentBlockHash: Ptr[uint64](big),
					TokenIDs: []uint32{5}, BlockSize: 1, LoRAID: Ptr(3),
					Medium: MediumCPU, LoRAName: "ad",
				}, expect(o, TagBlockStored,
					"block_hashes", []any{h(o, 1)},
					"parent_block_hash", h(o, big),
					"token_ids", []any{u(5)},
					"block_size", u(1),
					"lora_id", u(3),
					"medium", "CPU",
					"lora_name", "ad")},
				// Only group_idx set: positional writes extra_keys as nil
				// and stops after group_idx; the map has only group_idx.
				{"stored_group_only", &BlockStored{
					BlockHashes: []uint64{1}, TokenIDs: []uint32{5}, BlockSize: 1,
					Medium: MediumGPU, GroupIdx: Ptr(0),
				}, func() any {
					if o.Encoding == TaggedMap {
						return expect(o, TagBlockStored,
							"block_hashes", []any{h(o, 1)}, "parent_block_hash", nil,
							"token_ids", []any{u(5)}, "block_size", u(1), "lora_id", nil,
							"medium", "GPU", "lora_name", nil, "group_idx", u(0))
					}
					return []any{TagBlockStored, []any{h(o, 1)}, nil, []any{u(5)}, u(1),
						nil, "GPU", nil, nil, u(0)}
				}()},
				{"stored_all", &BlockStored{
					BlockHashes: []uint64{1, 2}, TokenIDs: []uint32{5, 6}, BlockSize: 1,
					Medium: "DISK", ExtraKeys: [][]any{nil, {"salt", int64(-3)}},
					GroupIdx: Ptr(2), KVCacheSpecKind: "sliding_window",
					KVCacheSpecSlidingWindow: Ptr(4096),
				}, expect(o, TagBlockStored,
					"block_hashes", []any{h(o, 1), h(o, 2)},
					"parent_block_hash", nil,
					"token_ids", []any{u(5), u(6)},
					"block_size", u(1),
					"lora_id", nil,
					"medium", "DISK",
					"lora_name", nil,
					"extra_keys", []any{nil, []any{"salt", int64(-3)}},
					"group_idx", u(2),
					"kv_cache_spec_kind", "sliding_window",
					"kv_cache_spec_sliding_window", u(4096))},
				{"removed", &BlockRemoved{BlockHashes: []uint64{big}, Medium: MediumGPU},
					expect(o, TagBlockRemoved, "block_hashes", []any{h(o, big)}, "medium", "GPU")},
				{"removed_group", BlockRemoved{BlockHashes: []uint64{9}, GroupIdx: Ptr(1)},
					expect(o, TagBlockRemoved, "block_hashes", []any{h(o, 9)}, "medium", nil,
						"group_idx", u(1))},
				{"cleared", AllBlocksCleared{}, expect(o, TagAllBlocksCleared)},
				{"cleared_ptr", &AllBlocksCleared{}, expect(o, TagAllBlocksCleared)},
			}
			var evs []Event
			var wantEvs []any
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					got := mpDecode(t, encodeOrFail(t, o, Batch{Timestamp: 1.5, Events: []Event{c.ev}}))
					want := expectBatch(o, 1.5, []any{c.want}, nil)
					if !reflect.DeepEqual(got, want) {
						t.Fatalf("got  %#v\nwant %#v", got, want)
					}
				})
				evs = append(evs, c.ev)
				wantEvs = append(wantEvs, c.want)
			}
			// All kinds in one batch, with a DP rank.
			ts := 1.7e9 + 0.123
			got := mpDecode(t, encodeOrFail(t, o, Batch{Timestamp: ts, Events: evs, DPRank: Ptr(3)}))
			want := expectBatch(o, ts, wantEvs, u(3))
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("batch: got %#v\nwant %#v", got, want)
			}
		})
	}
}

func TestEncodeErrors(t *testing.T) {
	enc, err := NewEncoder(EncoderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bad := []Event{
		(*BlockStored)(nil),
		(*BlockRemoved)(nil),
		&BlockStored{BlockHashes: []uint64{1}, ExtraKeys: [][]any{nil, nil}},
		&BlockStored{BlockHashes: []uint64{1}, ExtraKeys: [][]any{{make(chan int)}}},
	}
	for i, ev := range bad {
		if _, err := enc.Encode(Batch{Events: []Event{ev}}); err == nil {
			t.Errorf("case %d: expected error", i)
		}
	}
	if _, err := NewEncoder(EncoderOptions{Encoding: 7}); err == nil {
		t.Error("expected error for bad encoding")
	}
	if _, err := NewEncoder(EncoderOptions{Batch: 2}); err == nil {
		t.Error("expected error for bad batch layout")
	}
}

func TestSeqTracker(t *testing.T) {
	var tr SeqTracker
	type gapR struct{ from, to uint64 }
	var gaps []gapR
	for _, s := range []uint64{0, 1, 2, 5, 6, 6, 3, 10} {
		from, to, gap, _ := tr.Observe(s)
		if gap {
			gaps = append(gaps, gapR{from, to})
		}
	}
	want := []gapR{{3, 5}, {7, 10}}
	if !reflect.DeepEqual(gaps, want) || tr.Next() != 11 {
		t.Fatalf("gaps %v next %d", gaps, tr.Next())
	}
	// A late joiner sees a gap from 0.
	var late SeqTracker
	if from, to, gap, ok := late.Observe(4); !gap || from != 0 || to != 4 || !ok {
		t.Fatal("late joiner gap not reported")
	}
}

// ---- over ZMQ ----

func testBatch(i int) Batch {
	return Batch{Timestamp: float64(i), Events: []Event{&BlockStored{
		BlockHashes: []uint64{uint64(i)}, TokenIDs: []uint32{1, 2}, BlockSize: 2, Medium: MediumGPU,
	}}}
}

func newTestPublisher(t *testing.T, o Options) *Publisher {
	t.Helper()
	if o.Endpoint == "" {
		o.Endpoint = "tcp://127.0.0.1:0"
	}
	p, err := NewPublisher(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// recvLoop pumps a socket's messages into a channel until ctx ends.
func recvLoop(ctx context.Context, s zmq4.Socket) <-chan zmq4.Msg {
	ch := make(chan zmq4.Msg, 16)
	go func() {
		defer close(ch)
		for {
			m, err := s.Recv()
			if err != nil {
				return
			}
			select {
			case ch <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch
}

func recvTimeout(t *testing.T, ch <-chan zmq4.Msg, d time.Duration) zmq4.Msg {
	t.Helper()
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatal("socket closed")
		}
		return m
	case <-time.After(d):
		t.Fatal("timed out waiting for a message")
	}
	return zmq4.Msg{}
}

// subscribe dials a SUB and waits until it receives messages: the PUB
// side learns subscriptions asynchronously, so probe batches are published
// until one arrives.
func subscribe(t *testing.T, ctx context.Context, p *Publisher, topic string) <-chan zmq4.Msg {
	t.Helper()
	sub := zmq4.NewSub(ctx)
	t.Cleanup(func() { _ = sub.Close() })
	if err := sub.Dial(p.Addr()); err != nil {
		t.Fatal(err)
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, topic); err != nil {
		t.Fatal(err)
	}
	ch := recvLoop(ctx, sub)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := p.Publish(testBatch(-1)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
			return ch
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatal("subscription never became effective")
	return nil
}

func TestPubSub(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := newTestPublisher(t, Options{Server: "srv", Model: "m"})
	if p.Topic() != "kv@srv@m" {
		t.Fatalf("topic %q", p.Topic())
	}
	ch := subscribe(t, ctx, p, "kv@")
	// Drain probes: publish the real run and read until its first seq.
	first, err := p.Publish(testBatch(0))
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	for i := 1; i < n; i++ {
		if _, err := p.Publish(testBatch(i)); err != nil {
			t.Fatal(err)
		}
	}
	var tr SeqTracker
	got := 0
	for got < n {
		m := recvTimeout(t, ch, 10*time.Second)
		if len(m.Frames) != 3 {
			t.Fatalf("%d frames", len(m.Frames))
		}
		if string(m.Frames[0]) != "kv@srv@m" || len(m.Frames[1]) != 8 {
			t.Fatalf("bad frames %q %x", m.Frames[0], m.Frames[1])
		}
		seq := binary.BigEndian.Uint64(m.Frames[1])
		if seq < first {
			continue // probe
		}
		if seq != first+uint64(got) {
			t.Fatalf("seq %d, want %d", seq, first+uint64(got))
		}
		i := int(seq - first)
		want := mpDecode(t, encodeOrFail(t, EncoderOptions{}, Batch{Timestamp: float64(i),
			Events: testBatch(i).Events, DPRank: Ptr(0)}))
		if !reflect.DeepEqual(mpDecode(t, m.Frames[2]), want) {
			t.Fatalf("payload mismatch at %d", seq)
		}
		tr.Observe(seq)
		got++
	}
}

func TestSequenceStartsAtZero(t *testing.T) {
	p := newTestPublisher(t, Options{})
	for i := range 3 {
		seq, err := p.Publish(testBatch(i))
		if err != nil || seq != uint64(i) {
			t.Fatalf("seq %d err %v", seq, err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Publish(testBatch(0)); err == nil {
		t.Fatal("publish after close succeeded")
	}
}

func TestReplay(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n, buf, k = 30, 20, 15
	p := newTestPublisher(t, Options{ReplayEndpoint: "tcp://127.0.0.1:0", ReplayBuffer: buf,
		Topic: "kv@a@b", Encoder: EncoderOptions{Encoding: TaggedMap, HashEncoding: HashBytes}})
	payloads := map[uint64][]byte{}
	for i := range n {
		seq, err := p.Publish(testBatch(i))
		if err != nil {
			t.Fatal(err)
		}
		enc, _ := NewEncoder(EncoderOptions{Encoding: TaggedMap, HashEncoding: HashBytes})
		b := testBatch(i)
		b.DPRank = Ptr(0)
		payloads[seq], _ = enc.Encode(b)
	}

	replay := func(start uint64) (seqs []int64) {
		d := zmq4.NewDealer(ctx, zmq4.WithID(zmq4.SocketIdentity(fmt.Sprintf("late-%d", start))))
		defer func() { _ = d.Close() }()
		if err := d.Dial(p.ReplayAddr()); err != nil {
			t.Fatal(err)
		}
		var sb [8]byte
		binary.BigEndian.PutUint64(sb[:], start)
		if err := d.SendMulti(zmq4.NewMsgFrom(nil, sb[:])); err != nil {
			t.Fatal(err)
		}
		ch := recvLoop(ctx, d)
		for {
			m := recvTimeout(t, ch, 10*time.Second)
			if len(m.Frames) != 3 || len(m.Frames[0]) != 0 || len(m.Frames[1]) != 8 {
				t.Fatalf("bad replay frames %q", m.Frames)
			}
			seq := int64(binary.BigEndian.Uint64(m.Frames[1]))
			seqs = append(seqs, seq)
			if seq == -1 {
				if len(m.Frames[2]) != 0 {
					t.Fatal("end marker with payload")
				}
				return seqs
			}
			if !bytes.Equal(m.Frames[2], payloads[uint64(seq)]) {
				t.Fatalf("replayed payload %d differs", seq)
			}
		}
	}
	want := []int64{}
	for s := k; s < n; s++ {
		want = append(want, int64(s))
	}
	want = append(want, -1)
	if got := replay(k); !reflect.DeepEqual(got, want) {
		t.Fatalf("replay from %d: %v", k, got)
	}
	// Older than the buffer: only what is kept (the last buf batches).
	want = want[:0]
	for s := n - buf; s < n; s++ {
		want = append(want, int64(s))
	}
	want = append(want, -1)
	if got := replay(0); !reflect.DeepEqual(got, want) {
		t.Fatalf("replay from 0: %v", got)
	}
	if got := replay(n + 5); !reflect.DeepEqual(got, []int64{-1}) {
		t.Fatalf("replay from future: %v", got)
	}
}

// TestSlowSubscriberGap: with a small HWM, a subscriber that does not read
// while a burst of large batches is published makes the PUB queue overflow;
// zmq4 drops the overflow, and the subscriber detects the gap from the
// sequence numbers. The burst (tens of MB) exceeds loopback socket buffers
// plus zmq4's small internal queues, so drops are certain, not timing
// dependent.
func TestSlowSubscriberGap(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := newTestPublisher(t, Options{HWM: 4, ReplayBuffer: 8})
	ch := subscribe(t, ctx, p, "")

	// ~75 MiB of payload: 512 batches of one 16384-block BlockStored.
	const burst = 512
	hashes := make([]uint64, 1<<14)
	for i := range hashes {
		hashes[i] = math.MaxUint64 - uint64(i)
	}
	big := Batch{Events: []Event{&BlockStored{BlockHashes: hashes, BlockSize: 0}}}
	first, err := p.Publish(big)
	if err != nil {
		t.Fatal(err)
	}
	for range burst - 1 {
		if _, err := p.Publish(big); err != nil {
			t.Fatal(err)
		}
	}
	last := first + burst - 1

	// Now read. Publish small tail batches until one past the burst
	// arrives (the burst's own last batch may itself have been dropped).
	var tr SeqTracker
	gapSeen := false
	deadline := time.Now().Add(45 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case m, ok := <-ch:
			if !ok {
				t.Fatal("subscriber closed")
			}
			seq := binary.BigEndian.Uint64(m.Frames[1])
			if seq < first {
				continue
			}
			if tr.Next() < first {
				tr = SeqTracker{next: first}
			}
			if _, _, gap, _ := tr.Observe(seq); gap {
				gapSeen = true
			}
			if seq > last {
				if !gapSeen {
					t.Fatal("no gap detected although the HWM was exceeded")
				}
				return
			}
		case <-time.After(10 * time.Millisecond):
			if _, err := p.Publish(testBatch(0)); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Fatal("timed out")
}
