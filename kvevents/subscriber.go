package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
)

// ErrInvalidOptions is wrapped by the errors of NewPublisher and
// NewSubscriber for options they cannot use.
var ErrInvalidOptions = errors.New("kvevents: invalid options")

// ErrClosed is returned by the calls on a closed Publisher or Subscriber.
var ErrClosed = errors.New("kvevents: closed")

// ErrDisconnected is returned by Subscriber.Next once the connection to
// the publisher has ended (the publisher closed, crashed or restarted)
// and the batches received before are delivered.
var ErrDisconnected = errors.New("kvevents: publisher disconnected")

// SubscriberOptions configures a Subscriber.
type SubscriberOptions struct {
	// Endpoint is the publisher's PUB endpoint, dialed by the SUB socket.
	Endpoint string
	// ReplayEndpoint, if set, is the publisher's ROUTER endpoint: a gap in
	// the sequence numbers is filled from it.
	ReplayEndpoint string
	// Topic is the subscription prefix; "" receives every topic.
	Topic string
	// From, if set, is the first sequence number wanted: before reading
	// live batches, the Subscriber replays from it (From = Ptr(uint64(0))
	// for a subscriber that joins late and wants everything the publisher
	// still buffers). Without it, the first live batch starts the stream
	// and what was published before it is not asked for. From needs
	// ReplayEndpoint.
	From *uint64
	// DialTimeout bounds connecting to an endpoint, the ZMTP handshake
	// included; 0 means 5 s.
	DialTimeout time.Duration
	// ReplayTimeout bounds one replay, its dial included; 0 means 5 s.
	ReplayTimeout time.Duration
	// Queue is how many received messages wait for Next; 0 means 4096.
	// A message that arrives while the queue is full is dropped (see
	// Dropped), so that a Subscriber that is not read never holds back
	// its publisher's other subscribers. With a ReplayEndpoint, Next
	// replays what was dropped once the queue has drained; without one,
	// the loss shows at the next batch that arrives (Message.Missed), and
	// until then only in Dropped. Size it for the largest burst the
	// reader must take without a loss (the default holds a few thousand
	// scheduling steps).
	Queue int
	// JoinPoll matters until the first live batch arrives: before that,
	// the subscription may not be in effect at the publisher yet, and a
	// batch published meanwhile is lost with no later batch to reveal
	// the gap. So while Next waits, every JoinPoll it asks the replay
	// socket for what follows the last batch it has. 0 means 250 ms;
	// negative disables it. Without ReplayEndpoint there is no poll.
	JoinPoll time.Duration
}

// Message is one batch as a Subscriber delivers it.
type Message struct {
	// Topic is the message's topic frame; a replayed batch has none on
	// the wire and gets the topic of the live message that revealed the
	// gap, or SubscriberOptions.Topic.
	Topic string
	Seq   uint64
	Batch Batch
	// Missed counts the batches just before this one that are lost for
	// good: dropped on the way (a subscriber slower than the publisher's
	// high-water mark, or whose queue was full, see
	// SubscriberOptions.Queue) and no longer in the publisher's replay
	// buffer, or
	// with no replay endpoint to ask, or the replay failed (ReplayError
	// says why). A consumer's view of the publisher is then incomplete:
	// the lost batches' blocks are unknown, and blocks announced before
	// are not announced again. A consumer that must not overestimate
	// forgets the publisher (Index.Forget) and builds again from what
	// follows, a subset of what the publisher holds.
	Missed      uint64
	ReplayError error
}

// Subscriber receives a publisher's batches in sequence order: it
// detects a gap in the sequence numbers and fills it from the replay
// socket, skips duplicates, and decodes each payload. It is what a router
// written in Go needs to follow one server, and what kvtier's tests use
// to check a Publisher.
//
// A Subscriber follows one connection. When the publisher goes away, Next
// delivers what was received and then returns ErrDisconnected; it does
// not reconnect, because a restarted publisher numbers its batches from 0
// again and its cache starts empty: forget the server's blocks
// (Index.Forget) and make a new Subscriber, with From = Ptr(uint64(0)) to
// get what the new publisher sent before the subscription took effect.
//
// A Subscriber is not safe for concurrent use: one goroutine calls Next.
type Subscriber struct {
	opts   SubscriberOptions
	ctx    context.Context
	cancel context.CancelFunc
	sub    zmq4.Socket
	live   chan zmq4.Msg
	// dropped counts the messages receive dropped on a full queue;
	// recovered is how many of them wait has answered with a replay.
	dropped   atomic.Int64
	recovered int64
	// recvErr is why receive stopped, set before it closes live.
	recvErr error
	started bool // a sequence number was seen or From set
	next    uint64
	pending []pendingMessage
	held    *zmq4.Msg // a live message whose gap is still to replay
	// liveSeen says a live batch arrived: the subscription is in effect.
	liveSeen bool
	replays  int
	joined   bool // the replay from From is done
}

// pendingMessage is a message waiting for Next, with its decoding error.
type pendingMessage struct {
	m   Message
	err error
}

// NewSubscriber dials the publisher; ctx bounds the dial (with
// DialTimeout), Close releases the socket. The subscription takes effect
// at the publisher asynchronously: batches published in the meantime
// reach this subscriber only through a replay (set From).
//
// zmq4 cannot interrupt a ZMTP handshake with a peer that accepts the
// connection and never answers: past DialTimeout (or ctx), NewSubscriber
// and replays give up, and the goroutine left in the handshake ends when
// the peer closes the connection.
func NewSubscriber(ctx context.Context, opts SubscriberOptions) (*Subscriber, error) {
	if opts.Endpoint == "" {
		return nil, fmt.Errorf("%w: SubscriberOptions.Endpoint is empty", ErrInvalidOptions)
	}
	if err := checkEndpoint("SubscriberOptions.Endpoint", opts.Endpoint); err != nil {
		return nil, err
	}
	if opts.ReplayEndpoint != "" {
		if err := checkEndpoint("SubscriberOptions.ReplayEndpoint", opts.ReplayEndpoint); err != nil {
			return nil, err
		}
	}
	if opts.From != nil && opts.ReplayEndpoint == "" {
		return nil, fmt.Errorf("%w: SubscriberOptions.From %d without a ReplayEndpoint", ErrInvalidOptions, *opts.From)
	}
	if opts.Queue < 0 || opts.ReplayTimeout < 0 || opts.DialTimeout < 0 {
		return nil, fmt.Errorf("%w: Queue %d, ReplayTimeout %v, DialTimeout %v", ErrInvalidOptions, opts.Queue, opts.ReplayTimeout, opts.DialTimeout)
	}
	if opts.Queue == 0 {
		opts.Queue = 4096
	}
	if opts.ReplayTimeout == 0 {
		opts.ReplayTimeout = 5 * time.Second
	}
	if opts.DialTimeout == 0 {
		opts.DialTimeout = 5 * time.Second
	}
	if opts.JoinPoll == 0 {
		opts.JoinPoll = 250 * time.Millisecond
	}
	sctx, cancel := context.WithCancel(context.Background())
	s := &Subscriber{opts: opts, ctx: sctx, cancel: cancel, sub: zmq4.NewSub(sctx), live: make(chan zmq4.Msg, opts.Queue)}
	dctx, dcancel := context.WithTimeout(ctx, opts.DialTimeout)
	defer dcancel()
	if err := dial(dctx, s.sub, opts.Endpoint); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("kvevents: SUB %s: %w", opts.Endpoint, err)
	}
	if err := s.sub.SetOption(zmq4.OptionSubscribe, opts.Topic); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("kvevents: subscribe %q: %w", opts.Topic, err)
	}
	if opts.From != nil {
		s.started, s.next = true, *opts.From
	}
	go s.receive()
	return s, nil
}

// dial connects sock to endpoint, giving up when ctx ends: zmq4's Dial
// has no deadline of its own (see NewSubscriber).
func dial(ctx context.Context, sock zmq4.Socket, endpoint string) error {
	done := make(chan error, 1)
	go func() { done <- sock.Dial(endpoint) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// receive pumps the SUB socket into s.live until the Subscriber closes.
// A message that finds the queue full is dropped (and counted): the gap
// shows at the next batch, which replays it or reports it as Missed.
// Blocking instead would leave the socket unread, and with zmq4 an unread
// SUB socket does not drop: its TCP connection backs up to the publisher,
// whose one writer then stops for every subscriber, so one Subscriber
// that is not read would silence all the others.
func (s *Subscriber) receive() {
	defer close(s.live)
	for {
		m, err := s.sub.Recv()
		if err != nil {
			s.recvErr = err
			return
		}
		select {
		case s.live <- m:
		case <-s.ctx.Done():
			return
		default:
			s.dropped.Add(1)
		}
	}
}

// Dropped returns how many received messages the Subscriber dropped
// because its queue was full (see SubscriberOptions.Queue). It is safe to
// call from any goroutine.
func (s *Subscriber) Dropped() int64 { return s.dropped.Load() }

// Replays returns how many replays the Subscriber asked for.
func (s *Subscriber) Replays() int { return s.replays }

// Next returns the next batch in sequence order, waiting for it until
// ctx ends; replays are bounded by ctx too. A payload that does not
// decode is returned with its sequence number and an error wrapping
// ErrMalformed; the stream goes on after it (one ahead of a gap may come
// again, with the same error, when the gap is replayed). After Close, Next returns
// the batches already queued, then ErrClosed; once the publisher has gone
// away, the batches received, then an error wrapping ErrDisconnected.
func (s *Subscriber) Next(ctx context.Context) (Message, error) {
	if s.opts.From != nil && !s.joined {
		if err := s.replay(ctx, *s.opts.From, nil); err != nil {
			return Message{}, err
		}
		s.joined = true
	}
	for {
		if len(s.pending) > 0 {
			p := s.pending[0]
			s.pending = s.pending[1:]
			return p.m, p.err
		}
		var raw zmq4.Msg
		if s.held != nil {
			raw, s.held = *s.held, nil
		} else {
			m, polled, err := s.wait(ctx)
			if err != nil {
				return Message{}, err
			}
			if polled {
				continue
			}
			raw = m
		}
		if len(raw.Frames) != 3 || len(raw.Frames[1]) != 8 {
			return Message{}, fmt.Errorf("%w: a message of %d frames", ErrMalformed, len(raw.Frames))
		}
		seq := binary.BigEndian.Uint64(raw.Frames[1])
		if s.started && seq < s.next {
			continue // replayed already
		}
		if s.started && seq > s.next && s.opts.ReplayEndpoint != "" {
			// A payload that is not a batch is no evidence of a gap (see
			// message): report it without asking for a replay, which
			// would cost a round trip per garbage message (ReplayTimeout
			// each with a replay peer that does not answer).
			if _, err := Decode(raw.Frames[2]); err != nil {
				return s.message(string(raw.Frames[0]), seq, raw.Frames[2])
			}
			err := s.replay(ctx, s.next, &raw)
			switch {
			case err == nil:
			case ctx.Err() != nil:
				// The caller gave up: the gap is replayed on the next call.
				s.held = &raw
				return Message{}, err
			default:
				// What the replay did not bring is lost: deliver what
				// follows, with the loss counted.
				if seq := binary.BigEndian.Uint64(raw.Frames[1]); seq >= s.next {
					m, derr := s.message(string(raw.Frames[0]), seq, raw.Frames[2])
					m.ReplayError = err
					s.pending = append(s.pending, pendingMessage{m, derr})
				}
			}
			continue
		}
		return s.message(string(raw.Frames[0]), seq, raw.Frames[2])
	}
}

// wait returns the next live message, or polled after a poll of the
// replay socket (see SubscriberOptions.JoinPoll) queued what it found.
func (s *Subscriber) wait(ctx context.Context) (_ zmq4.Msg, polled bool, _ error) {
	if d := s.dropped.Load(); d > s.recovered && len(s.live) == 0 && s.started && s.opts.ReplayEndpoint != "" {
		// Messages were dropped on a full queue and the queue has
		// drained: the gap they left would show only at the next batch,
		// which may not come for a while (a burst's tail, then a quiet
		// publisher), so it is replayed now.
		s.recovered = d
		if err := s.replay(ctx, s.next, nil); err != nil && ctx.Err() != nil {
			return zmq4.Msg{}, false, err
		}
		return zmq4.Msg{}, true, nil
	}
	var poll <-chan time.Time
	if s.started && !s.liveSeen && s.opts.ReplayEndpoint != "" && s.opts.JoinPoll > 0 {
		t := time.NewTimer(s.opts.JoinPoll)
		defer t.Stop()
		poll = t.C
	}
	select {
	case <-ctx.Done():
		return zmq4.Msg{}, false, ctx.Err()
	case <-poll:
		if err := s.replay(ctx, s.next, nil); err != nil && ctx.Err() != nil {
			return zmq4.Msg{}, false, err
		}
		return zmq4.Msg{}, true, nil // a failed poll is tried again at the next one
	case m, ok := <-s.live:
		if !ok {
			if s.ctx.Err() != nil {
				return zmq4.Msg{}, false, ErrClosed
			}
			return zmq4.Msg{}, false, fmt.Errorf("%w: %s: %v", ErrDisconnected, s.opts.Endpoint, s.recvErr)
		}
		s.liveSeen = true
		return m, false, nil
	}
}

// message decodes one batch and moves the expected sequence number past
// it, counting what was skipped.
//
// A message whose payload does not decode moves nothing unless it is
// exactly the one expected: its sequence frame is no more trustworthy
// than its payload. Taken at its word, a garbage 8-byte sequence frame is
// a number far ahead of the stream (or, as the first message, where the
// stream starts): Next would then expect the number after it and discard
// every real batch that follows as a duplicate (seq < s.next), reporting
// nothing until the publisher goes away. So such a message is returned
// with its sequence number and error and no loss counted; a loss it
// would have revealed is counted at the next batch that decodes. (A
// batch that truly does not decode, ahead of a gap, is then reported
// twice: live, and again when the replay of the gap reaches it.)
func (s *Subscriber) message(topic string, seq uint64, payload []byte) (Message, error) {
	m := Message{Topic: topic, Seq: seq}
	b, err := Decode(payload)
	if err != nil && (!s.started || seq != s.next) {
		return m, fmt.Errorf("seq %d: %w", seq, err)
	}
	if s.started && seq > s.next {
		m.Missed = seq - s.next
	}
	s.started, s.next = true, seq+1
	if err != nil {
		return m, fmt.Errorf("seq %d: %w", seq, err)
	}
	m.Batch = b
	return m, nil
}

// replay asks the publisher for every batch from from on and queues them
// in s.pending, with live, the message that revealed the gap, in its
// place among them. It gives up when ctx ends, after ReplayTimeout, or
// when the Subscriber closes; what it queued before stays queued.
func (s *Subscriber) replay(ctx context.Context, from uint64, live *zmq4.Msg) error {
	s.replays++
	ctx, cancel := context.WithTimeout(ctx, s.opts.ReplayTimeout)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	d := zmq4.NewDealer(ctx)
	defer func() { _ = d.Close() }()
	if err := dial(ctx, d, s.opts.ReplayEndpoint); err != nil {
		return fmt.Errorf("kvevents: replay %s: %w", s.opts.ReplayEndpoint, err)
	}
	var sb [8]byte
	binary.BigEndian.PutUint64(sb[:], from)
	if err := d.SendMulti(zmq4.NewMsgFrom(nil, sb[:])); err != nil {
		return fmt.Errorf("kvevents: replay from %d: %w", from, err)
	}
	topic := s.opts.Topic
	if live != nil {
		topic = string(live.Frames[0])
	}
	// queueLive queues live once the replay has reached its place.
	queueLive := func(before uint64) {
		if live == nil {
			return
		}
		seq := binary.BigEndian.Uint64(live.Frames[1])
		if seq >= before {
			return
		}
		if seq >= s.next {
			m, err := s.message(string(live.Frames[0]), seq, live.Frames[2])
			s.pending = append(s.pending, pendingMessage{m, err})
		}
		live = nil
	}
	// zmq4's Recv has no deadline of its own: a goroutine receives, and
	// closing the dealer when ctx ends stops it.
	replies := make(chan zmq4.Msg)
	go func() {
		defer close(replies)
		for {
			r, err := d.Recv()
			if err != nil {
				return
			}
			select {
			case replies <- r:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		var r zmq4.Msg
		select {
		case <-ctx.Done():
			return fmt.Errorf("kvevents: replay from %d: %w", from, ctx.Err())
		case m, ok := <-replies:
			if !ok {
				if ctx.Err() != nil { // the dealer closes when ctx ends
					return fmt.Errorf("kvevents: replay from %d: %w", from, ctx.Err())
				}
				return fmt.Errorf("kvevents: replay from %d: the socket closed", from)
			}
			r = m
		}
		if len(r.Frames) != 3 || len(r.Frames[1]) != 8 {
			return fmt.Errorf("%w: a replay message of %d frames", ErrMalformed, len(r.Frames))
		}
		seq := binary.BigEndian.Uint64(r.Frames[1])
		if seq == ^uint64(0) {
			break
		}
		queueLive(seq)
		if seq < s.next {
			continue
		}
		m, err := s.message(topic, seq, r.Frames[2])
		s.pending = append(s.pending, pendingMessage{m, err})
	}
	queueLive(^uint64(0))
	return nil
}

// Close closes the socket and ends a replay in progress; Next then
// returns the batches already queued, then ErrClosed.
func (s *Subscriber) Close() error {
	s.cancel()
	return s.sub.Close()
}
