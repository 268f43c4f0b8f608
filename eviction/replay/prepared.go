package replay

import (
	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/eviction/trace"
)

// Prepared is a trace held in memory with its object ids renumbered 0, 1,
// 2, ... in order of first request, so that a replay indexes cached objects
// in a slice instead of a hash map, and so can the policy (see
// [Prepared.NewIndex]). Prepare a trace once to replay it many times
// (several policies, several cache sizes) at full speed. A Prepared
// never changes after [Prepare] returns it and may be replayed by several
// goroutines at once, each with its own policy.
type Prepared struct {
	reqs []trace.Request // ids replaced by dense ids
	ids  []uint64        // dense id -> trace id
}

// Prepare renumbers the objects of reqs and returns the result. reqs is
// copied, not changed.
func Prepare(reqs []trace.Request) *Prepared {
	dense := make(map[uint64]uint64)
	p := &Prepared{reqs: make([]trace.Request, len(reqs))}
	for i, q := range reqs {
		d, ok := dense[q.ID]
		if !ok {
			d = uint64(len(p.ids))
			dense[q.ID] = d
			p.ids = append(p.ids, q.ID)
		}
		q.ID = d
		p.reqs[i] = q
	}
	return p
}

// Len returns the number of requests.
func (t *Prepared) Len() int { return len(t.reqs) }

// Objects returns the number of distinct objects.
func (t *Prepared) Objects() int { return len(t.ids) }

// TraceID returns the trace's id of dense id d and true, or false when d
// is not below Objects().
func (t *Prepared) TraceID(d uint64) (uint64, bool) {
	if d >= uint64(len(t.ids)) {
		return 0, false
	}
	return t.ids[d], true
}

// NewIndex returns a new key index for a policy that will replay t: an
// [eviction.DenseIndex] over t's dense ids (0 to Objects()-1), so that the
// policy finds a key with a slice access instead of a hash-map operation
// (about twice the replay throughput for LRU, see BENCHMARKS.md). Give it
// to one policy constructor, such as eviction.NewLRUWithIndex, and replay
// that policy with t.Run (or with another Prepared of as many objects at
// most: a larger id fails the replay with an error wrapping [ErrPolicy] and
// eviction.ErrKeyOutOfRange). Each call returns a new index; an index
// belongs to one policy.
//
// When t has more objects than a DenseIndex holds (more than
// eviction.MaxDenseKey+1), NewIndex returns nil, which the constructors
// take as their default Go map.
func (t *Prepared) NewIndex() eviction.Index[uint64] {
	maxKey := uint64(max(len(t.ids), 1) - 1)
	if maxKey > eviction.MaxDenseKey {
		return nil
	}
	idx, err := eviction.NewDenseIndex(maxKey)
	if err != nil { // not reached: maxKey is in range
		return nil
	}
	return idx
}

// Run replays the trace through p like [RunRequests], with one difference:
// the keys p sees are the dense ids, not the trace's ids (translate them
// with TraceID). A policy whose choices do not depend on the values of its
// keys, as every policy of package eviction, makes the same choices and
// gives the same Result; the package tests check this for LRU, FIFO and
// S3-FIFO. Errors are those of [Run], naming trace ids.
func (t *Prepared) Run(p eviction.Policy[uint64], cfg Config) (Result, error) {
	c, err := newCache(p, cfg, objectIndex{dense: make([]int64, len(t.ids))}, t.ids)
	if err != nil {
		return Result{}, err
	}
	return c.run(t.reqs)
}
