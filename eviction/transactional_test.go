package eviction

import (
	"testing"
	"time"

	"github.com/kvtier/kvtier/costmodel"
	"github.com/stretchr/testify/require"
)

// drain evicts every evictable key of p, in order.
func drain(p Policy[int]) []int {
	var out []int
	for {
		k, ok := p.Evict()
		if !ok {
			return out
		}
		out = append(out, k)
	}
}

// insertAll inserts keys with entry e, failing the test on an error.
func insertAll(t *testing.T, p Policy[int], e Entry, keys ...int) {
	t.Helper()
	for _, k := range keys {
		require.NoError(t, p.Insert(k, e))
	}
}

// TestRollbackRestoresTheVictimsPlace: what a failed operation did to an
// LRU (pin hits, evict victims) is taken back: the victims are the least
// recently used again, not the most, as an Insert would make them.
func TestRollbackRestoresTheVictimsPlace(t *testing.T) {
	p := NewLRU[int]()
	insertAll(t, p, NewEntry(1), 1, 2, 3, 4)
	p.Begin()
	p.Pin(3)
	v1, _ := p.Evict()
	v2, _ := p.Evict()
	require.Equal(t, []int{1, 2}, []int{v1, v2})
	require.NoError(t, p.Insert(9, NewEntry(1)))
	p.Rollback()
	require.Equal(t, 4, p.Len())
	require.Equal(t, []int{1, 2, 3, 4}, drain(p))
}

// TestRollbackKeepsAnExpiredPriorityExpired: a PrioritizedLRU victim whose
// priority had run out comes back with it run out (compensating with
// Insert gave it its priority and a new timer), and a running timer keeps
// its deadline.
func TestRollbackKeepsAnExpiredPriorityExpired(t *testing.T) {
	clock := &ManualClock{}
	p := NewPrioritizedLRU[int](clock)
	high := Entry{Size: 1, Priority: 90, PriorityDuration: time.Second}
	insertAll(t, p, high, 1)
	insertAll(t, p, Entry{Size: 1, Priority: 60}, 2)
	clock.Advance(2 * time.Second)                                                      // 1 expires back to the default, 35
	insertAll(t, p, Entry{Size: 1, Priority: 90, PriorityDuration: 3 * time.Second}, 3) // until 5 s
	clock.Advance(time.Second)
	p.Begin()
	v, ok := p.Evict()
	require.True(t, ok)
	require.Equal(t, 1, v, "1's priority expired: it goes first")
	p.Pin(3) // stops 3's timer; an Unpin would restart it from now
	p.Rollback()
	require.Equal(t, 1, drainOne(p), "1 is back, expired")
	clock.Advance(time.Second) // 4 s: 3 still holds priority 90
	require.Equal(t, 2, drainOne(p))
	clock.Advance(1500 * time.Millisecond) // 5.5 s: past 3's deadline, not past 6 s
	require.NoError(t, p.Insert(4, Entry{Size: 1, Priority: 50}))
	require.Equal(t, []int{3, 4}, drain(p), "3 expired on its original deadline")
}

func drainOne(p Policy[int]) int {
	k, _ := p.Evict()
	return k
}

// TestRollbackKeepsARetentionVictimsLastUse: a retention victim comes back
// with its last use, not "used now".
func TestRollbackKeepsARetentionVictimsLastUse(t *testing.T) {
	clock := &ManualClock{}
	p, err := NewRetention[int](clock, costmodel.Recompute{Beta: 1, LayerWeight: costmodel.Flat, PositionWeight: costmodel.Flat})
	require.NoError(t, err)
	insertAll(t, p, NewEntry(1), 1)
	clock.Advance(time.Second)
	insertAll(t, p, NewEntry(1), 2)
	clock.Advance(time.Second)
	p.Begin()
	v, _ := p.Evict()
	require.Equal(t, 1, v)
	p.Access(2)
	p.Rollback()
	clock.Advance(time.Second)
	require.Equal(t, []int{1, 2}, drain(p), "1 is still the older use")
}

// TestRollbackUndoesS3FIFOsEvict: an S3-FIFO Evict promotes hit keys from
// small to main, ages main's keys and adds a ghost entry; a rollback takes
// all of it back.
func TestRollbackUndoesS3FIFOsEvict(t *testing.T) {
	build := func() *S3FIFO[int] {
		p, err := NewS3FIFO[int](S3FIFOConfig{Capacity: 10})
		require.NoError(t, err)
		insertAll(t, p, NewEntry(1), 0, 1, 2, 3, 4, 5, 6, 7, 8, 9) // warm-up fills main too
		for _, k := range []int{0, 0, 5, 5, 9} {
			p.Access(k)
		}
		return p
	}
	a, b := build(), build()
	a.Begin()
	for range 3 {
		_, ok := a.Evict()
		require.True(t, ok)
	}
	require.NoError(t, a.Insert(42, NewEntry(1)))
	a.Rollback()
	require.Equal(t, b.Len(), a.Len())
	for _, k := range []int{100, 101, 102} {
		// New keys arrive, ghosts of the rolled-back evictions would send
		// them elsewhere if they had been kept.
		require.NoError(t, a.Insert(k, NewEntry(1)))
		require.NoError(t, b.Insert(k, NewEntry(1)))
	}
	require.Equal(t, drain(b), drain(a))
}

// TestRollbackOfAParkedFIFOKey: a FIFO parks a pinned key it meets at the
// front; a rolled-back Evict that parked one leaves it queued.
func TestRollbackOfAParkedFIFOKey(t *testing.T) {
	p := NewFIFO[int]()
	insertAll(t, p, NewEntry(1), 1, 2, 3)
	p.Pin(1)
	p.Begin()
	v, _ := p.Evict() // parks 1, evicts 2
	require.Equal(t, 2, v)
	p.Unpin(1)
	p.Rollback()
	p.Unpin(1)
	require.Equal(t, []int{1, 2, 3}, drain(p))
}

// TestCommitKeepsTheCalls: calls between Begin and Commit count as calls.
func TestCommitKeepsTheCalls(t *testing.T) {
	a, b := NewLRU[int](), NewLRU[int]()
	insertAll(t, a, NewEntry(1), 1, 2, 3)
	insertAll(t, b, NewEntry(1), 1, 2, 3)
	a.Begin()
	a.Access(1)
	a.Commit()
	a.Rollback() // not recording: nothing to undo
	b.Access(1)
	require.Equal(t, drain(b), drain(a))
}

// TestRecordingAllocatesNothing: once a transaction's journal has grown,
// recording the same transaction again allocates nothing.
func TestRecordingAllocatesNothing(t *testing.T) {
	clock := &ManualClock{}
	ret, err := NewRetention[int](clock, costmodel.Recompute{Beta: 1, LayerWeight: costmodel.Flat, PositionWeight: costmodel.Flat})
	require.NoError(t, err)
	s3, err := NewS3FIFO[int](S3FIFOConfig{Capacity: 64})
	require.NoError(t, err)
	for name, p := range map[string]interface {
		Policy[int]
		Transactional
	}{"lru": NewLRU[int](), "fifo": NewFIFO[int](), "plru": NewPrioritizedLRU[int](clock), "s3fifo": s3, "retention": ret} {
		for k := range 64 {
			require.NoError(t, p.Insert(k, Entry{Size: 1, Priority: 50, PriorityDuration: time.Hour}))
		}
		tx := func() {
			p.Begin()
			p.Pin(10)
			p.Access(20)
			k, _ := p.Evict()
			_ = p.Insert(k, Entry{Size: 1, Priority: 50, PriorityDuration: time.Hour})
			p.Unpin(10)
			p.Rollback()
		}
		tx()
		require.Zero(t, testing.AllocsPerRun(100, tx), name)
	}
}

// BenchmarkTransaction measures a typical transaction of a kvcache tier
// (pin two keys, evict two, insert two, unpin) with and without recording:
// what Begin..Commit costs beside the calls.
func BenchmarkTransaction(b *testing.B) {
	clock := &ManualClock{}
	for _, tc := range []struct {
		name string
		new  func() interface {
			Policy[int]
			Transactional
		}
	}{
		{"lru", func() interface {
			Policy[int]
			Transactional
		} {
			return NewLRU[int]()
		}},
		{"s3fifo", func() interface {
			Policy[int]
			Transactional
		} {
			p, _ := NewS3FIFO[int](S3FIFOConfig{Capacity: 1 << 16})
			return p
		}},
		{"retention", func() interface {
			Policy[int]
			Transactional
		} {
			p, _ := NewRetention[int](clock, costmodel.Recompute{Beta: 1})
			return p
		}},
	} {
		for _, record := range []bool{false, true} {
			name := tc.name + "/plain"
			if record {
				name = tc.name + "/recorded"
			}
			b.Run(name, func(b *testing.B) {
				p := tc.new()
				e := NewEntry(1)
				e.Unit = costmodel.Unit{Chunk: 1, Chunks: 4}
				for k := range 1 << 16 {
					_ = p.Insert(k, e)
				}
				next := 1 << 16
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if record {
						p.Begin()
					}
					p.Pin(i % (1 << 16))
					p.Pin((i + 7) % (1 << 16))
					v1, _ := p.Evict()
					v2, _ := p.Evict()
					_ = p.Insert(next, e)
					_ = p.Insert(next+1, e)
					next += 2
					p.Unpin(i % (1 << 16))
					p.Unpin((i + 7) % (1 << 16))
					if record {
						p.Commit()
					}
					_, _ = v1, v2
					i += 13
				}
			})
		}
	}
}
