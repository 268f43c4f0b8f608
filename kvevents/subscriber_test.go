package kvevents_test

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/kvtier/kvtier/kvevents"
	"github.com/stretchr/testify/require"
)

func newPublisher(t testing.TB, o kvevents.Options) *kvevents.Publisher {
	t.Helper()
	o.Endpoint = "tcp://127.0.0.1:0"
	if o.ReplayBuffer >= 0 {
		o.ReplayEndpoint = "tcp://127.0.0.1:0"
	}
	p, err := kvevents.NewPublisher(context.Background(), o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func newSubscriber(t testing.TB, p *kvevents.Publisher, o kvevents.SubscriberOptions) *kvevents.Subscriber {
	t.Helper()
	o.Endpoint, o.ReplayEndpoint = p.Addr(), p.ReplayAddr()
	s, err := kvevents.NewSubscriber(context.Background(), o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// follow reads s until it has applied the batch of sequence number last
// to ix under server, and returns the messages' sequence numbers.
func follow(t *testing.T, s *kvevents.Subscriber, ix *kvevents.Index, server string, last uint64) (seqs []uint64, missed uint64) {
	return followFor(t, 30*time.Second, s, ix, server, last)
}

// followFor is follow with a deadline of d for the whole read.
func followFor(t *testing.T, d time.Duration, s *kvevents.Subscriber, ix *kvevents.Index, server string, last uint64) (seqs []uint64, missed uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		m, err := s.Next(ctx)
		require.NoError(t, err)
		seqs = append(seqs, m.Seq)
		missed += m.Missed
		ix.Apply(server, m.Batch)
		if m.Seq >= last {
			return seqs, missed
		}
	}
}

// TestLateSubscriberReplaysTheSameIndex: a cache's translated events go
// out through a real Publisher on loopback. One subscriber is there from
// the start and reads every batch as it is published (live, once its
// first replay caught it up), one joins halfway and asks for a replay
// from 0: both
// rebuild the same index, equal to the cache's reachable blocks, and see
// every sequence number once, in order.
func TestLateSubscriberReplaysTheSameIndex(t *testing.T) {
	c := newTieredCache(t)
	tr := kvevents.NewTranslator(c)
	p := newPublisher(t, kvevents.Options{Server: "a", Model: "tiny"})
	early := newSubscriber(t, p, kvevents.SubscriberOptions{From: kvevents.Ptr(uint64(0))})
	var late *kvevents.Subscriber
	rng := rand.New(rand.NewPCG(3, 4))
	var last uint64
	var a, b kvevents.Index
	var seqsA []uint64
	var missedA uint64
	const steps = 300
	for step := range steps {
		if step == steps/2 {
			late = newSubscriber(t, p, kvevents.SubscriberOptions{From: kvevents.Ptr(uint64(0)), Topic: "kv@a@"})
		}
		serve(t, c, randomRequest(rng))
		evs, _, err := c.TakeEvents(nil)
		require.NoError(t, err)
		last, err = p.Publish(kvevents.Batch{Timestamp: float64(step), Events: tr.Append(nil, evs)})
		require.NoError(t, err)
		// The early subscriber keeps up, live after its first replay.
		seqs, missed := follow(t, early, &a, "a", last)
		seqsA = append(seqsA, seqs...)
		missedA += missed
	}
	require.Equal(t, uint64(steps-1), last)
	seqsB, missedB := follow(t, late, &b, "a", last)
	want := make([]uint64, steps)
	for i := range want {
		want[i] = uint64(i)
	}
	require.Equal(t, want, seqsA)
	require.Equal(t, want, seqsB)
	require.Zero(t, missedA+missedB)
	require.GreaterOrEqual(t, late.Replays(), 1)
	reach := reachable(t, c, tr)
	requireView(t, &a, "a", reach, "the subscriber there from the start")
	requireView(t, &b, "a", reach, "the late subscriber")
	require.Positive(t, len(reach))
}

// publishBurst publishes n large batches (about 150 KB each) at once.
func publishBurst(t *testing.T, p *kvevents.Publisher, n int) (first, last uint64) {
	hashes := make([]uint64, 1<<14)
	for i := range hashes {
		hashes[i] = ^uint64(i)
	}
	for i := range n {
		seq, err := p.Publish(kvevents.Batch{Events: []kvevents.Event{kvevents.BlockRemoved{BlockHashes: hashes, Medium: "GPU"}}})
		require.NoError(t, err)
		if i == 0 {
			first = seq
		}
		last = seq
	}
	return first, last
}

// TestSlowSubscriberReplaysTheGap: a subscriber that does not read while
// a burst of about 75 MB goes out overflows the publisher's queue (HWM 4)
// and loses batches on the way; it detects the gap from the sequence
// numbers and replays it, so it still delivers every batch once, in order.
func TestSlowSubscriberReplaysTheGap(t *testing.T) {
	p := newPublisher(t, kvevents.Options{HWM: 4, ReplayBuffer: 1024})
	s := newSubscriber(t, p, kvevents.SubscriberOptions{From: kvevents.Ptr(uint64(0)), Queue: 1,
		ReplayTimeout: time.Minute}) // 75 MB under -race takes more than the default 5 s
	var ix kvevents.Index
	_, err := p.Publish(kvevents.Batch{})
	require.NoError(t, err)
	follow(t, s, &ix, "x", 0) // the initial replay is done: what follows is live
	first, last := publishBurst(t, p, 512)
	require.Equal(t, uint64(1), first)
	// The burst's last batch may itself be lost: publish a tail to reveal
	// the gap.
	go func() {
		for range 50 {
			time.Sleep(50 * time.Millisecond)
			_, _ = p.Publish(kvevents.Batch{})
		}
	}()
	// Replaying tens of MB through the pure-Go ZMQ under -race on a busy
	// 2-core machine took 37 s once: 3 minutes bound the wait.
	seqs, missed := followFor(t, 3*time.Minute, s, &ix, "x", last)
	require.Zero(t, missed)
	for i, seq := range seqs {
		require.Equal(t, first+uint64(i), seq)
	}
	require.GreaterOrEqual(t, s.Replays(), 2, "the initial replay and at least one for the gap")
}

// TestSubscriberCountsWhatItCannotReplay: without a replay endpoint, the
// batches lost on the way are reported in Message.Missed.
func TestSubscriberCountsWhatItCannotReplay(t *testing.T) {
	p := newPublisher(t, kvevents.Options{HWM: 4, ReplayBuffer: -1})
	require.Empty(t, p.ReplayAddr())
	s := newSubscriber(t, p, kvevents.SubscriberOptions{Queue: 1})
	// Without a replay, the subscription must be in effect before the
	// burst: publish probes until one arrives.
	for i := 0; ; i++ {
		require.Less(t, i, 500, "the subscription never took effect")
		_, err := p.Publish(kvevents.Batch{})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		_, err = s.Next(ctx)
		cancel()
		if err == nil {
			break
		}
	}
	_, last := publishBurst(t, p, 512)
	go func() {
		for range 50 {
			time.Sleep(50 * time.Millisecond)
			_, _ = p.Publish(kvevents.Batch{})
		}
	}()
	var ix kvevents.Index
	_, missed := follow(t, s, &ix, "x", last)
	require.Positive(t, missed, "a burst beyond the high-water mark lost nothing")
}

func TestSubscriberOptions(t *testing.T) {
	for _, o := range []kvevents.SubscriberOptions{
		{},
		{Endpoint: "tcp://127.0.0.1:1", From: kvevents.Ptr(uint64(0))},
		{Endpoint: "tcp://127.0.0.1:1", Queue: -1},
	} {
		_, err := kvevents.NewSubscriber(context.Background(), o)
		require.ErrorIs(t, err, kvevents.ErrInvalidOptions, "%+v", o)
	}
	_, err := kvevents.NewPublisher(context.Background(), kvevents.Options{})
	require.ErrorIs(t, err, kvevents.ErrInvalidOptions)
	// Endpoints that do not parse are invalid options, named in the error.
	for _, ep := range []string{"127.0.0.1:5557", "tcp://127.0.0.1", "tcpx://127.0.0.1:5557",
		"tcp://127.0.0.1:99999", "tcp://127.0.0.1:port", "tcp://tcp://127.0.0.1:1"} {
		_, err := kvevents.NewPublisher(context.Background(), kvevents.Options{Endpoint: ep})
		require.ErrorIs(t, err, kvevents.ErrInvalidOptions, ep)
		require.ErrorContains(t, err, ep)
		_, err = kvevents.NewPublisher(context.Background(), kvevents.Options{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: ep})
		require.ErrorIs(t, err, kvevents.ErrInvalidOptions, ep)
		_, err = kvevents.NewSubscriber(context.Background(), kvevents.SubscriberOptions{Endpoint: ep})
		require.ErrorIs(t, err, kvevents.ErrInvalidOptions, ep)
		_, err = kvevents.NewSubscriber(context.Background(), kvevents.SubscriberOptions{Endpoint: "tcp://127.0.0.1:1", ReplayEndpoint: ep})
		require.ErrorIs(t, err, kvevents.ErrInvalidOptions, ep)
	}
	// One that parses but cannot be bound (in use) is the socket's error.
	busy := newPublisher(t, kvevents.Options{ReplayBuffer: -1})
	_, err = kvevents.NewPublisher(context.Background(), kvevents.Options{Endpoint: busy.Addr()})
	require.Error(t, err)
	require.NotErrorIs(t, err, kvevents.ErrInvalidOptions)
	p := newPublisher(t, kvevents.Options{})
	require.NoError(t, p.Close())
	_, err = p.Publish(kvevents.Batch{})
	require.True(t, errors.Is(err, kvevents.ErrClosed))
}

// stalledPeer accepts TCP connections on loopback and never speaks: a
// wedged publisher whose socket still accepts.
func stalledPeer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return "tcp://" + ln.Addr().String()
}

// within fails unless f returns within d.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
	}
}

// TestSubscriberDoesNotHangOnAStalledPeer: a peer that accepts and never
// completes the handshake bounds NewSubscriber by DialTimeout, and a
// replay by Next's ctx, and Close ends a replay in progress.
func TestSubscriberDoesNotHangOnAStalledPeer(t *testing.T) {
	stalled := stalledPeer(t)
	within(t, 5*time.Second, "NewSubscriber", func() {
		_, err := kvevents.NewSubscriber(context.Background(), kvevents.SubscriberOptions{Endpoint: stalled, DialTimeout: 200 * time.Millisecond})
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})
	p := newPublisher(t, kvevents.Options{})
	for _, replay := range []string{stalled, "tcp://127.0.0.1:1"} { // stalled, refused
		s, err := kvevents.NewSubscriber(context.Background(), kvevents.SubscriberOptions{Endpoint: p.Addr(), ReplayEndpoint: replay,
			From: kvevents.Ptr(uint64(0))})
		require.NoError(t, err)
		within(t, 5*time.Second, "Next with a 100 ms ctx", func() {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			_, err := s.Next(ctx)
			require.ErrorIs(t, err, context.DeadlineExceeded)
		})
		within(t, 5*time.Second, "Close during a replay", func() {
			errc := make(chan error, 1)
			go func() { _, err := s.Next(context.Background()); errc <- err }()
			time.Sleep(100 * time.Millisecond)
			require.NoError(t, s.Close())
			require.Error(t, <-errc)
		})
	}
}

// fakePublisher is a PUB socket and a ROUTER replay socket that the test
// drives by hand: it sends the sequence numbers it is told, and answers a
// replay with the ones it is told.
type fakePublisher struct {
	pub, router zmq4.Socket
	payload     []byte
}

func newFakePublisher(t *testing.T, replay func(from uint64) []uint64) *fakePublisher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &fakePublisher{pub: zmq4.NewPub(ctx), router: zmq4.NewRouter(ctx)}
	t.Cleanup(func() { cancel(); _ = f.pub.Close(); _ = f.router.Close() })
	require.NoError(t, f.pub.Listen("tcp://127.0.0.1:0"))
	require.NoError(t, f.router.Listen("tcp://127.0.0.1:0"))
	enc, err := kvevents.NewEncoder(kvevents.EncoderOptions{})
	require.NoError(t, err)
	f.payload, err = enc.Encode(kvevents.Batch{Timestamp: 1})
	require.NoError(t, err)
	go func() {
		for {
			m, err := f.router.Recv()
			if err != nil {
				return
			}
			if len(m.Frames) != 3 {
				continue
			}
			for _, seq := range append(replay(binary.BigEndian.Uint64(m.Frames[2])), ^uint64(0)) {
				var sb [8]byte
				binary.BigEndian.PutUint64(sb[:], seq)
				payload := f.payload
				if seq == ^uint64(0) {
					payload = nil
				}
				if f.router.SendMulti(zmq4.NewMsgFrom(m.Frames[0], nil, sb[:], payload)) != nil {
					return
				}
			}
		}
	}()
	return f
}

func (f *fakePublisher) send(t *testing.T, seq uint64) {
	var sb [8]byte
	binary.BigEndian.PutUint64(sb[:], seq)
	require.NoError(t, f.pub.SendMulti(zmq4.NewMsgFrom([]byte("kv"), sb[:], f.payload)))
}

func addr(s zmq4.Socket) string { return "tcp://" + s.Addr().String() }

// start subscribes s to f and waits until sequence 0 arrives.
func (f *fakePublisher) start(t *testing.T, s *kvevents.Subscriber) {
	joinAtZero(t, s, func() { f.send(t, 0) })
}

// joinAtZero calls sendZero, which publishes sequence number 0, until s
// receives it: a subscription takes effect at the publisher some time
// after it is made. (Sequence 0 may arrive more than once.)
func joinAtZero(t *testing.T, s *kvevents.Subscriber, sendZero func()) {
	t.Helper()
	for i := 0; ; i++ {
		require.Less(t, i, 500, "the subscription never took effect")
		sendZero()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		m, err := s.Next(ctx)
		cancel()
		if err == nil {
			require.Equal(t, uint64(0), m.Seq)
			return
		}
	}
}

// TestSubscriberGapOrder: a live batch that reveals a gap is delivered in
// its place among the replayed ones, even when the publisher's buffer has
// moved past it, with the loss counted where it is.
func TestSubscriberGapOrder(t *testing.T) {
	f := newFakePublisher(t, func(uint64) []uint64 { return []uint64{5, 6} })
	s, err := kvevents.NewSubscriber(context.Background(), kvevents.SubscriberOptions{Endpoint: addr(f.pub), ReplayEndpoint: addr(f.router)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	f.start(t, s)
	f.send(t, 3) // 1 and 2 are lost; the buffer now starts at 5
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got [][2]uint64
	for range 3 {
		m, err := s.Next(ctx)
		require.NoError(t, err)
		got = append(got, [2]uint64{m.Seq, m.Missed})
	}
	require.Equal(t, [][2]uint64{{3, 2}, {5, 1}, {6, 0}}, got)
}

// TestSubscriberReplayFails: when the replay fails, the live batch that
// revealed the gap is still delivered, with the loss and the reason.
func TestSubscriberReplayFails(t *testing.T) {
	f := newFakePublisher(t, func(uint64) []uint64 { return nil })
	s, err := kvevents.NewSubscriber(context.Background(), kvevents.SubscriberOptions{Endpoint: addr(f.pub),
		ReplayEndpoint: stalledPeer(t), ReplayTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	f.start(t, s)
	f.send(t, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := s.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(4), m.Seq)
	require.Equal(t, uint64(3), m.Missed)
	require.ErrorIs(t, m.ReplayError, context.DeadlineExceeded)
}

// TestSubscriberJoinPoll: a batch published after the subscriber's first
// replay but before its subscription is in effect at the publisher never
// arrives live, and no later batch may come to reveal the gap; until a
// live batch arrives, Next polls the replay socket and finds it.
func TestSubscriberJoinPoll(t *testing.T) {
	var mu sync.Mutex
	buffered := []uint64{0}
	f := newFakePublisher(t, func(from uint64) []uint64 {
		mu.Lock()
		defer mu.Unlock()
		var out []uint64
		for _, s := range buffered {
			if s >= from {
				out = append(out, s)
			}
		}
		return out
	})
	s, err := kvevents.NewSubscriber(context.Background(), kvevents.SubscriberOptions{Endpoint: addr(f.pub), ReplayEndpoint: addr(f.router),
		From: kvevents.Ptr(uint64(0)), JoinPoll: 50 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := s.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(0), m.Seq)
	mu.Lock()
	buffered = append(buffered, 1) // published, never sent live to this subscriber
	mu.Unlock()
	m, err = s.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1), m.Seq)
	require.Zero(t, m.Missed)
	require.GreaterOrEqual(t, s.Replays(), 2)
}

// TestPublisherRestart: when the publisher goes away, Next delivers what
// it received, then ErrDisconnected (not a hang, and not ErrClosed); a
// publisher restarted on the same endpoints numbers from 0 again, and a
// new Subscriber from 0 gets everything it published, even what went
// out before the subscription took effect.
func TestPublisherRestart(t *testing.T) {
	p := newPublisher(t, kvevents.Options{})
	s := newSubscriber(t, p, kvevents.SubscriberOptions{From: kvevents.Ptr(uint64(0))})
	for range 3 {
		_, err := p.Publish(kvevents.Batch{Events: []kvevents.Event{kvevents.AllBlocksCleared{}}})
		require.NoError(t, err)
	}
	var ix kvevents.Index
	seqs, missed := follow(t, s, &ix, "a", 2)
	require.Equal(t, []uint64{0, 1, 2}, seqs)
	require.Zero(t, missed)
	endpoint, replay := p.Addr(), p.ReplayAddr()
	require.NoError(t, p.Close())

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := s.Next(ctx)
	require.ErrorIs(t, err, kvevents.ErrDisconnected)
	require.NotErrorIs(t, err, kvevents.ErrClosed)
	require.NoError(t, ctx.Err(), "reported at once, not at the deadline")
	_, err = s.Next(ctx)
	require.ErrorIs(t, err, kvevents.ErrDisconnected, "and again")

	// The restart: same endpoints, numbering from 0.
	var p2 *kvevents.Publisher
	for i := 0; ; i++ {
		p2, err = kvevents.NewPublisher(context.Background(), kvevents.Options{Endpoint: endpoint, ReplayEndpoint: replay})
		if err == nil {
			break
		}
		require.Less(t, i, 50, "the endpoints are still taken: %v", err)
		time.Sleep(100 * time.Millisecond)
	}
	t.Cleanup(func() { _ = p2.Close() })
	for range 2 {
		_, err := p2.Publish(kvevents.Batch{})
		require.NoError(t, err)
	}
	ix.Forget("a")
	s2 := newSubscriber(t, p2, kvevents.SubscriberOptions{From: kvevents.Ptr(uint64(0))})
	seqs, missed = follow(t, s2, &ix, "a", 1)
	require.Equal(t, []uint64{0, 1}, seqs)
	require.Zero(t, missed)
}
