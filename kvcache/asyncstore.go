package kvcache

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// ErrStoreClosed reports a transfer started on an AsyncMemoryStore after
// Close.
var ErrStoreClosed = errors.New("kvcache: store closed")

// AsyncOptions configure an AsyncMemoryStore.
type AsyncOptions struct {
	// Workers is how many transfers run at once (at least 1; 0 means 1,
	// like a single copy stream).
	Workers int
	// Latency is how long a transfer waits before its first copy, and
	// CopyTime how long each copy takes (a sleep before it): a simulated
	// link.
	Latency, CopyTime time.Duration
	// Jitter, when positive, adds a random wait in [0, Jitter) to each
	// transfer's Latency, so that with several Workers transfers finish
	// out of the order they started in, as on a link that other traffic
	// shares. (One worker runs them in order whatever their waits.)
	Jitter time.Duration
	// Fail, when not nil, is asked once per transfer, before it runs; a
	// non-nil error fails the transfer: its first half of copies is
	// performed, the next destination is overwritten with garbage (a copy
	// that broke off in the middle), and done reports the error. It is
	// called from the worker goroutines.
	Fail func(copies []Copy) error
}

// AsyncMemoryStore is a TransferEngine over a MemoryStore: it performs the
// copies of each transfer on worker goroutines, after a configurable
// delay, and can be told to fail. Tests and simulations use it to run a
// Cache as a server with a real copy engine would, and to check that no
// failed or unfinished copy is ever read.
//
// The MemoryStore is the one the server reads and writes (Bytes): a
// transfer writes only slots the cache gives nobody else until it is done,
// and the report of a transfer happens before the Poll (or Readiness) that
// applies it, so a server that reads a unit once Readiness says its layer
// is ready reads the copied bytes.
type AsyncMemoryStore struct {
	store *MemoryStore
	opts  AsyncOptions

	mu     sync.Mutex
	cond   *sync.Cond
	queue  []asyncJob
	closed bool
	wg     sync.WaitGroup
}

type asyncJob struct {
	copies []Copy
	done   func(error)
}

// NewAsyncMemoryStore starts opts.Workers workers over m. It returns an
// error wrapping ErrInvalidConfig for a nil m or a negative option.
func NewAsyncMemoryStore(m *MemoryStore, opts AsyncOptions) (*AsyncMemoryStore, error) {
	switch {
	case m == nil:
		return nil, fmt.Errorf("%w: nil MemoryStore", ErrInvalidConfig)
	case opts.Workers < 0:
		return nil, fmt.Errorf("%w: Workers %d is negative", ErrInvalidConfig, opts.Workers)
	case opts.Latency < 0 || opts.CopyTime < 0 || opts.Jitter < 0:
		return nil, fmt.Errorf("%w: Latency %v, CopyTime %v or Jitter %v is negative", ErrInvalidConfig, opts.Latency, opts.CopyTime, opts.Jitter)
	}
	a := &AsyncMemoryStore{store: m, opts: opts}
	a.cond = sync.NewCond(&a.mu)
	n := max(1, opts.Workers)
	a.wg.Add(n)
	for range n {
		go a.work()
	}
	return a, nil
}

// Store returns the MemoryStore the transfers copy in.
func (a *AsyncMemoryStore) Store() *MemoryStore { return a.store }

// Start queues the transfer and returns at once; a worker performs it and
// calls done. After Close it calls done with an error wrapping
// ErrStoreClosed.
func (a *AsyncMemoryStore) Start(copies []Copy, done func(error)) {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		done(fmt.Errorf("%w: transfer of %d copies", ErrStoreClosed, len(copies)))
		return
	}
	a.queue = append(a.queue, asyncJob{copies: copies, done: done})
	a.mu.Unlock()
	a.cond.Signal()
}

// Close stops the workers once the queued transfers are done, and waits
// for them.
func (a *AsyncMemoryStore) Close() {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	a.cond.Broadcast()
	a.wg.Wait()
}

func (a *AsyncMemoryStore) work() {
	defer a.wg.Done()
	for {
		a.mu.Lock()
		for len(a.queue) == 0 && !a.closed {
			a.cond.Wait()
		}
		if len(a.queue) == 0 {
			a.mu.Unlock()
			return
		}
		j := a.queue[0]
		a.queue[0] = asyncJob{}
		a.queue = a.queue[1:]
		a.mu.Unlock()
		j.done(a.run(j.copies))
	}
}

// run performs one transfer, or the broken part of a failing one.
func (a *AsyncMemoryStore) run(copies []Copy) error {
	var fail error
	if a.opts.Fail != nil {
		fail = a.opts.Fail(copies)
	}
	n := len(copies)
	if fail != nil {
		n /= 2
	}
	wait := a.opts.Latency
	if a.opts.Jitter > 0 {
		wait += rand.N(a.opts.Jitter)
	}
	sleep(wait)
	for i := range copies[:n] {
		sleep(a.opts.CopyTime)
		if err := a.store.Copy(copies[i : i+1]); err != nil {
			return err
		}
	}
	if fail == nil {
		return nil
	}
	if n < len(copies) {
		cp := copies[n]
		dst := a.store.Bytes(cp.To, cp.Pool, cp.ToSlot)
		for i := range dst {
			dst[i] = byte(i*7 + 0x5a)
		}
	}
	return fmt.Errorf("%w: %d of %d copies done: %w", ErrCopyFailed, n, len(copies), fail)
}

func sleep(d time.Duration) {
	if d > 0 {
		time.Sleep(d)
	}
}
