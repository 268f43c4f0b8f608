package evictiontest

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvtier/kvtier/eviction"
)

// clone returns a copy of m that the caller may change freely.
func (m *model) clone() *model {
	return &model{keys: maps.Clone(m.keys), list: slices.Clone(m.list), slot: maps.Clone(m.slot),
		size: m.size, evictable: m.evictable}
}

// txTwins drives two policies of one factory: the same calls to both, except
// for bursts of calls made to the first alone inside Begin and Rollback.
// After every call both must agree (Len, victims): a rollback that is not
// exact shows as a victim the second policy does not choose.
type txTwins struct {
	t       *testing.T
	a, b    eviction.Policy[int]
	ta, tb  eviction.Transactional
	ca, cb  *eviction.ManualClock
	rng     *rand.Rand
	prof    profile
	name    string
	log     []string
	invalid []invalidEntry
	// gone holds the keys that left lately (evicted or removed), which
	// Inserts often pick again: a key that comes back meets what its
	// departure left behind, such as an S3-FIFO ghost entry.
	gone []int
}

// goneKeys is how many of the keys that left last txTwins remembers.
const goneKeys = 32

func (w *txTwins) fail(format string, args ...any) {
	w.t.Helper()
	start := max(0, len(w.log)-32)
	w.t.Fatalf("%s: %s\nlast calls (oldest first; * = first policy only):\n\t%s", w.name, fmt.Sprintf(format, args...),
		strings.Join(w.log[start:], "\n\t"))
}

func (w *txTwins) logf(format string, args ...any) {
	w.log = append(w.log, fmt.Sprintf(format, args...))
}

// left records that k is no longer tracked.
func (w *txTwins) left(k int) {
	w.gone = append(w.gone, k)
	if len(w.gone) > goneKeys {
		w.gone = w.gone[1:]
	}
}

// call makes one random call to both policies (else to the first alone)
// and updates m, which must describe the tracked keys of the policies
// called.
func (w *txTwins) call(m *model, both bool) {
	w.t.Helper()
	mark := " "
	if !both {
		mark = "*"
	}
	total := 0
	for _, x := range w.prof.weights {
		total += x
	}
	r := w.rng.IntN(total)
	kind := opKind(0)
	for ; r >= w.prof.weights[kind]; kind++ {
		r -= w.prof.weights[kind]
	}
	switch kind {
	case opInsert:
		w.insert(m, both, mark)
	case opEvict:
		w.evict(m, both, mark)
	case opAdvance:
		// Time passes for both, whether or not they hear of calls.
		d := time.Duration(w.rng.IntN(2000)) * time.Millisecond
		w.logf("%sclock.Advance(%v)", mark, d)
		w.ca.Advance(d)
		w.cb.Advance(d)
	default:
		if len(m.list) == 0 {
			return
		}
		k := m.list[w.rng.IntN(len(m.list))]
		w.logf("%s%v(%d)", mark, kind, k)
		for _, p := range w.targets(both) {
			switch kind {
			case opAccess:
				p.Access(k)
			case opPin:
				p.Pin(k)
			case opUnpin:
				p.Unpin(k)
			case opRemove:
				p.Remove(k)
			}
		}
		switch kind {
		case opPin:
			m.setPinned(k, true)
		case opUnpin:
			m.setPinned(k, false)
		case opRemove:
			m.drop(k)
			w.left(k)
		}
	}
	if both && w.a.Len() != w.b.Len() {
		w.fail("Len %d and %d", w.a.Len(), w.b.Len())
	}
	if w.a.Len() != len(m.keys) {
		w.fail("Len %d, %d keys tracked", w.a.Len(), len(m.keys))
	}
}

// insert inserts a key that left lately, a new one, or now and then a
// tracked key or an invalid entry (which must fail and change nothing).
func (w *txTwins) insert(m *model, both bool, mark string) {
	w.t.Helper()
	e := randomTxEntry(w.rng)
	var k int
	var wantErr error
	switch r := w.rng.IntN(16); {
	case r == 0 && len(m.list) > 0:
		k, wantErr = m.list[w.rng.IntN(len(m.list))], eviction.ErrKeyExists
	case r == 1:
		e, wantErr = w.invalid[w.rng.IntN(len(w.invalid))].entry, eviction.ErrInvalidEntry
		k = w.rng.IntN(MaxKey + 1)
	case r < 7 && len(w.gone) > 0:
		k = w.gone[w.rng.IntN(len(w.gone))]
	default:
		k = w.rng.IntN(MaxKey + 1)
	}
	_, tracked := m.keys[k]
	if tracked && wantErr == nil {
		return
	}
	if wantErr == nil {
		for m.size+e.Size > suiteCapacity && m.evictable > 0 {
			w.evict(m, both, mark)
		}
		if m.size+e.Size > suiteCapacity {
			return
		}
	}
	w.logf("%sInsert(%d, size %d, priority %d, for %v)", mark, k, e.Size, e.Priority, e.PriorityDuration)
	for _, p := range w.targets(both) {
		err := p.Insert(k, e)
		switch {
		case wantErr == nil && err != nil:
			w.fail("Insert(%d) of an untracked key with a valid entry: %v", k, err)
		case wantErr != nil && !errors.Is(err, wantErr) && !(tracked && errors.Is(err, eviction.ErrKeyExists)):
			w.fail("Insert(%d) returned %v, want an error wrapping %v", k, err, wantErr)
		}
	}
	if wantErr == nil {
		m.add(k, e.Size)
	}
}

// randomTxEntry returns a valid entry: size 1 to 4, any priority, a
// priority duration of 1 to 5 seconds a third of the time, and one of 8
// chunks of a sequence (so 8 recompute costs).
func randomTxEntry(rng *rand.Rand) eviction.Entry {
	e := eviction.NewEntry(int64(1 + rng.IntN(4)))
	e.Priority = rng.IntN(eviction.MaxPriority + 1)
	if rng.IntN(3) == 0 {
		e.PriorityDuration = time.Duration(1+rng.IntN(5)) * time.Second
	}
	e.Unit.Chunk, e.Unit.Chunks = rng.IntN(8), 8
	e.Unit.ContextTokens = int64(16 * e.Unit.Chunk)
	return e
}

func (w *txTwins) targets(both bool) []eviction.Policy[int] {
	if both {
		return []eviction.Policy[int]{w.a, w.b}
	}
	return []eviction.Policy[int]{w.a}
}

// evict evicts from the policies and checks that they agree.
func (w *txTwins) evict(m *model, both bool, mark string) {
	w.t.Helper()
	ka, oka := w.a.Evict()
	w.logf("%sEvict() = %d, %t", mark, ka, oka)
	if both {
		kb, okb := w.b.Evict()
		if ka != kb || oka != okb {
			w.fail("Evict: %d, %t from the policy that rolled back, %d, %t from its twin", ka, oka, kb, okb)
		}
	}
	if oka != (m.evictable > 0) {
		w.fail("Evict = %t with %d evictable keys", oka, m.evictable)
	}
	if oka {
		if mk, ok := m.keys[ka]; !ok || mk.pinned {
			w.fail("Evict returned %d, not a tracked evictable key", ka)
		}
		m.drop(ka)
		w.left(ka)
	}
}

// burst makes a random number of calls, usually a few, now and then many.
func (w *txTwins) burst(m *model, both bool) {
	w.t.Helper()
	n := w.rng.IntN(13)
	if w.rng.IntN(8) == 0 {
		n = w.rng.IntN(100)
	}
	for range n {
		w.call(m, both)
	}
}

// sameLen checks that both policies track the keys of m.
func (w *txTwins) sameLen(m *model) {
	w.t.Helper()
	if w.a.Len() != len(m.keys) || w.b.Len() != len(m.keys) {
		w.fail("Len %d and %d, %d keys tracked", w.a.Len(), w.b.Len(), len(m.keys))
	}
}

// rolledBack makes a burst of calls to the first policy alone between
// Begin and Rollback.
func (w *txTwins) rolledBack(m *model) {
	w.t.Helper()
	w.logf("*Begin()")
	w.ta.Begin()
	w.burst(m.clone(), false)
	w.logf("*Rollback()")
	w.ta.Rollback()
	w.sameLen(m)
	if w.rng.IntN(2) == 0 {
		// The next victim, right away: both must choose it.
		w.evict(m, true, " ")
	}
}

// committed makes a burst of calls to both between Begin and Commit.
// Now and then the first policy then hears Begin again (which keeps the
// burst, as Commit does) and a burst of its own that it rolls back.
func (w *txTwins) committed(m *model) {
	w.t.Helper()
	w.logf(" Begin()")
	w.ta.Begin()
	w.tb.Begin()
	w.burst(m, true)
	if w.rng.IntN(3) == 0 {
		w.logf("*Begin() while recording")
		w.ta.Begin()
		w.burst(m.clone(), false)
		w.logf("*Rollback()")
		w.ta.Rollback()
		w.logf(" Commit() (second policy only)")
		w.tb.Commit()
	} else {
		w.logf(" Commit()")
		w.ta.Commit()
		w.tb.Commit()
	}
	w.sameLen(m)
}

// checkRollbackIsExact holds a policy that implements
// eviction.Transactional to its contract: a twin that never hears of the
// calls the policy made between Begin and Rollback chooses the same
// victims, in the same order, ever after; calls between Begin and Commit
// count as if no transaction ran; Begin while recording keeps the calls
// recorded so far; Commit and Rollback outside a transaction change
// nothing.
func checkRollbackIsExact(t *testing.T, newPolicy policyFactory) {
	if p, _ := newCase(t, newPolicy); !implementsTransactional(p) {
		t.Skip("the policy does not implement eviction.Transactional: nothing to check")
	}
	for seed := range uint64(6) {
		for _, prof := range profiles() {
			a, ca := newCase(t, newPolicy)
			b, cb := newCase(t, newPolicy)
			w := &txTwins{t: t, a: a, b: b, ta: a.(eviction.Transactional), tb: b.(eviction.Transactional),
				ca: ca, cb: cb, rng: rand.New(rand.NewPCG(seed, 0x7a)), prof: prof,
				name: fmt.Sprintf("seed %d, profile %s", seed, prof.name), invalid: invalidEntries()}
			m := newModel()
			for range 600 {
				switch w.rng.IntN(12) {
				case 0, 1:
					w.rolledBack(m)
				case 2:
					w.committed(m)
				case 3:
					// Outside a transaction these do nothing.
					if w.rng.IntN(2) == 0 {
						w.logf("*Commit() outside a transaction")
						w.ta.Commit()
					} else {
						w.logf("*Rollback() outside a transaction")
						w.ta.Rollback()
					}
				default:
					w.call(m, true)
				}
			}
			// Everything comes out of both in the same order.
			for _, k := range slices.Clone(m.list) {
				a.Unpin(k)
				b.Unpin(k)
				m.setPinned(k, false)
			}
			w.logf(" (all unpinned, draining)")
			for m.evictable > 0 {
				w.evict(m, true, " ")
			}
			if k, ok := a.Evict(); ok {
				w.fail("Evict() = %d, true after draining", k)
			}
			if a.Len() != 0 || b.Len() != 0 {
				w.fail("Len %d and %d after draining", a.Len(), b.Len())
			}
		}
	}
}

func implementsTransactional(p eviction.Policy[int]) bool {
	_, ok := p.(eviction.Transactional)
	return ok
}
