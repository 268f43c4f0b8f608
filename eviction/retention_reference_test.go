package eviction

import (
	"fmt"
	"math"
	"math/big"
	"time"

	"github.com/kvtier/kvtier/costmodel"
)

// scanRetention is the reference for Retention: the same order, found by
// looking at every evictable key on each Evict. It keeps its keys in a
// dense slice (swap-remove), so the scan is as cheap as a scan gets and
// serves as the benchmark baseline too. Its comparison of products is
// pluggable: the tests use bigCompare, which shares no code with the
// policy's 128-bit arithmetic; the benchmarks use compareScaled, which is
// checked against bigCompare on its own.
type scanRetention[K comparable] struct {
	clock   Clock
	cost    costmodel.Recompute
	compare func(c1 float64, x1 int64, c2 float64, x2 int64) int
	epoch   time.Duration
	now     int64
	seq     uint64
	slot    map[K]int
	entries []scanEntry[K]
}

type scanEntry[K comparable] struct {
	key    K
	cost   float64
	t      int64
	seq    uint64
	pinned bool
}

var _ Policy[int] = (*scanRetention[int])(nil)

func newScanRetention[K comparable](clock Clock, cost costmodel.Recompute, compare func(float64, int64, float64, int64) int) *scanRetention[K] {
	return &scanRetention[K]{clock: clock, cost: cost, compare: compare, epoch: clock.Now(), slot: map[K]int{}}
}

// bigCompare compares c1*x1 with c2*x2 in math/big floats wide enough to
// hold both products exactly.
func bigCompare(c1 float64, x1 int64, c2 float64, x2 int64) int {
	const prec = 256 // 53-bit mantissa times 64-bit integer needs 117
	p := new(big.Float).SetPrec(prec).SetFloat64(c1)
	p.Mul(p, new(big.Float).SetPrec(prec).SetInt64(x1))
	q := new(big.Float).SetPrec(prec).SetFloat64(c2)
	q.Mul(q, new(big.Float).SetPrec(prec).SetInt64(x2))
	if p.Acc() != big.Exact || q.Acc() != big.Exact {
		panic("bigCompare: inexact product")
	}
	return p.Cmp(q)
}

// tick mirrors Retention's clock handling for the clocks the tests use
// (readings never below the epoch).
func (s *scanRetention[K]) tick() int64 {
	d := min(int64(s.clock.Now()-s.epoch), math.MaxInt64-1)
	s.now = max(s.now, d)
	return s.now
}

func (s *scanRetention[K]) stamp(e *scanEntry[K], now int64) {
	s.seq++
	e.t, e.seq = now, s.seq
}

func (s *scanRetention[K]) Insert(k K, e Entry) error {
	if err := e.Validate(); err != nil {
		return err
	}
	if _, ok := s.slot[k]; ok {
		return fmt.Errorf("%w: %v", ErrKeyExists, k)
	}
	c, err := s.cost.Cost(e.Unit)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidEntry, err)
	}
	now := s.tick()
	s.slot[k] = len(s.entries)
	s.entries = append(s.entries, scanEntry[K]{key: k, cost: c})
	s.stamp(&s.entries[len(s.entries)-1], now)
	return nil
}

func (s *scanRetention[K]) Access(k K) {
	if i, ok := s.slot[k]; ok {
		s.stamp(&s.entries[i], s.tick())
	}
}

func (s *scanRetention[K]) Pin(k K) {
	if i, ok := s.slot[k]; ok {
		s.entries[i].pinned = true
	}
}

func (s *scanRetention[K]) Unpin(k K) {
	if i, ok := s.slot[k]; ok && s.entries[i].pinned {
		s.entries[i].pinned = false
		s.stamp(&s.entries[i], s.tick())
	}
}

func (s *scanRetention[K]) Remove(k K) {
	i, ok := s.slot[k]
	if !ok {
		return
	}
	last := len(s.entries) - 1
	s.entries[i] = s.entries[last]
	s.slot[s.entries[i].key] = i
	s.entries = s.entries[:last]
	delete(s.slot, k)
}

// before reports whether a is the better victim than b at now, by the
// order documented on Retention, written out directly.
func (s *scanRetention[K]) before(a, b *scanEntry[K], now int64) bool {
	za, zb := a.cost == 0, b.cost == 0
	if za != zb {
		return za
	}
	if !za {
		// a.cost/(now-a.t) < b.cost/(now-b.t), cross-multiplied.
		if c := s.compare(a.cost, now-b.t, b.cost, now-a.t); c != 0 {
			return c < 0
		}
	}
	if a.t != b.t {
		return a.t < b.t
	}
	return a.seq < b.seq
}

// victim returns the index of the key Evict would return, or -1.
func (s *scanRetention[K]) victim(now int64) int {
	best := -1
	for i := range s.entries {
		e := &s.entries[i]
		if e.pinned {
			continue
		}
		if best < 0 || s.before(e, &s.entries[best], now) {
			best = i
		}
	}
	return best
}

func (s *scanRetention[K]) Evict() (K, bool) {
	i := s.victim(s.tick())
	if i < 0 {
		var zero K
		return zero, false
	}
	k := s.entries[i].key
	s.Remove(k)
	return k, true
}

func (s *scanRetention[K]) Len() int { return len(s.entries) }
