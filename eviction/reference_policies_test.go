package eviction_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/kvtier/kvtier/eviction"
)

// The reference policies below state each policy's order as plainly as
// possible: every evictable key carries a stamp and Evict scans for the
// least. They share no code or data structure with the real policies, so a
// randomized differential test against them checks the real ones' lists,
// heaps and bitmaps.

// refItem is one tracked key of a reference policy.
type refItem struct {
	key    int
	pinned bool
	// stamp orders evictable keys: the least is evicted first.
	stamp refStamp
	// Prioritized LRU only.
	priority  int
	duration  time.Duration
	timerFrom time.Duration // when the key last became evictable
	timerSeq  uint64        // the op number at which it did
}

// refStamp is an order on events: first by time, then demotions before
// operations at the same time, then by number.
type refStamp struct {
	at    time.Duration
	kind  int // 0: a priority expiry, 1: an operation
	order uint64
}

func (a refStamp) less(b refStamp) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	if a.kind != b.kind {
		return a.kind < b.kind
	}
	return a.order < b.order
}

// refPolicy is a reference policy: the same operations, with the time
// passed in.
type refPolicy interface {
	insert(k int, e eviction.Entry, now time.Duration) bool
	access(k int, now time.Duration)
	pin(k int, now time.Duration)
	unpin(k int, now time.Duration)
	remove(k int)
	evict(now time.Duration) (int, bool)
	len() int
}

// refBase holds the tracked keys of a reference policy in a slice.
type refBase struct {
	items []refItem
	ops   uint64
}

func (r *refBase) find(k int) int {
	for i := range r.items {
		if r.items[i].key == k {
			return i
		}
	}
	return -1
}

func (r *refBase) next(now time.Duration) refStamp {
	r.ops++
	return refStamp{at: now, kind: 1, order: r.ops}
}

func (r *refBase) remove(k int) {
	if i := r.find(k); i >= 0 {
		r.items = append(r.items[:i], r.items[i+1:]...)
	}
}

func (r *refBase) len() int { return len(r.items) }

// evictMin evicts the evictable item that sorts first by less.
func (r *refBase) evictMin(less func(a, b *refItem) bool) (int, bool) {
	best := -1
	for i := range r.items {
		if r.items[i].pinned {
			continue
		}
		if best < 0 || less(&r.items[i], &r.items[best]) {
			best = i
		}
	}
	if best < 0 {
		return 0, false
	}
	k := r.items[best].key
	r.items = append(r.items[:best], r.items[best+1:]...)
	return k, true
}

// refLRU stamps a key when it is inserted, accessed while evictable, or
// unpinned.
type refLRU struct{ refBase }

func (r *refLRU) insert(k int, e eviction.Entry, now time.Duration) bool {
	if e.Validate() != nil || r.find(k) >= 0 {
		return false
	}
	r.items = append(r.items, refItem{key: k, stamp: r.next(now)})
	return true
}

func (r *refLRU) access(k int, now time.Duration) {
	if i := r.find(k); i >= 0 && !r.items[i].pinned {
		r.items[i].stamp = r.next(now)
	}
}

func (r *refLRU) pin(k int, _ time.Duration) {
	if i := r.find(k); i >= 0 {
		r.items[i].pinned = true
	}
}

func (r *refLRU) unpin(k int, now time.Duration) {
	if i := r.find(k); i >= 0 && r.items[i].pinned {
		r.items[i].pinned = false
		r.items[i].stamp = r.next(now)
	}
}

func (r *refLRU) evict(time.Duration) (int, bool) {
	return r.evictMin(func(a, b *refItem) bool { return a.stamp.less(b.stamp) })
}

// refFIFO stamps a key once, when it is inserted.
type refFIFO struct{ refBase }

func (r *refFIFO) insert(k int, e eviction.Entry, now time.Duration) bool {
	if e.Validate() != nil || r.find(k) >= 0 {
		return false
	}
	r.items = append(r.items, refItem{key: k, stamp: r.next(now)})
	return true
}

func (r *refFIFO) access(int, time.Duration) {}

func (r *refFIFO) pin(k int, _ time.Duration) {
	if i := r.find(k); i >= 0 {
		r.items[i].pinned = true
	}
}

func (r *refFIFO) unpin(k int, _ time.Duration) {
	if i := r.find(k); i >= 0 {
		r.items[i].pinned = false
	}
}

func (r *refFIFO) evict(time.Duration) (int, bool) {
	return r.evictMin(func(a, b *refItem) bool { return a.stamp.less(b.stamp) })
}

// diffOps weighs the operations of a differential run.
type diffOps struct {
	insert, access, pin, unpin, remove, evict, advance int
}

// runDifferential feeds the same random operations to a policy and to its
// reference and requires the same victims and lengths throughout.
func runDifferential(t *testing.T, name string, seed uint64, steps, universe int, w diffOps,
	newPolicy func(eviction.Clock) eviction.Policy[int], ref refPolicy, entry func(*rand.Rand) eviction.Entry,
) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 99))
	clk := new(eviction.ManualClock)
	p := newPolicy(clk)
	var history []string
	fail := func(format string, args ...any) {
		t.Helper()
		start := max(0, len(history)-20)
		t.Fatalf("%s seed %d step %d: %s\nlast operations:\n\t%s", name, seed, len(history), fmt.Sprintf(format, args...),
			strings.Join(history[start:], "\n\t"))
	}
	total := w.insert + w.access + w.pin + w.unpin + w.remove + w.evict + w.advance
	for range steps {
		k := rng.IntN(universe)
		now := clk.Now()
		r := rng.IntN(total)
		switch {
		case r < w.insert:
			e := entry(rng)
			err := p.Insert(k, e)
			ok := ref.insert(k, e, now)
			history = append(history, fmt.Sprintf("@%v Insert(%d, prio %d dur %v) = %v", now, k, e.Priority, e.PriorityDuration, err))
			if (err == nil) != ok {
				fail("Insert(%d) returned %v, reference accepted: %v", k, err, ok)
			}
		case r < w.insert+w.access:
			p.Access(k)
			ref.access(k, now)
			history = append(history, fmt.Sprintf("@%v Access(%d)", now, k))
		case r < w.insert+w.access+w.pin:
			p.Pin(k)
			ref.pin(k, now)
			history = append(history, fmt.Sprintf("@%v Pin(%d)", now, k))
		case r < w.insert+w.access+w.pin+w.unpin:
			p.Unpin(k)
			ref.unpin(k, now)
			history = append(history, fmt.Sprintf("@%v Unpin(%d)", now, k))
		case r < w.insert+w.access+w.pin+w.unpin+w.remove:
			p.Remove(k)
			ref.remove(k)
			history = append(history, fmt.Sprintf("@%v Remove(%d)", now, k))
		case r < total-w.advance:
			got, gotOK := p.Evict()
			want, wantOK := ref.evict(now)
			history = append(history, fmt.Sprintf("@%v Evict() = %d, %v", now, got, gotOK))
			if got != want || gotOK != wantOK {
				fail("Evict() = %d, %v; reference evicts %d, %v", got, gotOK, want, wantOK)
			}
		default:
			d := time.Duration(rng.IntN(8)) * time.Millisecond
			clk.Advance(d)
			history = append(history, fmt.Sprintf("Advance(%v)", d))
		}
		if p.Len() != ref.len() {
			fail("Len() = %d, reference tracks %d", p.Len(), ref.len())
		}
	}
	// Drain: unpin everything, then the full eviction order must agree.
	now := clk.Now()
	for k := range universe {
		p.Unpin(k)
		ref.unpin(k, now)
	}
	for {
		got, gotOK := p.Evict()
		want, wantOK := ref.evict(now)
		history = append(history, fmt.Sprintf("@%v drain Evict() = %d, %v", now, got, gotOK))
		if got != want || gotOK != wantOK {
			fail("while draining, Evict() = %d, %v; reference evicts %d, %v", got, gotOK, want, wantOK)
		}
		if !gotOK {
			return
		}
	}
}

// plainEntry is a valid default-priority entry of size 1.
func plainEntry(*rand.Rand) eviction.Entry { return eviction.NewEntry(1) }

// runScript runs a space-separated script of operations on p and returns
// the victims of its evictions, "-" for an Evict that returned false.
// Operations: iK inserts key K with the default priority (iK:P with
// priority P, iK:P/D with priority P for duration D, e.g. i3:80/10ms), aK
// accesses, pK pins, uK unpins, rK removes, e evicts, +D advances clk by
// duration D.
func runScript(t *testing.T, p eviction.Policy[int], clk *eviction.ManualClock, script string) string {
	t.Helper()
	var victims []string
	for _, word := range strings.Fields(script) {
		if word == "e" {
			if k, ok := p.Evict(); ok {
				victims = append(victims, fmt.Sprint(k))
			} else {
				victims = append(victims, "-")
			}
			continue
		}
		if word[0] == '+' {
			d, err := time.ParseDuration(word[1:])
			if err != nil {
				t.Fatalf("bad script word %q: %v", word, err)
			}
			clk.Advance(d)
			continue
		}
		keyPart, entryPart, _ := strings.Cut(word[1:], ":")
		var k int
		if _, err := fmt.Sscan(keyPart, &k); err != nil {
			t.Fatalf("bad script word %q: %v", word, err)
		}
		switch word[0] {
		case 'i':
			e := eviction.NewEntry(1)
			if entryPart != "" {
				prio, dur, hasDur := strings.Cut(entryPart, "/")
				if _, err := fmt.Sscan(prio, &e.Priority); err != nil {
					t.Fatalf("bad script word %q: %v", word, err)
				}
				if hasDur {
					d, err := time.ParseDuration(dur)
					if err != nil {
						t.Fatalf("bad script word %q: %v", word, err)
					}
					e.PriorityDuration = d
				}
			}
			if err := p.Insert(k, e); err != nil {
				t.Fatalf("script %q: Insert(%d): %v", script, k, err)
			}
		case 'a':
			p.Access(k)
		case 'p':
			p.Pin(k)
		case 'u':
			p.Unpin(k)
		case 'r':
			p.Remove(k)
		default:
			t.Fatalf("bad script word %q", word)
		}
	}
	return strings.Join(victims, " ")
}

// refPrioritized states the prioritized LRU's semantics directly: a key's
// priority at time now is its own until its timer (started when it last
// became evictable) reaches its duration, and DefaultPriority for good
// after; a fallen-back key counts as used at its expiry instant, ahead of
// any operation at that instant. Evict takes the lowest priority, then the
// oldest stamp.
type refPrioritized struct{ refBase }

// settle applies every expiry due by now.
func (r *refPrioritized) settle(now time.Duration) {
	for i := range r.items {
		it := &r.items[i]
		if it.pinned || it.duration <= 0 || it.priority == eviction.DefaultPriority {
			continue
		}
		expiry := it.timerFrom + it.duration
		if it.duration > math.MaxInt64-it.timerFrom {
			expiry = math.MaxInt64
		}
		if expiry <= now {
			it.priority = eviction.DefaultPriority
			it.duration = 0
			it.stamp = refStamp{at: expiry, kind: 0, order: it.timerSeq}
		}
	}
}

// startTimer marks item i as having just become evictable.
func (r *refPrioritized) startTimer(i int, now time.Duration) {
	it := &r.items[i]
	it.stamp = r.next(now)
	it.timerFrom = now
	it.timerSeq = it.stamp.order
}

func (r *refPrioritized) insert(k int, e eviction.Entry, now time.Duration) bool {
	r.settle(now)
	if e.Validate() != nil || r.find(k) >= 0 {
		return false
	}
	r.items = append(r.items, refItem{key: k, priority: e.Priority, duration: e.PriorityDuration})
	r.startTimer(len(r.items)-1, now)
	return true
}

func (r *refPrioritized) access(k int, now time.Duration) {
	r.settle(now)
	if i := r.find(k); i >= 0 && !r.items[i].pinned {
		r.items[i].stamp = r.next(now)
	}
}

func (r *refPrioritized) pin(k int, now time.Duration) {
	r.settle(now)
	if i := r.find(k); i >= 0 {
		r.items[i].pinned = true
	}
}

func (r *refPrioritized) unpin(k int, now time.Duration) {
	r.settle(now)
	if i := r.find(k); i >= 0 && r.items[i].pinned {
		r.items[i].pinned = false
		r.startTimer(i, now)
	}
}

func (r *refPrioritized) evict(now time.Duration) (int, bool) {
	r.settle(now)
	return r.evictMin(func(a, b *refItem) bool {
		if a.priority != b.priority {
			return a.priority < b.priority
		}
		return a.stamp.less(b.stamp)
	})
}

// FuzzPoliciesMatchReferences decodes the input as a sequence of
// operations, three bytes each (operation, key, argument), and runs it on
// LRU, FIFO and PrioritizedLRU, each with a map and with a DenseIndex, and
// on their references, requiring the same victims and lengths after every
// operation.
func FuzzPoliciesMatchReferences(f *testing.F) {
	f.Add([]byte{0, 1, 0, 0, 2, 0, 5, 0, 0})
	f.Add([]byte{0, 1, 10, 0, 2, 200, 6, 0, 9, 5, 0, 0, 2, 1, 0, 5, 0, 0, 3, 1, 0, 5, 0, 0})
	f.Add([]byte{0, 1, 130, 0, 2, 131, 0, 3, 35, 6, 0, 5, 1, 2, 0, 6, 0, 20, 5, 0, 0, 5, 0, 0, 5, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		clk := new(eviction.ManualClock)
		policies := []eviction.Policy[int]{
			eviction.NewLRU[int](), eviction.NewFIFO[int](), eviction.NewPrioritizedLRU[int](clk),
			must(eviction.NewLRUWithIndex(newIndex("dense", 15))),
			must(eviction.NewFIFOWithIndex(newIndex("dense", 15))),
			must(eviction.NewPrioritizedLRUWithIndex(clk, newIndex("dense", 15))),
		}
		refs := []refPolicy{&refLRU{}, &refFIFO{}, &refPrioritized{}, &refLRU{}, &refFIFO{}, &refPrioritized{}}
		names := []string{"LRU", "FIFO", "PrioritizedLRU", "dense LRU", "dense FIFO", "dense PrioritizedLRU"}
		for pos := 0; pos+3 <= len(data); pos += 3 {
			kind, k, arg := data[pos]%7, int(data[pos+1]%16), data[pos+2]
			now := clk.Now()
			for j, p := range policies {
				r := refs[j]
				switch kind {
				case 0:
					// arg: priority in the low 7 bits (values above 100 are
					// invalid), a duration of (arg%8) ms when the top bit is set.
					e := eviction.NewEntry(1)
					e.Priority = int(arg & 0x7f)
					if arg&0x80 != 0 {
						e.PriorityDuration = time.Duration(arg%8) * time.Millisecond
					}
					if err, ok := p.Insert(k, e), r.insert(k, e, now); (err == nil) != ok {
						t.Fatalf("%s op %d: Insert(%d, %+v) = %v, reference accepted: %v", names[j], pos/3, k, e, err, ok)
					}
				case 1:
					p.Access(k)
					r.access(k, now)
				case 2:
					p.Pin(k)
					r.pin(k, now)
				case 3:
					p.Unpin(k)
					r.unpin(k, now)
				case 4:
					p.Remove(k)
					r.remove(k)
				case 5:
					got, gotOK := p.Evict()
					want, wantOK := r.evict(now)
					if got != want || gotOK != wantOK {
						t.Fatalf("%s op %d: Evict() = %d, %v; reference evicts %d, %v", names[j], pos/3, got, gotOK, want, wantOK)
					}
				}
				if p.Len() != r.len() {
					t.Fatalf("%s op %d: Len() = %d, reference tracks %d", names[j], pos/3, p.Len(), r.len())
				}
			}
			if kind == 6 {
				clk.Advance(time.Duration(arg%16) * time.Millisecond)
			}
		}
	})
}
