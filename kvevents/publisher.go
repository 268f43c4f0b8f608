package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
)

// Defaults mirror vLLM's ZmqEventPublisher.
const (
	DefaultHWM          = 100_000
	DefaultReplayBuffer = 10_000
)

// endSeq is the sequence number (-1 as 8 bytes big-endian) that ends a replay.
var endSeq = []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// DefaultTopic returns the topic llm-d uses for a server's events:
// "kv@<server>@<model>".
func DefaultTopic(server, model string) string {
	return "kv@" + server + "@" + model
}

// Options configures a Publisher.
type Options struct {
	// Endpoint of the PUB socket, e.g. "tcp://127.0.0.1:5557" or
	// "tcp://127.0.0.1:0" (see Publisher.Addr). Bound unless Dial is set.
	Endpoint string
	// Dial makes the PUB socket connect to Endpoint instead of binding it
	// (for consumers that bind, e.g. a central llm-d indexer).
	Dial bool
	// ReplayEndpoint, if set, is bound by a ROUTER socket serving replays.
	ReplayEndpoint string
	// Topic is the first frame of every message. If empty and Server or
	// Model is set, DefaultTopic(Server, Model) is used; otherwise the topic
	// is empty (vLLM's default; matches every subscription).
	Topic         string
	Server, Model string
	// HWM bounds the PUB send queue in messages; beyond it messages are
	// dropped. 0 means DefaultHWM; negative means unbounded.
	HWM int
	// ReplayBuffer is the number of most recent batches kept for replay.
	// 0 means DefaultReplayBuffer; negative disables the buffer.
	ReplayBuffer int
	// Encoder options (layout and hash encoding).
	Encoder EncoderOptions
	// DPRank is written into batches whose DPRank is nil, as vLLM does.
	DPRank int
	// ReplaySendTimeout bounds each replay send to a slow requester.
	// 0 means 5s.
	ReplaySendTimeout time.Duration
}

type entry struct {
	seq     uint64
	payload []byte
}

// Publisher sends batches over ZMQ PUB with sequence numbers and serves
// replays over ZMQ ROUTER.
//
// Publish never blocks on subscribers: with go-zeromq/zmq4, a PUB send only
// appends to the socket's queue (or drops the message when the queue holds
// HWM messages); a goroutine of the socket writes queued messages to the
// connected subscribers, one after the other. Note that zmq4's HWM is one
// queue shared by all subscribers (libzmq keeps one per subscriber), and
// that a subscriber whose socket is not read stops that goroutine for
// every subscriber until the queue reaches HWM and drops: a kvevents
// Subscriber therefore never stops reading its socket (it drops on a full
// queue of its own and replays, see SubscriberOptions.Queue); another
// client must do the same. The sequence numbers let subscribers detect
// drops (see SeqTracker) and recover via replay.
type Publisher struct {
	enc    *Encoder
	topic  []byte
	dprank int

	mu     sync.Mutex
	closed bool
	next   uint64
	ring   []entry // circular, capacity = replay buffer size
	start  int     // index of the oldest entry
	count  int

	pub    zmq4.Socket
	router zmq4.Socket
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewPublisher creates the sockets and starts serving replays. The context
// bounds the sockets' lifetime; Close releases them.
func NewPublisher(ctx context.Context, opts Options) (*Publisher, error) {
	if opts.Endpoint == "" {
		return nil, fmt.Errorf("%w: Options.Endpoint is empty", ErrInvalidOptions)
	}
	if err := checkEndpoint("Options.Endpoint", opts.Endpoint); err != nil {
		return nil, err
	}
	if opts.ReplayEndpoint != "" {
		if err := checkEndpoint("Options.ReplayEndpoint", opts.ReplayEndpoint); err != nil {
			return nil, err
		}
	}
	enc, err := NewEncoder(opts.Encoder)
	if err != nil {
		return nil, err
	}
	hwm := opts.HWM
	switch {
	case hwm == 0:
		hwm = DefaultHWM
	case hwm < 0:
		hwm = 0 // zmq4: 0 means unbounded
	}
	rb := opts.ReplayBuffer
	switch {
	case rb == 0:
		rb = DefaultReplayBuffer
	case rb < 0:
		rb = 0
	}
	topic := opts.Topic
	if topic == "" && (opts.Server != "" || opts.Model != "") {
		topic = DefaultTopic(opts.Server, opts.Model)
	}
	sendTimeout := opts.ReplaySendTimeout
	if sendTimeout <= 0 {
		sendTimeout = 5 * time.Second
	}

	ctx, cancel := context.WithCancel(ctx)
	p := &Publisher{
		enc:    enc,
		topic:  []byte(topic),
		dprank: opts.DPRank,
		ring:   make([]entry, rb),
		cancel: cancel,
	}
	p.pub = zmq4.NewPub(ctx)
	if err := p.pub.SetOption(zmq4.OptionHWM, hwm); err != nil {
		p.closeSockets()
		return nil, fmt.Errorf("kvevents: set HWM: %w", err)
	}
	if opts.Dial {
		err = p.pub.Dial(opts.Endpoint)
	} else {
		err = p.pub.Listen(opts.Endpoint)
	}
	if err != nil {
		p.closeSockets()
		return nil, fmt.Errorf("kvevents: PUB %s: %w", opts.Endpoint, err)
	}
	if opts.ReplayEndpoint != "" {
		p.router = zmq4.NewRouter(ctx, zmq4.WithTimeout(sendTimeout))
		if err := p.router.Listen(opts.ReplayEndpoint); err != nil {
			p.closeSockets()
			return nil, fmt.Errorf("kvevents: ROUTER %s: %w", opts.ReplayEndpoint, err)
		}
		p.wg.Add(1)
		go p.serveReplay(ctx)
	}
	return p, nil
}

// Addr returns the PUB endpoint actually bound, as "tcp://host:port"
// (useful with port 0), or "" when dialing.
func (p *Publisher) Addr() string { return sockAddr(p.pub) }

// ReplayAddr returns the ROUTER endpoint actually bound, or "".
func (p *Publisher) ReplayAddr() string {
	if p.router == nil {
		return ""
	}
	return sockAddr(p.router)
}

func sockAddr(s zmq4.Socket) string {
	a := s.Addr()
	if a == nil {
		return ""
	}
	return a.Network() + "://" + a.String()
}

// Topic returns the topic frame used for every message.
func (p *Publisher) Topic() string { return string(p.topic) }

// Publish encodes b, assigns it the next sequence number (starting at 0),
// sends it and keeps it for replay. It does not block on subscribers.
// Batches are sent in the order of their sequence numbers.
func (p *Publisher) Publish(b Batch) (uint64, error) {
	if b.DPRank == nil {
		r := p.dprank
		b.DPRank = &r
	}
	payload, err := p.enc.Encode(b)
	if err != nil {
		return 0, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0, ErrClosed
	}
	seq := p.next
	var seqb [8]byte
	binary.BigEndian.PutUint64(seqb[:], seq)
	if err := p.pub.SendMulti(zmq4.NewMsgFrom(p.topic, seqb[:], payload)); err != nil {
		// The sequence number is still consumed and the batch kept for
		// replay: subscribers see a gap and can recover it.
		p.keep(seq, payload)
		p.next++
		return seq, fmt.Errorf("kvevents: publish seq %d: %w", seq, err)
	}
	p.keep(seq, payload)
	p.next++
	return seq, nil
}

// keep appends to the ring; p.mu held.
func (p *Publisher) keep(seq uint64, payload []byte) {
	n := len(p.ring)
	if n == 0 {
		return
	}
	if p.count < n {
		p.ring[(p.start+p.count)%n] = entry{seq, payload}
		p.count++
		return
	}
	p.ring[p.start] = entry{seq, payload}
	p.start = (p.start + 1) % n
}

// since returns the buffered entries with seq >= from, oldest first.
func (p *Publisher) since(from uint64) []entry {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []entry
	n := len(p.ring)
	for i := 0; i < p.count; i++ {
		e := p.ring[(p.start+i)%n]
		if e.seq >= from {
			out = append(out, e)
		}
	}
	return out
}

// serveReplay answers [identity, "", start_seq] with [identity, "", seq,
// payload] for every buffered batch from start_seq on, then
// [identity, "", -1, ""]. Malformed requests are ignored, as vLLM does.
func (p *Publisher) serveReplay(ctx context.Context) {
	defer p.wg.Done()
	for {
		msg, err := p.router.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			continue
		}
		if len(msg.Frames) != 3 || len(msg.Frames[2]) != 8 {
			continue
		}
		id := msg.Frames[0]
		start := binary.BigEndian.Uint64(msg.Frames[2])
		ok := true
		for _, e := range p.since(start) {
			var seqb [8]byte
			binary.BigEndian.PutUint64(seqb[:], e.seq)
			if err := p.router.SendMulti(zmq4.NewMsgFrom(id, nil, seqb[:], e.payload)); err != nil {
				ok = false
				break
			}
		}
		if ok {
			_ = p.router.SendMulti(zmq4.NewMsgFrom(id, nil, endSeq, nil))
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// Close stops the replay server and closes the sockets. Messages still in
// the PUB queue may be dropped. Close is idempotent.
func (p *Publisher) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.closeSockets()
	p.wg.Wait()
	return err
}

func (p *Publisher) closeSockets() error {
	p.cancel()
	var errs []error
	for _, sock := range []zmq4.Socket{p.pub, p.router} {
		if sock == nil {
			continue
		}
		// A connection its peer or the cancelled context closed first
		// reports net.ErrClosed: it is closed, as asked.
		if err := sock.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// SeqTracker detects gaps in a subscriber's stream of sequence numbers.
// The zero value expects sequence 0 first.
type SeqTracker struct {
	next uint64
}

// Observe records seq and reports the missing range [from, to) if seq is
// ahead of the next expected number. Sequence numbers below the expected
// one (duplicates, replays already applied) report no gap and do not move
// the tracker; ok is false for them so the caller can skip the batch.
func (t *SeqTracker) Observe(seq uint64) (from, to uint64, gap, ok bool) {
	if seq < t.next {
		return 0, 0, false, false
	}
	if seq > t.next {
		from, to, gap = t.next, seq, true
	}
	t.next = seq + 1
	return from, to, gap, true
}

// Next returns the next expected sequence number.
func (t *SeqTracker) Next() uint64 { return t.next }
