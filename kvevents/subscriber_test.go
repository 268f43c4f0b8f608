package kvevents_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

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
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
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
// the start, one joins halfway and asks for a replay from 0: both
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
	}
	require.Equal(t, uint64(steps-1), last)
	var a, b kvevents.Index
	seqsA, missedA := follow(t, early, &a, "a", last)
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
	seqs, missed := follow(t, s, &ix, "x", last)
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
	p := newPublisher(t, kvevents.Options{})
	require.NoError(t, p.Close())
	_, err = p.Publish(kvevents.Batch{})
	require.True(t, errors.Is(err, kvevents.ErrClosed))
}
