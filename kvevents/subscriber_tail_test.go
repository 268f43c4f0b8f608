package kvevents_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kvtier/kvtier/kvevents"
	"github.com/stretchr/testify/require"
)

// TestSubscriberReplaysADroppedTail: a burst larger than the Queue
// arrives while the reader is away, and then the publisher is quiet: the
// Subscriber dropped most of the burst, and no later batch reveals the
// gap, so Next replays it from the publisher's buffer once the queue has
// drained: every batch arrives, in order, with nothing missed.
func TestSubscriberReplaysADroppedTail(t *testing.T) {
	p := newPublisher(t, kvevents.Options{})
	s := newSubscriber(t, p, kvevents.SubscriberOptions{Queue: 4})
	first := joinPublisher(t, p, s)
	var last uint64
	for range 50 {
		seq, err := p.Publish(kvevents.Batch{Events: []kvevents.Event{kvevents.AllBlocksCleared{}}})
		require.NoError(t, err)
		last = seq
	}
	// The reader is away until the Subscriber has dropped some.
	for i := 0; s.Dropped() == 0; i++ {
		require.Less(t, i, 500, "a 50-batch burst never filled a queue of 4")
		time.Sleep(2 * time.Millisecond)
	}
	want := first + 1
	for want <= last {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		m, err := s.Next(ctx)
		cancel()
		require.False(t, errors.Is(err, context.DeadlineExceeded), "batches %d to %d never arrived (Dropped %d)", want, last, s.Dropped())
		require.NoError(t, err)
		require.Equal(t, want, m.Seq)
		require.Zero(t, m.Missed)
		want++
	}
}
