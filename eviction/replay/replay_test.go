package replay_test

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/eviction/replay"
	"github.com/kvtier/kvtier/eviction/trace"
)

func reqs(spec string) []trace.Request {
	// "id:size id:size ..." with time = position.
	var out []trace.Request
	for i, f := range strings.Fields(spec) {
		var id uint64
		var size int64
		if _, err := fmt.Sscanf(f, "%d:%d", &id, &size); err != nil {
			panic(err)
		}
		out = append(out, trace.Request{Time: int64(i), ID: id, Size: size, NextAccess: -1})
	}
	return out
}

func TestReplayCounts(t *testing.T) {
	// LRU over 10 bytes: 1(4) 2(4) miss, 1 hit, 3(4) evicts 2, 2 misses
	// and evicts 1, 3 hits.
	res, err := replay.RunRequests(eviction.NewLRU[uint64](), reqs("1:4 2:4 1:4 3:4 2:4 3:4"), replay.Config{Capacity: 10})
	require.NoError(t, err)
	require.Equal(t, replay.Result{
		Requests: 6, Misses: 4, RequestBytes: 24, MissBytes: 16, Evictions: 2, Elapsed: res.Elapsed,
	}, res)
	require.InDelta(t, 4.0/6, res.MissRatio(), 1e-12)
	require.InDelta(t, 16.0/24, res.ByteMissRatio(), 1e-12)
}

func TestReplayLargerThanCache(t *testing.T) {
	// An object larger than the cache is a miss, is not cached and evicts
	// nothing (libCacheSim's can_insert refuses it before any eviction).
	res, err := replay.RunRequests(eviction.NewLRU[uint64](), reqs("1:4 2:11 1:4 2:11"), replay.Config{Capacity: 10})
	require.NoError(t, err)
	require.Equal(t, int64(3), res.Misses)
	require.Equal(t, int64(2), res.Uncached)
	require.Equal(t, int64(0), res.Evictions)
	require.Equal(t, int64(26), res.MissBytes)
}

// TestReplayHugeCapacity: with a capacity near math.MaxInt64 the bytes in
// use plus a new object's size exceed int64; the replay must still evict
// to make room instead of letting the sum wrap and overfill the cache.
func TestReplayHugeCapacity(t *testing.T) {
	const capacity = math.MaxInt64
	tr := []trace.Request{
		{ID: 1, Size: capacity - 10, NextAccess: -1},
		{ID: 2, Size: 100, NextAccess: -1}, // evicts 1
		{ID: 1, Size: capacity - 10, NextAccess: -1},
	}
	res, err := replay.RunRequests(eviction.NewLRU[uint64](), tr, replay.Config{Capacity: capacity})
	require.NoError(t, err)
	require.Equal(t, int64(3), res.Misses)
	require.Equal(t, int64(2), res.Evictions)
}

func TestReplayHitKeepsCachedSize(t *testing.T) {
	// Object 1 is cached with size 2; a hit asking for size 9 does not
	// change that (libCacheSim does not update sizes on hits), so 2(8) fits
	// beside it without an eviction, and 1 still hits.
	res, err := replay.RunRequests(eviction.NewLRU[uint64](), reqs("1:2 1:9 2:8 1:9"), replay.Config{Capacity: 10})
	require.NoError(t, err)
	require.Equal(t, int64(2), res.Misses)
	require.Equal(t, int64(0), res.Evictions)
	require.Equal(t, int64(28), res.RequestBytes, "requested bytes are the requests' sizes")
}

func TestReplayZeroAndNegativeSizes(t *testing.T) {
	res, err := replay.RunRequests(eviction.NewLRU[uint64](), reqs("1:0 1:3 2:0 1:3"), replay.Config{Capacity: 10})
	require.NoError(t, err)
	require.Equal(t, int64(2), res.Requests)
	require.Equal(t, int64(2), res.SkippedZeroSize)
	require.Equal(t, int64(1), res.Misses)

	res, err = replay.RunRequests(eviction.NewLRU[uint64](), reqs("1:3 7:-1 1:3"), replay.Config{Capacity: 10})
	require.ErrorIs(t, err, replay.ErrInvalidRequest)
	require.Contains(t, err.Error(), "request 1")
	require.Contains(t, err.Error(), "object 7")
	require.Equal(t, int64(1), res.Requests, "counts up to the bad request")
}

func TestReplayIgnoreObjectSize(t *testing.T) {
	// Two objects fit whatever their sizes.
	res, err := replay.RunRequests(eviction.NewLRU[uint64](), reqs("1:500 2:700 1:500 3:9 1:1 2:1"), replay.Config{Capacity: 2, IgnoreObjectSize: true})
	require.NoError(t, err)
	require.Equal(t, replay.Result{Requests: 6, Misses: 4, RequestBytes: 6, MissBytes: 4, Evictions: 2, Elapsed: res.Elapsed}, res)
}

// recordingPolicy wraps a policy and records the clock at each Insert.
type recordingPolicy struct {
	eviction.Policy[uint64]
	clock eviction.Clock
	times []time.Duration
}

func (r *recordingPolicy) Insert(k uint64, e eviction.Entry) error {
	r.times = append(r.times, r.clock.Now())
	return r.Policy.Insert(k, e)
}

func TestReplayClock(t *testing.T) {
	tr := []trace.Request{
		{Time: 5, ID: 1, Size: 1}, {Time: 5, ID: 2, Size: 0}, {Time: 7, ID: 3, Size: 1},
		{Time: 6, ID: 4, Size: 1}, {Time: 9, ID: 5, Size: 1},
	}
	clk := new(eviction.ManualClock)
	p := &recordingPolicy{Policy: eviction.NewLRU[uint64](), clock: clk}
	_, err := replay.RunRequests(p, tr, replay.Config{Capacity: 100, Clock: clk})
	require.NoError(t, err)
	require.Equal(t, []time.Duration{1 * time.Microsecond, 2 * time.Microsecond, 3 * time.Microsecond, 4 * time.Microsecond},
		p.times, "virtual time: one tick per counted request")

	clk = new(eviction.ManualClock)
	p = &recordingPolicy{Policy: eviction.NewLRU[uint64](), clock: clk}
	_, err = replay.RunRequests(p, tr, replay.Config{Capacity: 100, Clock: clk, Time: replay.TraceTime, TimeUnit: time.Millisecond})
	require.NoError(t, err)
	require.Equal(t, []time.Duration{5 * time.Millisecond, 7 * time.Millisecond, 7 * time.Millisecond, 9 * time.Millisecond},
		p.times, "trace time, never backwards")

	clk = new(eviction.ManualClock)
	p = &recordingPolicy{Policy: eviction.NewLRU[uint64](), clock: clk}
	_, err = replay.RunRequests(p, []trace.Request{{Time: 1 << 62, ID: 1, Size: 1}}, replay.Config{Capacity: 1, Clock: clk, Time: replay.TraceTime})
	require.NoError(t, err)
	require.Positive(t, p.times[0], "a huge timestamp saturates instead of overflowing")
}

func TestReplayConfigInvalid(t *testing.T) {
	for _, cfg := range []replay.Config{
		{Capacity: 0},
		{Capacity: 10, Tick: -1},
		{Capacity: 10, TimeUnit: -1},
		{Capacity: 10, Time: replay.TimeSource(7)},
	} {
		_, err := replay.RunRequests(eviction.NewLRU[uint64](), nil, cfg)
		require.ErrorIs(t, err, replay.ErrInvalidConfig, "%+v", cfg)
		_, err = replay.Prepare(nil).Run(eviction.NewLRU[uint64](), cfg)
		require.ErrorIs(t, err, replay.ErrInvalidConfig, "%+v", cfg)
	}
	_, err := replay.Run(nil, trace.NewSliceReader(nil), replay.Config{Capacity: 1})
	require.ErrorIs(t, err, replay.ErrInvalidConfig)
	require.Equal(t, "virtual", replay.VirtualTime.String())
	require.Equal(t, "trace", replay.TraceTime.String())
	require.Equal(t, "TimeSource(7)", replay.TimeSource(7).String())
}

// Misbehaving policies.
type noVictims struct{ eviction.Policy[uint64] }

func (noVictims) Evict() (uint64, bool) { return 0, false }

type strangeVictims struct{ eviction.Policy[uint64] }

func (strangeVictims) Evict() (uint64, bool) { return 424242, true }

type failingInsert struct{ eviction.Policy[uint64] }

func (failingInsert) Insert(uint64, eviction.Entry) error { return eviction.ErrKeyExists }

func TestReplayCatchesPolicyBugs(t *testing.T) {
	tr := reqs("1:6 2:6")
	for name, p := range map[string]eviction.Policy[uint64]{
		"no victim":      noVictims{eviction.NewLRU[uint64]()},
		"unknown victim": strangeVictims{eviction.NewLRU[uint64]()},
		"insert fails":   failingInsert{eviction.NewLRU[uint64]()},
	} {
		_, err := replay.RunRequests(p, tr, replay.Config{Capacity: 10})
		require.ErrorIs(t, err, replay.ErrPolicy, name)
	}
	_, err := replay.RunRequests(strangeVictims{eviction.NewLRU[uint64]()}, tr, replay.Config{Capacity: 10})
	require.Contains(t, err.Error(), "object 424242")
}

type brokenReader struct{ n int }

func (b *brokenReader) Next(q *trace.Request) error {
	if b.n == 2 {
		return fmt.Errorf("%w: line 3: garbage", trace.ErrMalformed)
	}
	b.n++
	*q = trace.Request{ID: uint64(b.n), Size: 1}
	return nil
}

func TestReplayReaderError(t *testing.T) {
	res, err := replay.Run(eviction.NewLRU[uint64](), &brokenReader{}, replay.Config{Capacity: 10})
	require.ErrorIs(t, err, trace.ErrMalformed)
	require.Contains(t, err.Error(), "request 2")
	require.Equal(t, int64(2), res.Requests)
}

// refLRUCache is the reference for the differential test: an LRU cache of
// byte capacity written as plainly as possible (a slice, most recent last).
type refLRUCache struct {
	capacity int64
	items    []trace.Request
}

func (r *refLRUCache) get(q trace.Request) bool {
	for i, it := range r.items {
		if it.ID == q.ID {
			r.items = append(append(r.items[:i:i], r.items[i+1:]...), it)
			return true
		}
	}
	if q.Size > r.capacity {
		return false
	}
	used := int64(0)
	for _, it := range r.items {
		used += it.Size
	}
	for used+q.Size > r.capacity {
		used -= r.items[0].Size
		r.items = r.items[1:]
	}
	r.items = append(r.items, q)
	return false
}

// TestReplayMatchesReferenceLRU replays random traces with every path (hits
// with other sizes, objects too large, zero sizes) through LRU with Run,
// RunRequests and Prepared.Run (with the map and with Prepared.NewIndex),
// and checks the misses and missed bytes against the plain reference.
func TestReplayMatchesReferenceLRU(t *testing.T) {
	for seed := range uint64(10) {
		rng := rand.New(rand.NewPCG(seed, 1))
		zipf := rand.NewZipf(rng, 1.2, 2, 300)
		tr := make([]trace.Request, 4000)
		for i := range tr {
			tr[i] = trace.Request{Time: int64(i), ID: zipf.Uint64() * 7919, Size: rng.Int64N(40), NextAccess: -1}
		}
		const capacity = 200
		ref := &refLRUCache{capacity: capacity}
		var want replay.Result
		for _, q := range tr {
			if q.Size == 0 {
				want.SkippedZeroSize++
				continue
			}
			want.Requests++
			want.RequestBytes += q.Size
			if !ref.get(q) {
				want.Misses++
				want.MissBytes += q.Size
			}
		}
		cfg := replay.Config{Capacity: capacity}
		got1, err := replay.Run(eviction.NewLRU[uint64](), &sliceOnlyReader{tr: tr}, cfg)
		require.NoError(t, err)
		got2, err := replay.RunRequests(eviction.NewLRU[uint64](), tr, cfg)
		require.NoError(t, err)
		prepared := replay.Prepare(tr)
		got3, err := prepared.Run(eviction.NewLRU[uint64](), cfg)
		require.NoError(t, err)
		dense, err := eviction.NewLRUWithIndex(prepared.NewIndex())
		require.NoError(t, err)
		got4, err := prepared.Run(dense, cfg)
		require.NoError(t, err)
		for i, got := range []replay.Result{got1, got2, got3, got4} {
			require.Equal(t, want.Requests, got.Requests, "seed %d run %d", seed, i)
			require.Equal(t, want.Misses, got.Misses, "seed %d run %d", seed, i)
			require.Equal(t, want.MissBytes, got.MissBytes, "seed %d run %d", seed, i)
			require.Equal(t, want.RequestBytes, got.RequestBytes, "seed %d run %d", seed, i)
			require.Equal(t, want.SkippedZeroSize, got.SkippedZeroSize, "seed %d run %d", seed, i)
			got.Elapsed = got1.Elapsed
			require.Equal(t, got1, got, "seed %d run %d: all runners agree", seed, i)
		}
	}
}

// sliceOnlyReader hides a slice behind the Reader interface, so that Run
// takes its streaming path.
type sliceOnlyReader struct {
	tr []trace.Request
	i  int
}

func (s *sliceOnlyReader) Next(q *trace.Request) error {
	if s.i == len(s.tr) {
		return errEOF
	}
	*q = s.tr[s.i]
	s.i++
	return nil
}

// errEOF is a wrapped io.EOF: Run must treat it as the end of the trace.
var errEOF = fmt.Errorf("end of slice: %w", io.EOF)

// TestPreparedNewIndex checks that policies built with Prepared.NewIndex
// give the Result of the same policies with their map, for every policy
// that takes an index (PrioritizedLRU reading a clock that follows the
// trace), and that each call returns an index of its own.
func TestPreparedNewIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	zipf := rand.NewZipf(rng, 1.1, 2, 2000)
	tr := make([]trace.Request, 20000)
	for i := range tr {
		tr[i] = trace.Request{Time: int64(i), ID: zipf.Uint64()*104729 + 5, Size: 1 + rng.Int64N(64), NextAccess: -1}
	}
	prepared := replay.Prepare(tr)
	build := map[string]func(idx eviction.Index[uint64], clock eviction.Clock) (eviction.Policy[uint64], error){
		"LRU": func(idx eviction.Index[uint64], _ eviction.Clock) (eviction.Policy[uint64], error) {
			return eviction.NewLRUWithIndex(idx)
		},
		"FIFO": func(idx eviction.Index[uint64], _ eviction.Clock) (eviction.Policy[uint64], error) {
			return eviction.NewFIFOWithIndex(idx)
		},
		"PrioritizedLRU": func(idx eviction.Index[uint64], c eviction.Clock) (eviction.Policy[uint64], error) {
			return eviction.NewPrioritizedLRUWithIndex(c, idx)
		},
		"S3FIFO": func(idx eviction.Index[uint64], _ eviction.Clock) (eviction.Policy[uint64], error) {
			return eviction.NewS3FIFOWithIndex(eviction.S3FIFOConfig{Capacity: 3000}, idx)
		},
	}
	for name, b := range build {
		var results [2]replay.Result
		for j, idx := range []eviction.Index[uint64]{nil, prepared.NewIndex()} {
			clock := new(eviction.ManualClock)
			p, err := b(idx, clock)
			require.NoError(t, err, name)
			res, err := prepared.Run(p, replay.Config{Capacity: 3000, Clock: clock})
			require.NoError(t, err, name)
			res.Elapsed = 0
			results[j] = res
		}
		require.Greater(t, results[0].Evictions, int64(1000), name)
		require.Equal(t, results[0], results[1], "%s: map vs dense index", name)
	}

	// Two calls, two indexes: both can be given to a policy.
	a, b := prepared.NewIndex(), prepared.NewIndex()
	_, err := eviction.NewLRUWithIndex(a)
	require.NoError(t, err)
	_, err = eviction.NewLRUWithIndex(b)
	require.NoError(t, err)
	_, err = eviction.NewLRUWithIndex(a)
	require.ErrorIs(t, err, eviction.ErrInvalidConfig, "an index belongs to one policy")
}

// TestPreparedNewIndexTooSmall replays a trace through a policy whose dense
// index came from a trace with fewer objects: the replay fails with
// ErrPolicy wrapping ErrKeyOutOfRange, naming the trace's id.
func TestPreparedNewIndexTooSmall(t *testing.T) {
	small := replay.Prepare(reqs("10:1 11:1"))
	large := replay.Prepare(reqs("20:1 21:1 22:1"))
	p, err := eviction.NewLRUWithIndex(small.NewIndex())
	require.NoError(t, err)
	res, err := large.Run(p, replay.Config{Capacity: 10})
	require.ErrorIs(t, err, replay.ErrPolicy)
	require.ErrorIs(t, err, eviction.ErrKeyOutOfRange)
	require.Contains(t, err.Error(), "object 22")
	require.Equal(t, int64(3), res.Requests)

	empty := replay.Prepare(nil)
	require.Zero(t, empty.Objects())
	q, err := eviction.NewFIFOWithIndex(empty.NewIndex())
	require.NoError(t, err)
	res, err = empty.Run(q, replay.Config{Capacity: 1})
	require.NoError(t, err)
	require.Zero(t, res.Requests)
}

// TestPreparedTraceID: dense ids number objects in order of first request
// and translate back to the trace's ids; an id of no object is reported as
// such instead of panicking.
func TestPreparedTraceID(t *testing.T) {
	p := replay.Prepare([]trace.Request{{ID: 42, Size: 1}, {ID: 7, Size: 1}, {ID: 42, Size: 1}})
	require.Equal(t, 3, p.Len())
	require.Equal(t, 2, p.Objects())
	for d, want := range []uint64{42, 7} {
		id, ok := p.TraceID(uint64(d))
		require.True(t, ok)
		require.Equal(t, want, id)
	}
	for _, d := range []uint64{2, 1 << 40, math.MaxUint64} {
		_, ok := p.TraceID(d)
		require.False(t, ok, "dense id %d", d)
	}
}
