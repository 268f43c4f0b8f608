package kvevents_test

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/kvtier/kvtier/kvevents"
	"github.com/stretchr/testify/require"
)

// burstRounds and burstSize: a publisher sends burstSize batches at once
// right after a subscriber's first one, burstRounds times over.
const (
	burstRounds = 20
	burstSize   = 2000
	// burstStall fails a round when Next delivers nothing for this long
	// although batches are still due: 2,000 small batches take
	// milliseconds over loopback, and a Subscriber that went silent stays
	// silent until the publisher goes away.
	burstStall = 3 * time.Second
)

// drain calls Next until it delivers want (a sequence number), giving up
// when nothing comes for burstStall. It returns the messages and errors
// Next returned, in order.
func drain(t *testing.T, s *kvevents.Subscriber, want uint64) (msgs []kvevents.Message, errs []error, ok bool) {
	t.Helper()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), burstStall)
		m, err := s.Next(ctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			return msgs, errs, false
		}
		msgs, errs = append(msgs, m), append(errs, err)
		if err == nil && m.Seq == want {
			return msgs, errs, true
		}
	}
}

// TestSubscriberFollowsABurst: a Subscriber without a replay endpoint
// that got its first batch delivers all of a burst that follows, in
// order, with nothing missed.
func TestSubscriberFollowsABurst(t *testing.T) {
	failed := 0
	for round := range burstRounds {
		p := newPublisher(t, kvevents.Options{ReplayBuffer: -1})
		s := newSubscriber(t, p, kvevents.SubscriberOptions{})
		first := joinPublisher(t, p, s)
		var last uint64
		for range burstSize {
			seq, err := p.Publish(kvevents.Batch{Events: []kvevents.Event{kvevents.AllBlocksCleared{}}})
			require.NoError(t, err)
			last = seq
		}
		msgs, errs, ok := drain(t, s, last)
		if !ok {
			failed++
			t.Errorf("round %d: silent after %d of %d batches", round, len(msgs), last-first)
		}
		for i, m := range msgs {
			require.NoError(t, errs[i])
			require.Equal(t, first+1+uint64(i), m.Seq)
			require.Zero(t, m.Missed)
		}
		require.NoError(t, s.Close())
		require.NoError(t, p.Close())
	}
	t.Logf("%d of %d rounds failed", failed, burstRounds)
}

// joinPublisher publishes until s receives a batch (the subscription is
// in effect at p) and returns that batch's sequence number; the probes
// published meanwhile that s still receives are read too.
func joinPublisher(t *testing.T, p *kvevents.Publisher, s *kvevents.Subscriber) uint64 {
	t.Helper()
	var last uint64
	for i := 0; ; i++ {
		require.Less(t, i, 500, "the subscription never took effect")
		seq, err := p.Publish(kvevents.Batch{})
		require.NoError(t, err)
		last = seq
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		m, err := s.Next(ctx)
		cancel()
		if err == nil {
			if m.Seq == last {
				return last
			}
			break
		}
	}
	// Probes published before the first one arrived are on their way.
	_, errs, ok := drain(t, s, last)
	require.True(t, ok, "the probes did not arrive")
	for _, err := range errs {
		require.NoError(t, err)
	}
	return last
}

// TestSubscriberFollowsABurstWithMalformedFrames: the same burst from a
// raw PUB socket with malformed messages mixed in: 2-frame messages,
// sequence frames shorter than 8 bytes, batches whose payload is garbage,
// and garbage messages whose 8-byte sequence frame is garbage too. Each
// malformed message is reported (an error wrapping ErrMalformed), and
// every batch is still delivered once, in order, with nothing missed.
//
// A garbage sequence frame is a number far ahead of the stream. Before
// the fix, the Subscriber took it for the publisher's and expected the
// number after it, so it discarded every real batch that followed as a
// duplicate, reporting nothing until the publisher went away.
func TestSubscriberFollowsABurstWithMalformedFrames(t *testing.T) {
	enc, err := kvevents.NewEncoder(kvevents.EncoderOptions{})
	require.NoError(t, err)
	payload, err := enc.Encode(kvevents.Batch{Timestamp: 1, Events: []kvevents.Event{kvevents.AllBlocksCleared{}}})
	require.NoError(t, err)
	failed := 0
	for round := range burstRounds {
		rng := rand.New(rand.NewPCG(uint64(round), 7))
		ctx, cancel := context.WithCancel(context.Background())
		pub := zmq4.NewPub(ctx)
		require.NoError(t, pub.Listen("tcp://127.0.0.1:0"))
		s, err := kvevents.NewSubscriber(context.Background(), kvevents.SubscriberOptions{Endpoint: addr(pub)})
		require.NoError(t, err)
		send := func(frames ...[]byte) { require.NoError(t, pub.SendMulti(zmq4.NewMsgFrom(frames...))) }
		seqFrame := func(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }
		garbage := func(n int) []byte {
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(rng.UintN(256))
			}
			return b
		}
		topic := []byte("kv")
		joinAtZero(t, s, func() { send(topic, seqFrame(0), payload) })
		// The burst: batches 1..burstSize; before every 7th, a malformed
		// message of one of four kinds. A batch with a garbage payload
		// has its own sequence number, as a publisher numbers every batch.
		seq := uint64(1)
		var wantSeqs []uint64    // delivered without an error
		var garbageSeqs []uint64 // delivered with ErrMalformed
		for i := range burstSize {
			if i%7 == 3 {
				switch (i / 7) % 4 {
				case 0:
					send(topic, seqFrame(seq))
				case 1:
					send(topic, garbage(1+rng.IntN(7)), payload)
				case 2:
					send(topic, seqFrame(seq), garbage(1+rng.IntN(64)))
					garbageSeqs = append(garbageSeqs, seq)
					seq++
				case 3:
					send(topic, garbage(8), garbage(1+rng.IntN(64)))
				}
			}
			send(topic, seqFrame(seq), payload)
			wantSeqs = append(wantSeqs, seq)
			seq++
		}
		last := seq - 1
		msgs, errs, ok := drain(t, s, last)
		var gotSeqs, gotGarbage []uint64
		for i, m := range msgs {
			if errs[i] != nil {
				require.ErrorIs(t, errs[i], kvevents.ErrMalformed)
				if m.Seq != 0 && m.Seq <= last { // a batch with a garbage payload
					gotGarbage = append(gotGarbage, m.Seq)
				}
				continue
			}
			require.Zero(t, m.Missed, "seq %d", m.Seq)
			gotSeqs = append(gotSeqs, m.Seq)
		}
		if !ok {
			failed++
			t.Errorf("round %d: silent after %d of %d batches, last seq %d", round, len(gotSeqs), len(wantSeqs), lastSeq(gotSeqs))
		} else {
			require.Equal(t, wantSeqs, gotSeqs)
			require.Equal(t, garbageSeqs, gotGarbage)
		}
		require.NoError(t, s.Close())
		cancel()
		_ = pub.Close()
	}
	t.Logf("%d of %d rounds failed", failed, burstRounds)
}

func lastSeq(seqs []uint64) uint64 {
	if len(seqs) == 0 {
		return 0
	}
	return seqs[len(seqs)-1]
}

// TestSubscriberGarbageSequence: a message whose payload is not a batch
// is reported with its sequence number, and that number moves nothing:
// not the first one (it does not start the stream), not one far ahead
// (no loss counted, no replay asked for, the batches after it still
// delivered).
func TestSubscriberGarbageSequence(t *testing.T) {
	for _, replay := range []bool{false, true} {
		f := newFakePublisher(t, func(uint64) []uint64 { return nil })
		o := kvevents.SubscriberOptions{Endpoint: addr(f.pub)}
		if replay {
			o.ReplayEndpoint = addr(f.router)
		}
		s, err := kvevents.NewSubscriber(context.Background(), o)
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		bogus := binary.BigEndian.AppendUint64(nil, 1<<62)
		garbagePayload := []byte{0xc1}
		// Join with garbage first: whichever arrives first must not set
		// the expected sequence number.
		for i := 0; ; i++ {
			require.Less(t, i, 500, "the subscription never took effect")
			require.NoError(t, f.pub.SendMulti(zmq4.NewMsgFrom([]byte("kv"), bogus, garbagePayload)))
			f.send(t, 0)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			m, err := s.Next(ctx)
			cancel()
			if errors.Is(err, kvevents.ErrMalformed) {
				require.Equal(t, uint64(1<<62), m.Seq)
				require.Zero(t, m.Missed)
				continue
			}
			if err == nil {
				require.Equal(t, uint64(0), m.Seq)
				break
			}
		}
		replays := s.Replays()
		require.NoError(t, f.pub.SendMulti(zmq4.NewMsgFrom([]byte("kv"), bogus, garbagePayload)))
		f.send(t, 1)
		f.send(t, 2)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var got []uint64
		for len(got) < 2 {
			m, err := s.Next(ctx)
			if errors.Is(err, kvevents.ErrMalformed) && m.Seq == 1<<62 {
				require.Zero(t, m.Missed)
				continue
			}
			require.NoError(t, err, "replay %v", replay)
			if m.Seq == 0 { // a probe still on its way
				continue
			}
			require.Zero(t, m.Missed)
			got = append(got, m.Seq)
		}
		cancel()
		require.Equal(t, []uint64{1, 2}, got, "replay %v", replay)
		require.Equal(t, replays, s.Replays(), "a garbage message asked for a replay")
	}
}

// TestSlowSubscriberHoldsNobodyBack: a Subscriber that is never read
// (Queue 1) beside one that is, on the same publisher: the read one gets
// every batch of a 40 MB burst, because the unread one drops what its
// full queue cannot hold (a gap its next batch reveals) instead of
// leaving the socket unread, which backs the connection up to the
// publisher, whose one writer then stops for every subscriber.
func TestSlowSubscriberHoldsNobodyBack(t *testing.T) {
	p := newPublisher(t, kvevents.Options{ReplayBuffer: -1})
	slow := newSubscriber(t, p, kvevents.SubscriberOptions{Queue: 1})
	joinPublisher(t, p, slow)
	// Room for the whole burst: the read subscriber drops nothing.
	fast := newSubscriber(t, p, kvevents.SubscriberOptions{Queue: 4096})
	first := joinPublisher(t, p, fast)
	tokens := make([]uint32, 4096)
	for i := range tokens {
		tokens[i] = uint32(i) * 2654435761
	}
	big := kvevents.Batch{Events: []kvevents.Event{kvevents.BlockStored{BlockHashes: []uint64{1}, TokenIDs: tokens, BlockSize: 4096}}}
	const n = 2000 // about 20 KB each
	published := make(chan error, 1)
	go func() {
		for range n {
			if _, err := p.Publish(big); err != nil {
				published <- err
				return
			}
		}
		published <- nil
	}()
	msgs, errs, ok := drain(t, fast, first+n)
	require.True(t, ok, "the read subscriber went silent after %d of %d batches", len(msgs), n)
	for i, m := range msgs {
		require.NoError(t, errs[i])
		require.Equal(t, first+1+uint64(i), m.Seq)
		require.Zero(t, m.Missed)
	}
	select {
	case err := <-published:
		require.NoError(t, err)
	case <-time.After(burstStall):
		t.Fatal("Publish is stuck")
	}
	require.Zero(t, fast.Dropped())
	require.Positive(t, slow.Dropped(), "the unread subscriber's queue was full")
}
