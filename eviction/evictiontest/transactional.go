package evictiontest

import (
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
	t      *testing.T
	a, b   eviction.Policy[int]
	ta, tb eviction.Transactional
	ca, cb *eviction.ManualClock
	rng    *rand.Rand
	prof   profile
	name   string
	log    []string
}

func (w *txTwins) fail(format string, args ...any) {
	w.t.Helper()
	start := max(0, len(w.log)-24)
	w.t.Fatalf("%s: %s\nlast calls (oldest first; * = first policy only):\n\t%s", w.name, fmt.Sprintf(format, args...),
		strings.Join(w.log[start:], "\n\t"))
}

// call makes one random call to the policies named by both (else the first
// alone) and updates m, which must describe their tracked keys.
func (w *txTwins) call(m *model, both bool) {
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
	pick := func() (int, bool) {
		if len(m.list) == 0 {
			return 0, false
		}
		return m.list[w.rng.IntN(len(m.list))], true
	}
	switch kind {
	case opInsert:
		k := w.rng.IntN(MaxKey + 1)
		if _, ok := m.keys[k]; ok {
			return
		}
		e := eviction.NewEntry(int64(1 + w.rng.IntN(4)))
		e.Priority = w.rng.IntN(eviction.MaxPriority + 1)
		if w.rng.IntN(3) == 0 {
			e.PriorityDuration = time.Duration(1+w.rng.IntN(5)) * time.Second
		}
		e.Unit.Chunk, e.Unit.Chunks = w.rng.IntN(8), 8
		for m.size+e.Size > suiteCapacity && m.evictable > 0 {
			w.evict(m, both, mark)
		}
		if m.size+e.Size > suiteCapacity {
			return
		}
		w.log = append(w.log, fmt.Sprintf("%sInsert(%d, size %d, priority %d, for %v)", mark, k, e.Size, e.Priority, e.PriorityDuration))
		errA := w.a.Insert(k, e)
		if both {
			if errB := w.b.Insert(k, e); (errA == nil) != (errB == nil) {
				w.fail("Insert(%d): %v and %v", k, errA, errB)
			}
		}
		if errA != nil {
			w.fail("Insert(%d): %v", k, errA)
		}
		m.add(k, e.Size)
	case opEvict:
		w.evict(m, both, mark)
	case opAdvance:
		// Time passes for both, whether or not they hear of calls.
		d := time.Duration(w.rng.IntN(2000)) * time.Millisecond
		w.log = append(w.log, fmt.Sprintf("%sclock.Advance(%v)", mark, d))
		w.ca.Advance(d)
		w.cb.Advance(d)
	default:
		k, ok := pick()
		if !ok {
			return
		}
		w.log = append(w.log, fmt.Sprintf("%s%v(%d)", mark, kind, k))
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
		}
	}
	if both && w.a.Len() != w.b.Len() {
		w.fail("Len %d and %d", w.a.Len(), w.b.Len())
	}
	if w.a.Len() != len(m.keys) {
		w.fail("Len %d, %d keys tracked", w.a.Len(), len(m.keys))
	}
}

func (w *txTwins) targets(both bool) []eviction.Policy[int] {
	if both {
		return []eviction.Policy[int]{w.a, w.b}
	}
	return []eviction.Policy[int]{w.a}
}

// evict evicts from the policies and checks that they agree.
func (w *txTwins) evict(m *model, both bool, mark string) {
	ka, oka := w.a.Evict()
	w.log = append(w.log, fmt.Sprintf("%sEvict() = %d, %t", mark, ka, oka))
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
	}
}

// checkRollbackIsExact holds a policy that implements
// eviction.Transactional to its contract: a twin that never hears of the
// calls the policy made between Begin and Rollback chooses the same
// victims, in the same order, ever after; calls between Begin and Commit
// count as if no transaction ran.
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
				name: fmt.Sprintf("seed %d, profile %s", seed, prof.name)}
			m := newModel()
			for range 600 {
				switch w.rng.IntN(10) {
				case 0:
					// A burst the first policy alone hears, then takes back.
					w.log = append(w.log, "*Begin()")
					w.ta.Begin()
					burst := m.clone()
					for range 1 + w.rng.IntN(12) {
						w.call(burst, false)
					}
					w.log = append(w.log, "*Rollback()")
					w.ta.Rollback()
				case 1:
					// A burst both hear, committed.
					w.log = append(w.log, " Begin()")
					w.ta.Begin()
					w.tb.Begin()
					for range 1 + w.rng.IntN(12) {
						w.call(m, true)
					}
					w.log = append(w.log, " Commit()")
					w.ta.Commit()
					w.tb.Commit()
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
			for m.evictable > 0 {
				w.evict(m, true, " ")
			}
			if a.Len() != 0 || b.Len() != 0 {
				w.fail("Len %d and %d after draining", a.Len(), b.Len())
			}
			// Rollback and Commit outside a transaction change nothing.
			w.ta.Rollback()
			w.ta.Commit()
		}
	}
}

func implementsTransactional(p eviction.Policy[int]) bool {
	_, ok := p.(eviction.Transactional)
	return ok
}
