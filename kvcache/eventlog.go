package kvcache

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// eventLog carries the cache's events out of its operations. An operation
// queues its events while it holds the cache's lock (running); when it
// releases the lock they go to the buffer that TakeEvents drains, and to
// the EventSink, which the goroutine that ran the operation calls itself.
//
// Delivery to the sink is in operation order and each caller delivers only
// its own operation's events: an operation that emitted events takes a
// ticket under the cache's lock, and after releasing it waits until every
// earlier ticket's batch is delivered (a slow sink therefore slows every
// caller that has events to deliver, and memory stays bounded by one batch
// per waiting caller). An operation that a sink itself makes (from inside a
// delivery) cannot wait for the delivery it runs in: its batch is handed to
// that delivery, which delivers it when its ticket comes up.
//
// The buffer has a fixed capacity; when it is full the oldest events are
// dropped and counted, so a server that stops draining it loses history,
// not memory.
type eventLog struct {
	sink EventSink
	// blocksOnly leaves UnitMoved events out (Config.BlockEventsOnly).
	blocksOnly bool

	// running holds the events of the running operation (Cache.mu).
	running []Event
	// media is, with events on, the tier each unit of each tree block
	// was last reported on, by block record (see Medium, BlockMoved):
	// what a consumer of the events believes (Cache.mu).
	media map[int32][]Tier

	// ring is the TakeEvents buffer (Cache.mu): n events from head, of
	// capacity len(ring); nil when Config.EventBuffer is 0.
	ring    []Event
	head, n int
	// dropped counts events the full buffer lost; lost those of them
	// not yet reported by TakeEvents (Cache.mu).
	dropped, lost uint64

	// tickets is the next ticket to hand out (Cache.mu).
	tickets uint64
	// dmu guards serving and nested; turn is signalled when serving moves.
	dmu     sync.Mutex
	turn    sync.Cond
	serving uint64
	// nested collects the batches of operations the sink makes during the
	// running delivery; nil when no delivery runs.
	nested *[]eventBatch
	// skip holds the tickets of batches abandoned before their turn (see
	// abandon).
	skip map[uint64]bool
	// delivering counts sink calls in progress, so that an operation
	// looks at its own stack (inSink) only while one runs.
	delivering atomic.Int32

	panics    atomic.Uint64
	lastPanic atomic.Pointer[PanicError]
}

// eventBatch is the events of one operation and its delivery ticket.
type eventBatch struct {
	ticket uint64
	events []Event
}

func (q *eventLog) init(sink EventSink, buffer int) {
	q.sink = sink
	q.turn.L = &q.dmu
	if buffer > 0 {
		q.ring = make([]Event, buffer)
	}
	if q.enabled() {
		q.media = make(map[int32][]Tier)
	}
}

// enabled reports whether events are built at all: with neither a sink nor
// a buffer nobody would read them.
func (q *eventLog) enabled() bool { return q.sink != nil || q.ring != nil }

// emit queues e for the running operation (Cache.mu held).
func (q *eventLog) emit(e Event) { q.running = append(q.running, e) }

// publish hands the running operation's events to the buffer and returns
// the sink's batch, if there is one (Cache.mu held). The caller delivers
// the batch after releasing the lock.
func (q *eventLog) publish() (eventBatch, bool) {
	if len(q.running) == 0 {
		return eventBatch{}, false
	}
	for _, e := range q.running {
		q.buffer(e)
	}
	if q.sink == nil {
		clear(q.running)
		q.running = q.running[:0]
		return eventBatch{}, false
	}
	b := eventBatch{ticket: q.tickets, events: q.running}
	q.tickets++
	q.running = nil // the batch owns the slice now
	return b, true
}

// buffer appends e to the ring, dropping the oldest event when it is full.
func (q *eventLog) buffer(e Event) {
	if q.ring == nil {
		return
	}
	if q.n == len(q.ring) {
		q.ring[q.head] = Event{}
		q.head = (q.head + 1) % len(q.ring)
		q.n--
		q.dropped++
		q.lost++
	}
	q.ring[(q.head+q.n)%len(q.ring)] = e
	q.n++
}

// take appends the buffered events to dst, oldest first, empties the
// buffer and returns the events lost since the previous take (Cache.mu).
func (q *eventLog) take(dst []Event) ([]Event, uint64) {
	for i := range q.n {
		j := (q.head + i) % len(q.ring)
		dst = append(dst, q.ring[j])
		q.ring[j] = Event{}
	}
	q.head, q.n = 0, 0
	lost := q.lost
	q.lost = 0
	return dst, lost
}

// deliver calls the sink with batch b once every earlier batch has been
// delivered, then with the batches of the operations its sink calls made
// (see eventLog).
func (q *eventLog) deliver(b eventBatch) {
	if q.delivering.Load() > 0 && inSink() {
		q.dmu.Lock()
		*q.nested = append(*q.nested, b)
		q.dmu.Unlock()
		return
	}
	var mine []eventBatch
	done := false
	defer func() {
		if !done {
			q.abandon(b, mine)
		}
	}()
	for {
		q.dmu.Lock()
		for q.serving != b.ticket {
			q.turn.Wait()
		}
		q.nested = &mine
		q.dmu.Unlock()
		for _, e := range b.events {
			q.callSink(e)
		}
		q.dmu.Lock()
		q.nested = nil
		q.advance()
		q.dmu.Unlock()
		if len(mine) == 0 {
			done = true
			return
		}
		b, mine = mine[0], mine[1:]
	}
}

// advance ends the turn being served and moves to the next ticket not
// abandoned (q.dmu held).
func (q *eventLog) advance() {
	q.serving++
	for q.skip[q.serving] {
		delete(q.skip, q.serving)
		q.serving++
	}
	q.turn.Broadcast()
}

// abandon gives up batch b, whose delivery the sink cut short by ending
// the goroutine (runtime.Goexit), and the batches it owned: their tickets
// are skipped, so that later deliveries are not stuck behind them, and the
// exit is counted like a sink panic.
func (q *eventLog) abandon(b eventBatch, owned []eventBatch) {
	q.panics.Add(1)
	q.lastPanic.Store(newPanicError("EventSink", "runtime.Goexit called: the delivery was abandoned"))
	q.dmu.Lock()
	defer q.dmu.Unlock()
	if q.skip == nil {
		q.skip = make(map[uint64]bool)
	}
	for _, o := range owned {
		q.skip[o.ticket] = true
	}
	if q.serving == b.ticket {
		q.nested = nil
		q.advance()
	} else {
		q.skip[b.ticket] = true
	}
}

// callSink calls the sink with e. A panic is recovered and counted (see
// Cache.SinkPanic): a sink that fails on one event still gets the next.
func (q *eventLog) callSink(e Event) {
	q.delivering.Add(1)
	defer func() {
		q.delivering.Add(-1)
		if r := recover(); r != nil {
			q.panics.Add(1)
			q.lastPanic.Store(newPanicError(fmt.Sprintf("EventSink (%s event)", e.Kind), r))
		}
	}()
	q.sink(e)
}

// TakeEvents appends to dst, oldest first, the events buffered since the
// previous call (Config.EventBuffer), empties the buffer, and returns dst
// and how many events the buffer dropped meanwhile because it was full (a
// consumer that lost events must resynchronize, for example from an empty
// view after an AllCleared). A server calls it once per scheduling step.
// With no buffer configured it returns dst and 0.
//
// It returns dst unchanged and an error wrapping ErrReentrant when called
// from a policy or Mover callback.
func (c *Cache) TakeEvents(dst []Event) ([]Event, uint64, error) {
	if err := c.lock("TakeEvents"); err != nil {
		return dst, 0, err
	}
	defer c.mu.Unlock()
	if c.events.ring == nil {
		return dst, 0, nil
	}
	dst, lost := c.events.take(dst)
	c.fillStats(&c.snap) // EventsBuffered changed
	return dst, lost, nil
}

// SinkPanic returns the last panic the EventSink raised (recovered: the
// sink went on with the next event), or nil. Stats.SinkPanics counts them.
func (c *Cache) SinkPanic() *PanicError {
	return c.events.lastPanic.Load()
}
