package evictiontest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/kvtier/kvtier/eviction"
)

// opKind names one call the driver makes.
type opKind uint8

const (
	opInsert opKind = iota
	opAccess
	opPin
	opUnpin
	opRemove
	opEvict
	opAdvance
	opKinds
	// opForget is only injected (injectForget), never drawn by a profile.
	opForget = opKinds
)

func (k opKind) String() string {
	return [...]string{"Insert", "Access", "Pin", "Unpin", "Remove", "Evict", "Advance", "Forget"}[k]
}

// op is one recorded call, kept so that a failure can show what led to it.
type op struct {
	kind    opKind
	key     int
	entry   eviction.Entry
	advance time.Duration
	victim  int
	ok      bool
	err     error
	// twinOnly marks an operation fed to the first policy only (an injected
	// no-op whose harmlessness a twin comparison checks).
	twinOnly bool
	// pinned marks an Insert of a key pinned at once (InsertPinned).
	pinned bool
}

func (o op) String() string {
	var s string
	switch o.kind {
	case opInsert:
		name := "Insert"
		if o.pinned {
			name = "InsertPinned"
		}
		s = fmt.Sprintf("%s(%d, {Size:%d Priority:%d Duration:%v}) = %v", name, o.key, o.entry.Size, o.entry.Priority, o.entry.PriorityDuration, o.err)
	case opEvict:
		s = fmt.Sprintf("Evict() = %d, %v", o.victim, o.ok)
	case opAdvance:
		s = fmt.Sprintf("clock.Advance(%v)", o.advance)
	default:
		s = fmt.Sprintf("%v(%d)", o.kind, o.key)
	}
	if o.twinOnly {
		s += " [first policy only]"
	}
	return s
}

// modelKey is what the reference model knows of a tracked key.
type modelKey struct {
	pinned bool
	size   int64
}

// model is the reference the driver checks policies against: which keys
// are tracked, which of them are pinned, and their total size. It holds the
// tracked keys in a slice as well so that a random one can be picked in
// O(1).
type model struct {
	keys      map[int]modelKey
	list      []int
	slot      map[int]int
	size      int64
	evictable int
}

func newModel() *model {
	return &model{keys: map[int]modelKey{}, slot: map[int]int{}}
}

func (m *model) add(k int, size int64) {
	m.keys[k] = modelKey{size: size}
	m.slot[k] = len(m.list)
	m.list = append(m.list, k)
	m.size += size
	m.evictable++
}

func (m *model) drop(k int) {
	mk := m.keys[k]
	if !mk.pinned {
		m.evictable--
	}
	m.size -= mk.size
	delete(m.keys, k)
	i := m.slot[k]
	last := m.list[len(m.list)-1]
	m.list[i] = last
	m.slot[last] = i
	m.list = m.list[:len(m.list)-1]
	delete(m.slot, k)
}

func (m *model) setPinned(k int, pinned bool) {
	mk, ok := m.keys[k]
	if !ok || mk.pinned == pinned {
		return
	}
	mk.pinned = pinned
	m.keys[k] = mk
	if pinned {
		m.evictable--
	} else {
		m.evictable++
	}
}

// profile weighs the operations of a random run. Two profiles cover the two
// callers of a policy: a classic cache (few pins) and a kvcache tier (most
// keys pinned by running requests).
type profile struct {
	name    string
	weights [opKinds]int
}

func profiles() [2]profile {
	return [2]profile{
		{"cache", [opKinds]int{opInsert: 30, opAccess: 30, opPin: 4, opUnpin: 4, opRemove: 4, opEvict: 20, opAdvance: 8}},
		{"pinned", [opKinds]int{opInsert: 25, opAccess: 15, opPin: 25, opUnpin: 10, opRemove: 5, opEvict: 12, opAdvance: 8}},
	}
}

// driver feeds random operations to one or more policies in lockstep and
// checks each against the model and against the first policy. Operations
// injected into the first policy only must be no-ops; the victims of all
// policies must agree, so a twin comparison detects any effect they had.
type driver struct {
	t        *testing.T
	name     string
	policies []eviction.Policy[int]
	clocks   []*eviction.ManualClock
	capacity int64
	universe int
	rng      *rand.Rand
	prof     profile
	model    *model
	history  []op
	steps    int
	invalid  []invalidEntry

	// injectUnknown feeds the first policy Access/Pin/Unpin/Remove calls on
	// keys never inserted; injectDuplicate feeds it Inserts of tracked keys;
	// injectPinnedAccess feeds it Access calls on pinned keys.
	injectUnknown, injectDuplicate, injectPinnedAccess bool
	// allowDuplicates lets random Inserts pick tracked keys (all policies
	// get them and must refuse them).
	allowDuplicates bool
	// injectForget feeds the first policy, an eviction.Forgetter, Forget
	// calls on tracked keys and on keys never inserted.
	injectForget bool
	// insertPinned turns a third of the Inserts into an Insert of a key
	// that is pinned at once: policy 0 gets InsertPinned, the others
	// Insert then Pin (see eviction.PinnedInserter).
	insertPinned bool
}

// historyLen is how many of the last operations a failure message shows.
const historyLen = 16

func newDriver(t *testing.T, newPolicy func(Config) eviction.Policy[int], n int, seed uint64, prof profile) *driver {
	d := &driver{
		t:        t,
		name:     fmt.Sprintf("seed %d, profile %s", seed, prof.name),
		capacity: suiteCapacity,
		universe: 3 * int(suiteCapacity) / 2,
		rng:      rand.New(rand.NewPCG(seed, 0x5eed)),
		prof:     prof,
		model:    newModel(),
		invalid:  invalidEntries(),
	}
	for range n {
		p, clk := newCase(t, newPolicy)
		d.policies = append(d.policies, p)
		d.clocks = append(d.clocks, clk)
	}
	return d
}

// fail stops the test with the driver's context and recent history.
func (d *driver) fail(format string, args ...any) {
	d.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%s, step %d: %s\nlast operations (oldest first):", d.name, d.steps, fmt.Sprintf(format, args...))
	for _, o := range d.history {
		fmt.Fprintf(&b, "\n\t%v", o)
	}
	d.t.Fatal(b.String())
}

func (d *driver) record(o op) {
	if len(d.history) == historyLen {
		copy(d.history, d.history[1:])
		d.history = d.history[:historyLen-1]
	}
	d.history = append(d.history, o)
}

// run performs steps random operations.
func (d *driver) run(steps int) {
	d.t.Helper()
	total := 0
	for _, w := range d.prof.weights {
		total += w
	}
	for range steps {
		d.steps++
		r := d.rng.IntN(total)
		kind := opKind(0)
		for ; r >= d.prof.weights[kind]; kind++ {
			r -= d.prof.weights[kind]
		}
		d.step(kind)
		if d.injectUnknown && d.rng.IntN(4) == 0 {
			d.injectUnknownOp()
		}
		if d.injectDuplicate && d.rng.IntN(4) == 0 && len(d.model.list) > 0 {
			d.insert(d.pickTracked(), randomEntry(d.rng), true)
		}
		if d.injectForget && d.rng.IntN(3) == 0 {
			d.injectForgetOp()
		}
		if d.injectPinnedAccess && len(d.model.list) > 0 {
			if k := d.pickTracked(); d.model.keys[k].pinned {
				d.keyed(opAccess, k, true)
			}
		}
		d.checkLen()
	}
}

func (d *driver) step(kind opKind) {
	d.t.Helper()
	switch kind {
	case opInsert:
		k := d.rng.IntN(d.universe)
		if _, tracked := d.model.keys[k]; tracked && !d.allowDuplicates {
			return
		}
		e := randomEntry(d.rng)
		if d.rng.IntN(20) == 0 {
			e = d.invalid[d.rng.IntN(len(d.invalid))].entry
		}
		d.makeRoom(e.Size)
		if d.insertPinned && d.rng.IntN(3) == 0 {
			d.insertPinnedKey(k, e)
			return
		}
		d.insert(k, e, false)
	case opAccess, opPin, opUnpin, opRemove:
		d.keyed(kind, d.pickKey(), false)
	case opEvict:
		d.evict()
	case opAdvance:
		d.advance(time.Duration(d.rng.IntN(20)) * time.Millisecond)
	}
}

// pickKey returns a tracked key most of the time, and otherwise any key of
// the universe (which may be unknown to the policy).
func (d *driver) pickKey() int {
	if len(d.model.list) > 0 && d.rng.IntN(8) != 0 {
		return d.pickTracked()
	}
	return d.rng.IntN(d.universe)
}

func (d *driver) pickTracked() int {
	return d.model.list[d.rng.IntN(len(d.model.list))]
}

// makeRoom evicts, or removes when every key is pinned, until size more
// fits in the suite's capacity, as the owner of a cache would.
func (d *driver) makeRoom(size int64) {
	d.t.Helper()
	for d.model.size+size > d.capacity {
		if d.model.evictable > 0 {
			d.evict()
		} else {
			d.keyed(opRemove, d.pickTracked(), false)
		}
	}
}

func (d *driver) insert(k int, e eviction.Entry, twinOnly bool) {
	d.t.Helper()
	o := op{kind: opInsert, key: k, entry: e, twinOnly: twinOnly}
	_, tracked := d.model.keys[k]
	invalid := e.Validate() != nil
	for i, p := range d.policies {
		if twinOnly && i > 0 {
			break
		}
		err := p.Insert(k, e)
		o.err = err
		switch {
		case tracked && invalid:
			if !errors.Is(err, eviction.ErrKeyExists) && !errors.Is(err, eviction.ErrInvalidEntry) {
				d.record(o)
				d.fail("Insert of tracked key %d with an invalid entry returned %v, want an error wrapping ErrKeyExists or ErrInvalidEntry", k, err)
			}
		case tracked:
			if !errors.Is(err, eviction.ErrKeyExists) {
				d.record(o)
				d.fail("Insert of tracked key %d returned %v, want an error wrapping ErrKeyExists", k, err)
			}
		case invalid:
			if !errors.Is(err, eviction.ErrInvalidEntry) {
				d.record(o)
				d.fail("Insert of key %d with invalid entry %+v returned %v, want an error wrapping ErrInvalidEntry", k, e, err)
			}
		case err != nil:
			d.record(o)
			d.fail("Insert of untracked key %d with valid entry returned %v", k, err)
		}
	}
	d.record(o)
	if !tracked && !invalid {
		d.model.add(k, e.Size)
	}
}

// insertPinnedKey inserts k pinned: InsertPinned into policy 0, Insert
// then (when it succeeds) Pin into the others. The errors must agree, and
// the victims ever after (checked by every later Evict).
func (d *driver) insertPinnedKey(k int, e eviction.Entry) {
	d.t.Helper()
	_, tracked := d.model.keys[k]
	invalid := e.Validate() != nil
	var errs []error
	for i, p := range d.policies {
		var err error
		if i == 0 {
			err = p.(eviction.PinnedInserter[int]).InsertPinned(k, e)
		} else if err = p.Insert(k, e); err == nil {
			p.Pin(k)
		}
		errs = append(errs, err)
	}
	d.record(op{kind: opInsert, key: k, entry: e, err: errs[0], pinned: true})
	for i, err := range errs {
		if (err == nil) != (errs[0] == nil) || (err != nil && errors.Is(err, eviction.ErrKeyExists) != errors.Is(errs[0], eviction.ErrKeyExists)) {
			d.fail("InsertPinned(%d) returned %v, Insert then Pin of policy %d returned %v", k, errs[0], i, err)
		}
	}
	if errs[0] != nil && !tracked && !invalid {
		d.fail("InsertPinned of untracked key %d with valid entry returned %v", k, errs[0])
	}
	if !tracked && !invalid {
		d.model.add(k, e.Size)
		d.model.setPinned(k, true)
	}
}

func (d *driver) keyed(kind opKind, k int, twinOnly bool) {
	d.t.Helper()
	for i, p := range d.policies {
		if twinOnly && i > 0 {
			break
		}
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
	d.record(op{kind: kind, key: k, twinOnly: twinOnly})
	if _, ok := d.model.keys[k]; !ok {
		return
	}
	switch kind {
	case opPin:
		d.model.setPinned(k, true)
	case opUnpin:
		d.model.setPinned(k, false)
	case opRemove:
		d.model.drop(k)
	}
}

func (d *driver) evict() {
	d.t.Helper()
	o := op{kind: opEvict}
	for i, p := range d.policies {
		k, ok := p.Evict()
		if i == 0 {
			o.victim, o.ok = k, ok
			d.record(o)
			continue
		}
		if k != o.victim || ok != o.ok {
			if d.injectUnknown || d.injectDuplicate || d.injectPinnedAccess {
				d.fail("the operations fed to policy 0 only (marked below) changed its victims: policy 0 evicted (%d, %v), its twin %d evicted (%d, %v)", o.victim, o.ok, i, k, ok)
			}
			d.fail("two policies fed the same operations and clock readings disagree: policy 0 evicted (%d, %v), policy %d evicted (%d, %v)", o.victim, o.ok, i, k, ok)
		}
	}
	switch mk, tracked := d.model.keys[o.victim]; {
	case !o.ok && d.model.evictable > 0:
		d.fail("Evict returned false with %d evictable keys tracked", d.model.evictable)
	case !o.ok:
		return
	case d.model.evictable == 0:
		d.fail("Evict returned key %d but no tracked key is evictable", o.victim)
	case !tracked:
		d.fail("Evict returned key %d, which is not tracked (never inserted, or already evicted or removed)", o.victim)
	case mk.pinned:
		d.fail("Evict returned key %d, which is pinned", o.victim)
	}
	d.model.drop(o.victim)
}

func (d *driver) advance(by time.Duration) {
	for _, c := range d.clocks {
		c.Advance(by)
	}
	d.record(op{kind: opAdvance, advance: by})
}

// injectUnknownOp calls Access, Pin, Unpin or Remove on a key that was never
// inserted, on the first policy only.
func (d *driver) injectUnknownOp() {
	d.t.Helper()
	k := d.universe + d.rng.IntN(d.universe) // never inserted
	kinds := [...]opKind{opAccess, opPin, opUnpin, opRemove}
	d.keyed(kinds[d.rng.IntN(len(kinds))], k, true)
}

// injectForgetOp calls Forget on the first policy only, of a tracked key
// or of a key never inserted: both must change nothing.
func (d *driver) injectForgetOp() {
	k := d.universe + d.rng.IntN(d.universe) // never inserted
	if len(d.model.list) > 0 && d.rng.IntN(2) == 0 {
		k = d.pickTracked()
	}
	d.record(op{kind: opForget, key: k, twinOnly: true})
	d.policies[0].(eviction.Forgetter[int]).Forget(k)
}

func (d *driver) checkLen() {
	d.t.Helper()
	want := len(d.model.keys)
	for i, p := range d.policies {
		if got := p.Len(); got != want {
			d.fail("policy %d: Len() = %d, want %d tracked keys", i, got, want)
		}
	}
}

// drain evicts until every policy returns false, checking as it goes. It
// then requires every remaining tracked key to be pinned.
func (d *driver) drain() {
	d.t.Helper()
	for d.model.evictable > 0 {
		d.evict()
		d.checkLen()
	}
	d.evict()
}
