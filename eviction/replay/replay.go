package replay

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/eviction/trace"
)

// Admitter is implemented by policies that, in a classic cache, refuse
// some missed objects, as libCacheSim's per-policy can_insert and insert
// do (eviction.S3FIFO refuses objects as large as its small queue). The
// replay calls Admit once per miss, whatever the object's size, before it
// makes room: if makeRoom, it evicts until the object fits; then, if insert,
// it inserts the object. Without an Admitter both answers are size <=
// Capacity; with one, they are further limited to that.
type Admitter interface {
	Admit(key uint64, size int64) (makeRoom, insert bool)
}

// Run replays the requests of r through p as a cache of cfg.Capacity and
// returns the counts. p must be empty and is left holding the objects
// cached at the end. If r is a *trace.SliceReader, Run ranges over its
// remaining requests directly (see [RunRequests]).
//
// Run returns an error wrapping [ErrInvalidConfig] for a bad cfg or a nil
// p, [ErrInvalidRequest] for a request of negative size, [ErrPolicy] when p
// breaks its contract, or the reader's error (anything but io.EOF), each
// naming the 0-based index of the request in the trace; the Result then
// holds the counts up to that request.
func Run(p eviction.Policy[uint64], r trace.Reader, cfg Config) (Result, error) {
	if s, ok := r.(*trace.SliceReader); ok {
		return RunRequests(p, s.Rest(), cfg)
	}
	c, err := newCache(p, cfg, objectIndex{byID: make(map[uint64]int64)}, nil)
	if err != nil {
		return Result{}, err
	}
	start := time.Now()
	var q trace.Request
	for i := int64(0); ; i++ {
		err := r.Next(&q)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				err = fmt.Errorf("replay: reading request %d: %w", i, err)
			} else {
				err = nil
			}
			c.res.Elapsed = time.Since(start)
			return c.res, err
		}
		if err := c.request(&q); err != nil {
			c.res.Elapsed = time.Since(start)
			return c.res, fmt.Errorf("%w (request %d)", err, i)
		}
	}
}

// RunRequests is [Run] over requests held in memory.
func RunRequests(p eviction.Policy[uint64], reqs []trace.Request, cfg Config) (Result, error) {
	c, err := newCache(p, cfg, objectIndex{byID: make(map[uint64]int64)}, nil)
	if err != nil {
		return Result{}, err
	}
	return c.run(reqs)
}

// run replays reqs, timing the loop.
func (c *cache) run(reqs []trace.Request) (Result, error) {
	start := time.Now()
	for i := range reqs {
		if err := c.request(&reqs[i]); err != nil {
			c.res.Elapsed = time.Since(start)
			return c.res, fmt.Errorf("%w (request %d)", err, i)
		}
	}
	c.res.Elapsed = time.Since(start)
	return c.res, nil
}

// objectIndex is the replay's record of which objects are cached and with
// which size: by trace id in a map, or, for a Prepared trace, by dense id
// in a slice. Sizes are at least 1, so 0 never stands for a cached object.
// It is one type with a branch rather than a type parameter of cache with
// two implementations: Go compiles a generic type once per GC shape and
// calls its type parameter's methods through a dictionary, so they would
// not be inlined into the replay loop.
type objectIndex struct {
	dense []int64          // by dense id; nil when indexing trace ids
	byID  map[uint64]int64 // by trace id; nil when indexing dense ids
}

func (x *objectIndex) size(id uint64) (int64, bool) {
	if x.byID == nil {
		if id >= uint64(len(x.dense)) {
			return 0, false
		}
		s := x.dense[id]
		return s, s != 0
	}
	s, ok := x.byID[id]
	return s, ok
}

func (x *objectIndex) set(id uint64, size int64) {
	if x.byID == nil {
		x.dense[id] = size
		return
	}
	x.byID[id] = size
}

func (x *objectIndex) drop(id uint64) {
	if x.byID == nil {
		x.dense[id] = 0
		return
	}
	delete(x.byID, id)
}

// cache is the state of one replay.
type cache struct {
	p        eviction.Policy[uint64]
	admitter Admitter
	cfg      Config
	cached   objectIndex
	objects  int   // objects cached
	occupied int64 // sum of their sizes
	res      Result
	maxTime  int64    // largest trace time that TimeUnit can scale
	ids      []uint64 // dense id -> trace id, for error messages; nil for trace ids
}

func newCache(p eviction.Policy[uint64], cfg Config, idx objectIndex, ids []uint64) (*cache, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if p == nil {
		return nil, fmt.Errorf("%w: nil policy", ErrInvalidConfig)
	}
	c := &cache{p: p, cfg: cfg, cached: idx, ids: ids, maxTime: int64(^uint64(0) >> 1)}
	c.admitter, _ = p.(Admitter)
	if cfg.TimeUnit > 0 {
		c.maxTime /= int64(cfg.TimeUnit)
	}
	return c, nil
}

// request replays one request. It is the inner loop: it allocates nothing
// once the index and the policy have grown to the working set.
func (c *cache) request(q *trace.Request) error {
	size := q.Size
	switch {
	case size < 0:
		return fmt.Errorf("%w: object %d has size %d", ErrInvalidRequest, c.traceID(q.ID), size)
	case size == 0:
		c.res.SkippedZeroSize++
		return nil
	case c.cfg.IgnoreObjectSize:
		size = 1
	}
	if c.cfg.Clock != nil {
		c.tick(q)
	}
	c.res.Requests++
	c.res.RequestBytes += size
	if _, hit := c.cached.size(q.ID); hit {
		c.p.Access(q.ID)
		return nil
	}
	c.res.Misses++
	c.res.MissBytes += size

	makeRoom := size <= c.cfg.Capacity
	insert := makeRoom
	if c.admitter != nil {
		m, i := c.admitter.Admit(q.ID, size)
		makeRoom = makeRoom && m
		insert = makeRoom && i
	}
	if makeRoom {
		// Capacity-occupied cannot overflow (occupied <= Capacity), where
		// occupied+size can near math.MaxInt64.
		for size > c.cfg.Capacity-c.occupied {
			if err := c.evictOne(); err != nil {
				return err
			}
		}
	}
	if !insert {
		c.res.Uncached++
		return nil
	}
	if err := c.p.Insert(q.ID, eviction.NewEntry(size)); err != nil {
		return fmt.Errorf("%w: Insert of absent object %d: %w", ErrPolicy, c.traceID(q.ID), err)
	}
	c.cached.set(q.ID, size)
	c.objects++
	c.occupied += size
	return nil
}

func (c *cache) evictOne() error {
	k, ok := c.p.Evict()
	if !ok {
		return fmt.Errorf("%w: Evict found no victim with %d objects (%d units) cached", ErrPolicy, c.objects, c.occupied)
	}
	size, cached := c.cached.size(k)
	if !cached {
		return fmt.Errorf("%w: Evict returned object %d, which is not cached", ErrPolicy, c.traceID(k))
	}
	c.cached.drop(k)
	c.objects--
	c.occupied -= size
	c.res.Evictions++
	return nil
}

// tick moves the clock to the time of the request about to be counted.
func (c *cache) tick(q *trace.Request) {
	if c.cfg.Time == VirtualTime {
		c.cfg.Clock.Advance(c.cfg.Tick)
		return
	}
	t := min(max(q.Time, 0), c.maxTime)
	c.cfg.Clock.Set(time.Duration(t) * c.cfg.TimeUnit)
}

// traceID translates a key the policy saw back to the trace's id.
func (c *cache) traceID(k uint64) uint64 {
	if c.ids != nil && k < uint64(len(c.ids)) {
		return c.ids[k]
	}
	return k
}
