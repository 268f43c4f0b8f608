package kvcache

import (
	"sync"
	"sync/atomic"
)

// TransferEngine moves the bytes of the copies a Cache plans, off the
// cache's lock: an operation plans its copies, hands them to the engine
// and returns at once, and the engine reports when each transfer is done.
// A server supplies one over its device memory (copies on a CUDA stream,
// done called from a completion event or a poller); AsyncMemoryStore is
// one over Go byte slices for tests and simulations. Config.Engine sets
// it; a Cache with a synchronous Mover (Config.Mover) moves bytes inside
// its calls instead.
//
// Contract:
//   - Start begins the transfer of copies and returns without waiting. The
//     copies run in order, or as if in order: a later copy may write a
//     slot an earlier one of the same transfer read (a victim's slot is
//     refilled once its bytes have moved down). Different transfers are
//     independent: the cache never hands out a slot that an unfinished
//     transfer reads or writes, so the engine may run them in any order,
//     in parallel.
//   - The engine calls done exactly once per Start, from any goroutine
//     (possibly before Start returns), with nil when every copy completed
//     or the error that stopped the transfer. After an error any
//     destination of the transfer may have been written, or not: the
//     cache trusts none of them (see Cache.Poll). An engine that knows
//     which copies completed may instead report a CopyErrors as long as
//     copies: the cache then trusts the destinations of the copies whose
//     element is nil, but for one that read a slot a failed copy of the
//     transfer was to write (a failed copy's destination may have been
//     written, or not). Sources are only read. Once it has called done,
//     the engine no longer touches the copies' slots.
//   - The copies slice is the engine's until done is called; the cache
//     does not change it meanwhile.
//   - Start is called with the cache's lock held and must not call the
//     cache (ErrReentrant) or wait for a goroutine that does; done may be
//     called anywhere and never blocks on the cache.
//   - A Start that panics or ends its goroutine (runtime.Goexit) may have
//     begun copies that still run, so the cache frees none of the
//     transfer's slots: it poisons itself (every later change returns an
//     error wrapping ErrCopyFailed and the *PanicError) and hands the
//     engine nothing more.
type TransferEngine interface {
	Start(copies []Copy, done func(error))
}

// inbox collects the transfers the engine reports done, from any
// goroutine, until the cache applies them under its lock (Poll). It has a
// lock of its own so that done never waits for the cache's.
type inbox struct {
	mu   sync.Mutex
	done []finished
	// has says whether done may hold reports: Poll looks at it without
	// taking mu, so that a call with nothing to apply costs an atomic load.
	has atomic.Bool
	// signal receives a value whenever a transfer finishes (one value
	// stands for any number since the last receive): for one consumer
	// (Cache.Completed). changed is closed, and replaced, whenever a
	// transfer finishes: for any number of waiters (WaitReady), each of
	// which takes it before it checks its condition, so that no finish
	// after the check goes unseen.
	signal  chan struct{}
	changed chan struct{}
}

// finished is one transfer the engine reported done.
type finished struct {
	id  transferID
	err error
}

func (b *inbox) init() {
	b.signal = make(chan struct{}, 1)
	b.changed = make(chan struct{})
}

// next returns a channel closed when the next transfer finishes.
func (b *inbox) next() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.changed
}

// push records that transfer id finished with err.
func (b *inbox) push(id transferID, err error) {
	b.mu.Lock()
	b.done = append(b.done, finished{id: id, err: err})
	b.has.Store(true)
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
	select {
	case b.signal <- struct{}{}:
	default:
	}
}

// poke signals the waiters and the consumer as a finish does, without a
// report: the cache has finished transfers left to apply (see poll).
func (b *inbox) poke() {
	b.mu.Lock()
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
	select {
	case b.signal <- struct{}{}:
	default:
	}
}

// ready reports whether a transfer may have finished since the last take.
func (b *inbox) ready() bool { return b.has.Load() }

// take moves the finished transfers into dst and returns it.
func (b *inbox) take(dst []finished) []finished {
	b.mu.Lock()
	b.has.Store(false)
	dst = append(dst, b.done...)
	clear(b.done)
	b.done = b.done[:0]
	b.mu.Unlock()
	return dst
}

// MoverEngine returns a TransferEngine that performs each transfer with m
// inside Start, so that it completes at submission (the cache applies it
// before the operation returns). It lets a Mover that only enqueues (a
// single CUDA stream) run under the asynchronous protocol unchanged; a
// Cache configured with Config.Mover instead keeps the synchronous one,
// where a failed batch rolls the operation back.
func MoverEngine(m Mover) TransferEngine { return moverEngine{m} }

type moverEngine struct{ m Mover }

func (e moverEngine) Start(copies []Copy, done func(error)) { done(e.m.Copy(copies)) }
