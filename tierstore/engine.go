package tierstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/radix"
)

// EngineConfig configures an Engine.
type EngineConfig struct {
	// Memory holds the tiers kept in memory, the first ones (the GPU and
	// the CPU): NewMemoryStore over the cache's layout and its first tiers.
	Memory *kvcache.MemoryStore
	// Stores holds the bytes of each tier below them, by tier. Every tier
	// of a copy must be in Memory or in Stores.
	Stores map[kvcache.Tier]Store
	// Workers is how many transfers run at once; 0 means 4.
	Workers int
	// MaxBatch is the most units of one Store call; a longer run of
	// copies to or from a store is cut into calls of MaxBatch units that
	// run Parallel at a time. 0 means 16 (over loopback Redis, pipelines
	// of 16 values of 1-2 MiB moved more per second than pipelines of 64).
	MaxBatch int
	// Parallel is how many Store calls of one transfer run at once; 0
	// means 4.
	Parallel int
	// Timeout bounds each Store call; 0 means 5 seconds. A call that
	// times out fails its batch and the batches of the transfer not
	// started yet (the cache recomputes what they loaded, drops what they
	// moved down).
	Timeout time.Duration
	// OnError, when not nil, is told every failed Store call: the tier,
	// how many units failed (all of the call's, but for a
	// kvcache.CopyErrors) and the error. It runs on an engine
	// goroutine and must not block.
	OnError func(t kvcache.Tier, units int, err error)
}

// Engine is a kvcache.KeyedEngine over memory tiers and stores: it moves a
// cache's copies on its own goroutines, copying in memory between memory
// tiers and calling the tier's Store for the others. Set it as the cache's
// kvcache.Config.Engine; Close it after the cache's last transfer.
//
// The copies of one transfer run in their order, a run of consecutive
// copies between the same two tiers at a time (so a slot a copy reads
// before a later copy refills it is read first); a run to or from a store
// is cut into batches. A unit a store lacks or holds corrupt fails its own
// copy only (the engine reports a kvcache.CopyErrors, and the cache
// recomputes that unit and keeps the rest); any other failure (a store
// unavailable or timing out) fails its batch, and the batches not started
// yet are not tried (they would wait out the same timeout): they fail
// too.
//
// A unit of a block the cache has not committed (kvcache.UnitKey.Shared is
// false) is stored under a namespace private to this Engine, so that no
// other cache can address it.
type Engine struct {
	cfg     EngineConfig
	private string

	mu     sync.Mutex
	cond   *sync.Cond
	queue  []job
	closed bool
	wg     sync.WaitGroup

	calls, failures atomic.Uint64
}

type job struct {
	copies []kvcache.Copy
	keys   []kvcache.UnitKey
	done   func(error)
}

// NewEngine starts an Engine's workers. It returns an error wrapping
// ErrInvalidConfig for a nil Memory, a nil Store, a Store for a tier that
// Memory holds or that is no tier, or negative options.
func NewEngine(cfg EngineConfig) (*Engine, error) {
	if cfg.Memory == nil {
		return nil, fmt.Errorf("%w: nil Memory", ErrInvalidConfig)
	}
	for t, s := range cfg.Stores {
		if s == nil {
			return nil, fmt.Errorf("%w: nil Store for tier %d", ErrInvalidConfig, t)
		}
		if t <= kvcache.Dropped || t > kvcache.MaxTiers {
			return nil, fmt.Errorf("%w: Store for tier %d, not a tier (1 to %d)", ErrInvalidConfig, t, kvcache.MaxTiers)
		}
		if int(t) <= cfg.Memory.Tiers() {
			// The copies of a tier go to its Store when it has one: the
			// memory of a tier Memory holds would never be read, and
			// every load from it would fail (and be recomputed).
			return nil, fmt.Errorf("%w: Store for tier %d, which Memory holds (tiers 1 to %d); a Store serves a tier below them", ErrInvalidConfig, t, cfg.Memory.Tiers())
		}
	}
	if cfg.Workers < 0 || cfg.MaxBatch < 0 || cfg.Parallel < 0 || cfg.Timeout < 0 {
		return nil, fmt.Errorf("%w: negative Workers %d, MaxBatch %d, Parallel %d or Timeout %v", ErrInvalidConfig, cfg.Workers, cfg.MaxBatch, cfg.Parallel, cfg.Timeout)
	}
	cfg.Workers = cmpOr(cfg.Workers, 4)
	cfg.MaxBatch = cmpOr(cfg.MaxBatch, 16)
	cfg.Parallel = cmpOr(cfg.Parallel, 4)
	cfg.Timeout = cmpOr(cfg.Timeout, 5*time.Second)
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	e := &Engine{cfg: cfg, private: "\x00private:" + hex.EncodeToString(nonce[:])}
	e.cond = sync.NewCond(&e.mu)
	for range cfg.Workers {
		e.wg.Add(1)
		go e.work()
	}
	return e, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Start runs copies that involve no store; one that does fails with
// ErrNoKey (a kvcache.Cache calls StartKeyed).
func (e *Engine) Start(copies []kvcache.Copy, done func(error)) {
	e.StartKeyed(copies, nil, done)
}

// StartKeyed queues a transfer and returns at once (see
// kvcache.KeyedEngine). After Close it fails the transfer with ErrClosed.
func (e *Engine) StartKeyed(copies []kvcache.Copy, keys []kvcache.UnitKey, done func(error)) {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		done(fmt.Errorf("%w: transfer of %d copies", ErrClosed, len(copies)))
		return
	}
	e.queue = append(e.queue, job{copies: copies, keys: keys, done: done})
	e.mu.Unlock()
	e.cond.Signal()
}

// Close fails the transfers not started yet with ErrClosed and waits for
// the running ones. It does not close the stores.
func (e *Engine) Close() {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.closed = true
	pending := e.queue
	e.queue = nil
	e.mu.Unlock()
	e.cond.Broadcast()
	for _, j := range pending {
		j.done(fmt.Errorf("%w: transfer of %d copies", ErrClosed, len(j.copies)))
	}
	e.wg.Wait()
}

// Stores reports whether the engine keeps tier t's bytes in a Store (see
// kvcache.KeyedEngine).
func (e *Engine) Stores(t kvcache.Tier) bool { return e.cfg.Stores[t] != nil }

// StoreCalls returns how many Store calls the engine made and how many of
// them failed.
func (e *Engine) StoreCalls() (calls, failed uint64) { return e.calls.Load(), e.failures.Load() }

func (e *Engine) work() {
	defer e.wg.Done()
	for {
		e.mu.Lock()
		for len(e.queue) == 0 && !e.closed {
			e.cond.Wait()
		}
		if len(e.queue) == 0 {
			e.mu.Unlock()
			return
		}
		j := e.queue[0]
		e.queue[0] = job{}
		e.queue = e.queue[1:]
		e.mu.Unlock()
		j.done(e.run(j.copies, j.keys))
	}
}

// run performs one transfer's copies, a run of copies between the same
// two tiers at a time. It returns nil, or a kvcache.CopyErrors naming the
// copies that failed: a unit missing from its store or corrupt fails its
// own copy only; any other failure (the store unavailable, a bad copy)
// fails its batch, and the batches not started yet are not tried (they
// would wait out the same timeout), which fails them too.
func (e *Engine) run(copies []kvcache.Copy, keys []kvcache.UnitKey) error {
	var errs kvcache.CopyErrors
	for start := 0; start < len(copies); {
		end := start + 1
		for end < len(copies) && copies[end].From == copies[start].From && copies[end].To == copies[start].To {
			end++
		}
		var ks []kvcache.UnitKey
		if keys != nil {
			ks = keys[start:end]
		}
		group, stop := e.runGroup(copies[start:end], ks)
		for i, err := range group {
			if err != nil {
				errs = errs.Set(start+i, len(copies), err)
			}
		}
		if stop != nil {
			for i := end; i < len(copies); i++ {
				errs = errs.Set(i, len(copies), notTried(stop))
			}
			break
		}
		start = end
	}
	return errs.Err()
}

// runGroup performs copies between the same two tiers. It returns the
// error of each copy (nil when all completed) and, when a batch failed
// otherwise than by missing or corrupt units, that failure.
func (e *Engine) runGroup(copies []kvcache.Copy, keys []kvcache.UnitKey) (errs []error, stop error) {
	from, to := e.cfg.Stores[copies[0].From], e.cfg.Stores[copies[0].To]
	if from == nil && to == nil {
		return perCopy(e.cfg.Memory.Copy(copies), len(copies))
	}
	if keys == nil {
		return perCopy(fmt.Errorf("%w: %d copies from tier %d to tier %d", ErrNoKey, len(copies), copies[0].From, copies[0].To), len(copies))
	}
	n := e.cfg.MaxBatch
	if len(copies) <= n {
		return perCopy(e.batch(from, to, copies, keys), len(copies))
	}
	var (
		wg  sync.WaitGroup
		sem = make(chan struct{}, e.cfg.Parallel)
		mu  sync.Mutex
	)
	record := func(i, j int, berrs []error, bstop error) {
		mu.Lock()
		defer mu.Unlock()
		if errs == nil {
			errs = make([]error, len(copies))
		}
		copy(errs[i:j], berrs)
		if stop == nil {
			stop = bstop
		}
	}
	stopped := func() error {
		mu.Lock()
		defer mu.Unlock()
		return stop
	}
	for i := 0; i < len(copies); i += n {
		j := min(i+n, len(copies))
		sem <- struct{}{}
		if s := stopped(); s != nil {
			// A batch already failed otherwise than by its units:
			// the ones not started yet are not tried.
			<-sem
			skipped := make([]error, j-i)
			for k := range skipped {
				skipped[k] = notTried(s)
			}
			record(i, j, skipped, nil)
			continue
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if berrs, bstop := perCopy(e.batch(from, to, copies[i:j], keys[i:j]), j-i); berrs != nil {
				record(i, j, berrs, bstop)
			}
		}()
	}
	wg.Wait()
	return errs, stop
}

// perCopy spreads err, the error of a batch of n copies, over its copies:
// a kvcache.CopyErrors of n (wrapped or not) gives the copies' own errors,
// any other error is every copy's. A copy's error that says anything else
// than that its unit is missing or corrupt (the store unavailable, a bad
// copy) is returned as stop as well.
func perCopy(err error, n int) (errs []error, stop error) {
	if err == nil {
		return nil, nil
	}
	var ce kvcache.CopyErrors
	if errors.As(err, &ce) && len(ce) == n {
		errs = ce
	} else {
		errs = make([]error, n)
		for i := range errs {
			errs[i] = err
		}
	}
	return errs, storeFailure(errs)
}

// storeFailure returns the first of errs that says more than that its
// unit is missing or corrupt (the store unavailable, a bad copy), or nil.
func storeFailure(errs []error) error {
	for _, err := range errs {
		if err != nil && !errors.Is(err, kvcache.ErrUnitMissing) && !errors.Is(err, kvcache.ErrUnitCorrupt) {
			return err
		}
	}
	return nil
}

// notTried is the error of a copy the engine did not try after stop.
func notTried(stop error) error {
	return fmt.Errorf("tierstore: copy not tried after a failure: %w", stop)
}

// batch performs copies between the same two tiers in one Store call (two
// when both are stores: the units the Get read are Put). It returns nil,
// a kvcache.CopyErrors of len(copies), or the batch's error.
func (e *Engine) batch(from, to Store, copies []kvcache.Copy, keys []kvcache.UnitKey) error {
	ks := make([]kvcache.UnitKey, len(keys))
	for i, k := range keys {
		ks[i] = e.keyOf(k)
	}
	bufs := make([][]byte, len(copies))
	var got kvcache.CopyErrors // the units the Get could not read
	if from != nil {
		for i, cp := range copies {
			if to == nil {
				bufs[i] = e.cfg.Memory.Bytes(cp.To, cp.Pool, cp.ToSlot)
			} else {
				bufs[i] = make([]byte, e.unitBytes(cp.Pool))
			}
			if bufs[i] == nil {
				return fmt.Errorf("%w: copy to tier %d pool %d slot %d", kvcache.ErrInvalidCopy, cp.To, cp.Pool, cp.ToSlot)
			}
		}
		if err := e.call(copies[0].From, len(copies), func(ctx context.Context) error { return from.Get(ctx, ks, bufs) }); err != nil {
			var ce kvcache.CopyErrors
			if to == nil || !errors.As(err, &ce) || len(ce) != len(copies) || storeFailure(ce) != nil {
				return err
			}
			got = ce
		}
	} else {
		for i, cp := range copies {
			bufs[i] = e.cfg.Memory.Bytes(cp.From, cp.Pool, cp.FromSlot)
			if bufs[i] == nil {
				return fmt.Errorf("%w: copy from tier %d pool %d slot %d", kvcache.ErrInvalidCopy, cp.From, cp.Pool, cp.FromSlot)
			}
		}
	}
	if to == nil {
		return nil
	}
	if got == nil {
		return e.call(copies[0].To, len(copies), func(ctx context.Context) error { return to.Put(ctx, ks, bufs) })
	}
	// Store to store with some units unread: Put the others.
	var pk []kvcache.UnitKey
	var pb [][]byte
	for i, err := range got {
		if err == nil {
			pk, pb = append(pk, ks[i]), append(pb, bufs[i])
		}
	}
	if len(pk) > 0 {
		if err := e.call(copies[0].To, len(pk), func(ctx context.Context) error { return to.Put(ctx, pk, pb) }); err != nil {
			return err // the whole batch fails (and, unavailable, stops)
		}
	}
	return got.Err()
}

// call runs one Store call with the engine's timeout, counting it.
func (e *Engine) call(t kvcache.Tier, units int, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.Timeout)
	defer cancel()
	e.calls.Add(1)
	err := f(ctx)
	var ce kvcache.CopyErrors
	if errors.As(err, &ce) && len(ce) == units {
		if units = ce.Failed(); units == 0 {
			err = nil // no unit failed
		}
	}
	if err != nil {
		e.failures.Add(1)
		if e.cfg.OnError != nil {
			e.cfg.OnError(t, units, err)
		}
	}
	return err
}

// keyOf returns the key the stores see for k: k itself for a shared unit,
// and for a private one a key in the engine's own namespace named by its
// UnitID.
func (e *Engine) keyOf(k kvcache.UnitKey) kvcache.UnitKey {
	if k.Shared {
		return k
	}
	return kvcache.UnitKey{Unit: k.Unit, Hash: uint64(k.Unit), Slice: k.Slice, Pool: k.Pool,
		Keys: radix.Keys{Namespace: e.private}}
}

// unitBytes returns the size of a unit of pool p.
func (e *Engine) unitBytes(p int) int {
	return len(e.cfg.Memory.Bytes(kvcache.GPU, p, 0))
}
