package eviction

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvtier/kvtier/costmodel"
)

// costTable prices units by their Chunk: unit {Chunk: i} costs costs[i]
// exactly (Beta 1 times a position weight of costs[i], no layer weight), so
// a test can give every key the cost it wants, new costs included.
type costTable struct {
	costs []float64
}

// tableChunks is the Chunks of every table unit: large enough for any index.
const tableChunks = 1 << 30

func (tb *costTable) model() costmodel.Recompute {
	return costmodel.Recompute{
		Beta:        1,
		LayerWeight: costmodel.Flat,
		PositionWeight: func(i, _ int) float64 {
			if i >= len(tb.costs) {
				return 1 // an index no entry uses yet, such as Validate's probe
			}
			return tb.costs[i]
		},
	}
}

// entry returns an entry whose unit costs c.
func (tb *costTable) entry(c float64) Entry {
	tb.costs = append(tb.costs, c)
	e := NewEntry(1)
	e.Unit = costmodel.Unit{Chunk: len(tb.costs) - 1, Chunks: tableChunks}
	return e
}

func newTableRetention(t testing.TB, clock Clock) (*Retention[string], *costTable) {
	t.Helper()
	tb := &costTable{}
	r, err := NewRetention[string](clock, tb.model())
	require.NoError(t, err)
	return r, tb
}

func TestRetentionNewRejectsBadCostModel(t *testing.T) {
	for _, cost := range []costmodel.Recompute{
		{Alpha: -1},
		{Beta: math.NaN()},
		{NonAttention: math.Inf(1)},
	} {
		_, err := NewRetention[int](&ManualClock{}, cost)
		require.ErrorIs(t, err, ErrInvalidConfig)
		require.ErrorIs(t, err, costmodel.ErrInvalidParameter)
	}
}

func TestRetentionNilClockUsesSystemClock(t *testing.T) {
	r, err := NewRetention[int](nil, costmodel.Recompute{Beta: 1})
	require.NoError(t, err)
	require.IsType(t, &SystemClock{}, r.clock)
	require.NoError(t, r.Insert(1, NewEntry(1)))
	require.NoError(t, r.Insert(2, NewEntry(1)))
	// Equal costs: least recently used first, whatever the clock says.
	k, ok := r.Evict()
	require.True(t, ok)
	require.Equal(t, 1, k)
}

func TestRetentionInsertErrors(t *testing.T) {
	clock := &ManualClock{}
	r, tb := newTableRetention(t, clock)
	require.NoError(t, r.Insert("a", tb.entry(1)))

	err := r.Insert("a", tb.entry(2))
	require.ErrorIs(t, err, ErrKeyExists)
	require.ErrorContains(t, err, "a")

	bad := tb.entry(1)
	bad.Size = 0
	require.ErrorIs(t, r.Insert("b", bad), ErrInvalidEntry)

	unit := tb.entry(1)
	unit.Unit.ContextTokens = -1
	err = r.Insert("b", unit)
	require.ErrorIs(t, err, ErrInvalidEntry)
	require.ErrorIs(t, err, costmodel.ErrInvalidUnit)

	// A weight the model cannot use is reported per key.
	err = r.Insert("b", tb.entry(-1))
	require.ErrorIs(t, err, ErrInvalidEntry)
	require.ErrorIs(t, err, costmodel.ErrInvalidParameter)
	err = r.Insert("b", tb.entry(math.Inf(1)))
	require.ErrorIs(t, err, ErrInvalidEntry)

	require.Equal(t, 1, r.Len())
	k, ok := r.Evict()
	require.True(t, ok)
	require.Equal(t, "a", k)
	_, ok = r.Evict()
	require.False(t, ok)
}

// evictAll drains r and returns the victims in order.
func evictAll[K comparable](r Policy[K]) []K {
	var out []K
	for {
		k, ok := r.Evict()
		if !ok {
			return out
		}
		out = append(out, k)
	}
}

func TestRetentionOrder(t *testing.T) {
	type insert struct {
		key  string
		cost float64
		at   time.Duration // clock reading at insert
	}
	for _, tc := range []struct {
		name    string
		inserts []insert
		evictAt time.Duration
		want    []string
	}{
		{
			name:    "cheaper first at equal inactivity",
			inserts: []insert{{"dear", 10, 0}, {"cheap", 1, 0}},
			evictAt: time.Second,
			want:    []string{"cheap", "dear"},
		},
		{
			name: "long unused beats cheap",
			// At 10 s: fresh 1/1 = 1, old 5/10 = 0.5.
			inserts: []insert{{"old", 5, 0}, {"fresh", 1, 9 * time.Second}},
			evictAt: 10 * time.Second,
			want:    []string{"old", "fresh"},
		},
		{
			name: "early: the dear old key still ranks lower",
			// At 3.5 s: a 4/3.5 = 1.14, b 1/0.5 = 2.
			inserts: []insert{{"a", 4, 0}, {"b", 1, 3 * time.Second}},
			evictAt: 3500 * time.Millisecond,
			want:    []string{"a", "b"},
		},
		{
			name: "exact tie goes to the older use",
			// At 4 s: a 4/4 = 1, b 1/1 = 1.
			inserts: []insert{{"a", 4, 0}, {"b", 1, 3 * time.Second}},
			evictAt: 4 * time.Second,
			want:    []string{"a", "b"},
		},
		{
			name: "late: the order has flipped",
			// At 10 s: a 4/10 = 0.4, b 1/7 = 0.14.
			inserts: []insert{{"a", 4, 0}, {"b", 1, 3 * time.Second}},
			evictAt: 10 * time.Second,
			want:    []string{"b", "a"},
		},
		{
			name: "zero cost first even when just used",
			// free is used at the instant of the Evict: 0/0, taken as 0.
			inserts: []insert{{"paid", 1, 0}, {"free", 0, 5 * time.Second}},
			evictAt: 5 * time.Second,
			want:    []string{"free", "paid"},
		},
		{
			name: "just used loses to any finite value",
			// now: 1e12/1ns is finite, 1/0 is +Inf.
			inserts: []insert{{"dear", 1e12, 0}, {"now", 1e-9, 1}},
			evictAt: 1,
			want:    []string{"dear", "now"},
		},
		{
			name:    "equal value and time: call order",
			inserts: []insert{{"x", 2, 0}, {"y", 3, 0}, {"z", 2, 0}},
			evictAt: 0,
			want:    []string{"x", "y", "z"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := &ManualClock{}
			r, tb := newTableRetention(t, clock)
			for _, in := range tc.inserts {
				clock.Set(in.at)
				require.NoError(t, r.Insert(in.key, tb.entry(in.cost)))
			}
			clock.Set(tc.evictAt)
			require.Equal(t, tc.want, evictAll[string](r))
		})
	}
}

func TestRetentionUnpinIsAUse(t *testing.T) {
	clock := &ManualClock{}
	r, tb := newTableRetention(t, clock)
	require.NoError(t, r.Insert("a", tb.entry(1)))
	clock.Advance(time.Second)
	require.NoError(t, r.Insert("b", tb.entry(1)))
	r.Pin("a")
	clock.Advance(time.Second)
	// Pinned: never a victim.
	k, ok := r.Evict()
	require.True(t, ok)
	require.Equal(t, "b", k)
	_, ok = r.Evict()
	require.False(t, ok)

	require.NoError(t, r.Insert("c", tb.entry(1)))
	clock.Advance(time.Second)
	r.Unpin("a") // a is now the most recently used
	clock.Advance(time.Second)
	require.Equal(t, []string{"c", "a"}, evictAll[string](r))
}

func TestRetentionAccessWhilePinnedKeepsKeyPinned(t *testing.T) {
	clock := &ManualClock{}
	r, tb := newTableRetention(t, clock)
	require.NoError(t, r.Insert("a", tb.entry(1)))
	r.Pin("a")
	r.Access("a")
	clock.Advance(time.Second)
	_, ok := r.Evict()
	require.False(t, ok)
	require.Equal(t, 1, r.Len())
	r.Remove("a")
	require.Equal(t, 0, r.Len())
	_, ok = r.Evict()
	require.False(t, ok)
}

func TestRetentionClockGoingBackwardsStandsStill(t *testing.T) {
	clock := &steppingClock{readings: []time.Duration{100, 200, 50, 50, 300}}
	r, err := NewRetention[string](clock, costmodel.Recompute{Beta: 1})
	require.NoError(t, err)                        // reads 100: the epoch
	require.NoError(t, r.Insert("a", NewEntry(1))) // 200: t = 100
	require.NoError(t, r.Insert("b", NewEntry(1))) // 50: still 100
	require.Equal(t, int64(100), r.now)
	r.Access("a") // 50: still 100, a after b
	k, ok := r.Evict()
	require.True(t, ok)
	require.Equal(t, "b", k)
	require.Equal(t, int64(200), r.now)
}

// steppingClock returns its readings in turn, repeating the last.
type steppingClock struct {
	readings []time.Duration
}

func (c *steppingClock) Now() time.Duration {
	d := c.readings[0]
	if len(c.readings) > 1 {
		c.readings = c.readings[1:]
	}
	return d
}

func TestRetentionExtremeClock(t *testing.T) {
	// Readings near both ends of int64 must neither overflow nor panic.
	for _, start := range []time.Duration{math.MinInt64 + 5, -1, 0, math.MaxInt64 - 5} {
		clock := &steppingClock{readings: []time.Duration{start, math.MinInt64, math.MaxInt64, start}}
		r, err := NewRetention[int](clock, costmodel.Recompute{Alpha: 1, Beta: 1})
		require.NoError(t, err)
		e := NewEntry(1)
		require.NoError(t, r.Insert(1, e))
		e.ContextTokens = 100
		require.NoError(t, r.Insert(2, e))
		require.NoError(t, r.Insert(3, NewEntry(1)))
		require.Len(t, evictAll[int](r), 3, "start %d", start)
	}
}

// retentionOpMix weighs the random operations of a differential run.
type retentionOpMix struct {
	insert, access, pin, unpin, remove, evict, advance int
}

// retentionRun drives a Retention and its scan reference with the same
// random operations and demands the same victim at every Evict.
type retentionRun struct {
	t        testing.TB
	rng      *rand.Rand
	clock    *ManualClock
	policy   *Retention[int]
	ref      *scanRetention[int]
	tb       *costTable
	universe int
	palette  []float64 // the small set of costs
	mix      retentionOpMix
	evicts   int
	hits     int // Evicts that found a victim
	log      []string
}

func newRetentionRun(t testing.TB, seed uint64, universe int, mix retentionOpMix) *retentionRun {
	tb := &costTable{}
	clock := &ManualClock{}
	p, err := NewRetention[int](clock, tb.model())
	require.NoError(t, err)
	run := &retentionRun{
		t: t, rng: rand.New(rand.NewPCG(seed, 0xc057)), clock: clock, policy: p,
		ref: newScanRetention[int](clock, tb.model(), bigCompare), tb: tb,
		universe: universe, mix: mix,
	}
	// A small palette of costs as a kvcache tier sees them (a few
	// (layer, chunk, context) combinations), with exact ratios between
	// them so that values tie often.
	for range 6 {
		run.palette = append(run.palette, float64(1+run.rng.IntN(8)))
	}
	run.palette = append(run.palette, 0.25, 1.0/3, 0.1)
	return run
}

// cost draws a cost from one of several families.
func (run *retentionRun) cost() float64 {
	r := run.rng
	switch r.IntN(20) {
	case 0:
		return 0
	case 1: // a neighbour of a palette cost: nearly equal, never equal
		c := run.palette[r.IntN(len(run.palette))]
		if r.IntN(2) == 0 {
			return math.Nextafter(c, math.Inf(1))
		}
		return math.Nextafter(c, 0)
	case 2: // the extremes
		return []float64{5e-324, 1e-300, 1e300, math.MaxFloat64 / 4}[r.IntN(4)]
	case 3, 4, 5, 6, 7, 8: // continuous over many orders of magnitude
		return math.Exp(r.Float64()*60 - 30)
	default:
		return run.palette[r.IntN(len(run.palette))]
	}
}

func (run *retentionRun) advance() {
	r := run.rng
	var d time.Duration
	switch r.IntN(10) {
	case 0, 1, 2, 3: // time stands still
	case 4, 5:
		d = time.Duration(1 + r.IntN(10))
	case 6, 7:
		d = time.Duration(1 + r.Int64N(int64(time.Millisecond)))
	case 8:
		d = time.Duration(1 + r.Int64N(int64(time.Hour)))
	case 9:
		if r.IntN(20) == 0 {
			d = time.Duration(r.Int64N(int64(200 * 24 * time.Hour)))
		}
	}
	run.clock.Advance(d)
	run.note("advance %d", d)
}

func (run *retentionRun) note(format string, args ...any) {
	if len(run.log) == 24 {
		copy(run.log, run.log[1:])
		run.log = run.log[:23]
	}
	run.log = append(run.log, fmt.Sprintf(format, args...))
}

func (run *retentionRun) fatalf(format string, args ...any) {
	run.t.Helper()
	run.t.Fatalf("%s\nrecent operations:\n%v", fmt.Sprintf(format, args...), run.log)
}

func (run *retentionRun) step() {
	run.t.Helper()
	m := run.mix
	total := m.insert + m.access + m.pin + m.unpin + m.remove + m.evict + m.advance
	x := run.rng.IntN(total)
	k := run.rng.IntN(run.universe)
	switch {
	case x < m.insert:
		e := run.tb.entry(run.cost())
		err1, err2 := run.policy.Insert(k, e), run.ref.Insert(k, e)
		run.note("insert %d cost %g: %v", k, run.tb.costs[e.Chunk], err1)
		if (err1 == nil) != (err2 == nil) || (err1 != nil && !errors.Is(err1, ErrKeyExists)) {
			run.fatalf("Insert(%d): policy %v, reference %v", k, err1, err2)
		}
	case x < m.insert+m.access:
		run.note("access %d", k)
		run.policy.Access(k)
		run.ref.Access(k)
	case x < m.insert+m.access+m.pin:
		run.note("pin %d", k)
		run.policy.Pin(k)
		run.ref.Pin(k)
	case x < m.insert+m.access+m.pin+m.unpin:
		run.note("unpin %d", k)
		run.policy.Unpin(k)
		run.ref.Unpin(k)
	case x < m.insert+m.access+m.pin+m.unpin+m.remove:
		run.note("remove %d", k)
		run.policy.Remove(k)
		run.ref.Remove(k)
	case x < total-m.advance:
		run.evict()
	default:
		run.advance()
	}
	if a, b := run.policy.Len(), run.ref.Len(); a != b {
		run.fatalf("Len: policy %d, reference %d", a, b)
	}
}

func (run *retentionRun) evict() {
	run.t.Helper()
	now := run.ref.tick()
	checkAgainstCostmodel(run.t, run.ref, now)
	want, wantOK := run.ref.Evict()
	got, gotOK := run.policy.Evict()
	run.note("evict %d %v", got, gotOK)
	run.evicts++
	if gotOK {
		run.hits++
	}
	if got != want || gotOK != wantOK {
		run.fatalf("Evict at %d: policy (%d, %v), exhaustive scan (%d, %v)", now, got, gotOK, want, wantOK)
	}
}

// checkAgainstCostmodel checks that the exact order agrees with
// costmodel.Retention's floating-point values up to their rounding: no
// evictable key has a value clearly below the scan's victim's.
func checkAgainstCostmodel(t testing.TB, ref *scanRetention[int], now int64) {
	t.Helper()
	i := ref.victim(now)
	if i < 0 || ref.entries[i].cost == 0 {
		return
	}
	v := &ref.entries[i]
	vv, err := costmodel.Retention(v.cost, time.Duration(now-v.t))
	require.NoError(t, err)
	for j := range ref.entries {
		e := &ref.entries[j]
		if e.pinned {
			continue
		}
		ev, err := costmodel.Retention(e.cost, time.Duration(now-e.t))
		require.NoError(t, err)
		if ev < vv && (ev < vv*(1-1e-12) || math.IsInf(vv, 1)) && vv > 1e-290 {
			t.Fatalf("victim %d has retention %g but key %d has %g", v.key, vv, e.key, ev)
		}
	}
}

func TestRetentionMatchesExhaustiveScan(t *testing.T) {
	mixes := []struct {
		name string
		mix  retentionOpMix
	}{
		{"cache", retentionOpMix{insert: 30, access: 25, pin: 3, unpin: 3, remove: 4, evict: 20, advance: 15}},
		{"pinned", retentionOpMix{insert: 25, access: 15, pin: 20, unpin: 12, remove: 5, evict: 13, advance: 10}},
		{"churn", retentionOpMix{insert: 40, access: 5, pin: 2, unpin: 2, remove: 2, evict: 40, advance: 9}},
	}
	steps := 10000
	if testing.Short() {
		steps = 3000
	}
	for _, m := range mixes {
		for seed := uint64(1); seed <= 2; seed++ {
			t.Run(fmt.Sprintf("%s/seed%d", m.name, seed), func(t *testing.T) {
				run := newRetentionRun(t, seed, 160, m.mix)
				for range steps {
					run.step()
				}
				require.Greater(t, run.hits, steps/50, "too few victims to mean anything")
			})
		}
	}
}

// TestRetentionMatchesScanOnSeedCosts uses the seed cost model (Pensieve's
// linear cost with the seed's layer and position weights) on kvcache-like
// units instead of a table.
func TestRetentionMatchesScanOnSeedCosts(t *testing.T) {
	cost := costmodel.Recompute{Alpha: 2e-7, Beta: 3e-4, NonAttention: 1e-3}
	clock := &ManualClock{}
	p, err := NewRetention[int](clock, cost)
	require.NoError(t, err)
	ref := newScanRetention[int](clock, cost, bigCompare)
	rng := rand.New(rand.NewPCG(7, 7))
	const layers, chunks, blockTokens = 28, 64, 32
	evictions := 0
	for step := range 20000 {
		k := rng.IntN(400)
		switch x := rng.IntN(100); {
		case x < 35:
			chunk := rng.IntN(chunks)
			e := NewEntry(1)
			e.Unit = costmodel.Unit{Layer: rng.IntN(layers), Layers: layers, Chunk: chunk, Chunks: chunks, ContextTokens: int64(chunk * blockTokens)}
			require.Equal(t, p.Insert(k, e) == nil, ref.Insert(k, e) == nil)
		case x < 60:
			p.Access(k)
			ref.Access(k)
		case x < 67:
			p.Pin(k)
			ref.Pin(k)
		case x < 74:
			p.Unpin(k)
			ref.Unpin(k)
		case x < 90:
			want, wantOK := ref.Evict()
			got, gotOK := p.Evict()
			require.Equal(t, wantOK, gotOK, "step %d", step)
			require.Equal(t, want, got, "step %d", step)
			evictions++
		default:
			clock.Advance(time.Duration(rng.IntN(3)) * time.Duration(rng.Int64N(int64(time.Millisecond))))
		}
	}
	require.Greater(t, evictions, 2000)
}

// TestRetentionSaturatedClock runs the differential test with the clock
// pinned at the largest time the policy represents: every later reading is
// the same instant.
func TestRetentionSaturatedClock(t *testing.T) {
	run := newRetentionRun(t, 99, 64, retentionOpMix{insert: 30, access: 20, pin: 5, unpin: 5, remove: 5, evict: 25, advance: 10})
	for range 500 {
		run.step()
	}
	run.clock.Set(math.MaxInt64)
	for range 2000 {
		run.step()
	}
	require.Equal(t, maxTime, run.policy.now)
}

func TestRetentionNoAllocsInSteadyState(t *testing.T) {
	for _, continuous := range []bool{false, true} {
		t.Run(fmt.Sprintf("continuous=%v", continuous), func(t *testing.T) {
			clock := &ManualClock{}
			tb := &costTable{}
			p, err := NewRetention[int](clock, tb.model())
			require.NoError(t, err)
			rng := rand.New(rand.NewPCG(3, 3))
			const n = 1024
			entries := make([]Entry, 64*n)
			for i := range entries {
				c := float64(1 + rng.IntN(16))
				if continuous {
					c = math.Exp(rng.Float64() * 20)
				}
				entries[i] = tb.entry(c)
			}
			for k := range n {
				require.NoError(t, p.Insert(k, entries[k]))
			}
			next := 0
			cycle := func() {
				clock.Advance(time.Duration(rng.IntN(1000)))
				k := rng.IntN(n)
				p.Access(k)
				p.Pin(k)
				p.Unpin(k)
				v, ok := p.Evict()
				if !ok {
					panic("no victim")
				}
				next = (next + 1) % len(entries)
				if err := p.Insert(v, entries[next]); err != nil {
					panic(err)
				}
			}
			for range 16 * n {
				cycle() // warm up: grow the maps and slices to their steady size
			}
			require.Zero(t, testing.AllocsPerRun(2000, cycle))
		})
	}
}

func TestCompareScaled(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 11))
	floats := []float64{0, 5e-324, 1e-310, 2.2250738585072014e-308, 1e-9, 0.1, 1.0 / 3, 1, 1.5, 2, 3, 1e9, 1e300, math.MaxFloat64}
	for _, f := range append([]float64(nil), floats...) {
		floats = append(floats, math.Nextafter(f, 0))
		if f < math.MaxFloat64 {
			floats = append(floats, math.Nextafter(f, math.Inf(1)))
		}
	}
	ints := []int64{0, 1, 2, 3, 1000, 1 << 53, 1<<53 + 1, 1<<62 + 12345, math.MaxInt64 - 1, math.MaxInt64}
	check := func(c1 float64, x1 int64, c2 float64, x2 int64) {
		t.Helper()
		want := bigCompare(c1, x1, c2, x2)
		if got := compareScaled(c1, x1, c2, x2); got != want {
			t.Fatalf("compareScaled(%g, %d, %g, %d) = %d, want %d", c1, x1, c2, x2, got, want)
		}
	}
	for _, c1 := range floats {
		for _, c2 := range floats {
			for _, x1 := range ints {
				for _, x2 := range ints {
					check(c1, x1, c2, x2)
				}
			}
		}
	}
	for range 200000 {
		c1 := math.Exp(rng.Float64()*80 - 40)
		c2 := c1 * (1 + (rng.Float64()-0.5)*1e-6)
		x1 := rng.Int64N(math.MaxInt64)
		// Make the products nearly or exactly equal.
		x2 := min(int64(float64(x1)*c1/c2), math.MaxInt64)
		if rng.IntN(4) == 0 {
			c2, x2 = c1*2, x1/2
		}
		check(c1, x1, c2, x2)
	}
}

func FuzzCompareScaled(f *testing.F) {
	f.Add(1.0, int64(3), 3.0, int64(1))
	f.Add(5e-324, int64(math.MaxInt64), 1e-300, int64(2))
	f.Add(0.1, int64(30), 0.3, int64(10))
	f.Fuzz(func(t *testing.T, c1 float64, x1 int64, c2 float64, x2 int64) {
		if !(c1 >= 0 && c2 >= 0) || math.IsInf(c1, 0) || math.IsInf(c2, 0) || x1 < 0 || x2 < 0 {
			return
		}
		if got, want := compareScaled(c1, x1, c2, x2), bigCompare(c1, x1, c2, x2); got != want {
			t.Fatalf("compareScaled(%g, %d, %g, %d) = %d, want %d", c1, x1, c2, x2, got, want)
		}
	})
}

// TestFailureTime checks the certificate times directly: w precedes l
// until just before the failure time and not at it, and precedes it to the
// end of time when the failure time is never. A single crossing makes those
// two checks sufficient.
func TestFailureTime(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	seq := uint64(0)
	draw := func(now int64) candidate {
		seq++
		var c float64
		switch rng.IntN(4) {
		case 0:
			c = float64(1 + rng.IntN(4))
		case 1:
			c = math.Exp(rng.Float64()*40 - 20)
		case 2:
			c = math.Nextafter(2, float64(rng.IntN(2))*4)
		default:
			c = []float64{5e-324, 1e300, 1e-300}[rng.IntN(3)]
		}
		return candidate{cost: c, t: now - rng.Int64N(now+1), seq: seq}
	}
	for i := range 100000 {
		now := []int64{0, 1, 1000, 1 << 40, maxTime - 1<<40, maxTime - 1}[rng.IntN(6)]
		if rng.IntN(2) == 0 {
			now = rng.Int64N(maxTime)
		}
		a, b := draw(now), draw(now)
		if rng.IntN(8) == 0 {
			b.t = a.t
		}
		w, l := a, b
		if precedes(&b, &a, now) {
			w, l = b, a
		}
		require.NotEqual(t, precedes(&w, &l, now), precedes(&l, &w, now), "precedes must be strict and total")
		f := failureTime(&w, &l, now)
		require.Greater(t, f, now, "case %d", i)
		if f == neverTime {
			require.True(t, precedes(&w, &l, maxTime), "case %d: w=%+v l=%+v now=%d", i, w, l, now)
			continue
		}
		require.True(t, precedes(&w, &l, f-1), "case %d: w=%+v l=%+v now=%d f=%d", i, w, l, now, f)
		require.False(t, precedes(&w, &l, f), "case %d: w=%+v l=%+v now=%d f=%d", i, w, l, now, f)
	}
}

// FuzzRetention decodes operations from bytes and checks the policy
// against the exhaustive scan.
func FuzzRetention(f *testing.F) {
	f.Add([]byte{0, 1, 2, 0, 2, 3, 5, 0, 6, 9, 5, 0})
	f.Add([]byte{0, 0, 0, 0, 1, 1, 0, 2, 2, 6, 200, 5, 5, 5, 3, 1, 4, 0, 5})
	f.Fuzz(func(t *testing.T, data []byte) {
		tb := &costTable{}
		clock := &ManualClock{}
		p, err := NewRetention[int](clock, tb.model())
		require.NoError(t, err)
		ref := newScanRetention[int](clock, tb.model(), bigCompare)
		costs := []float64{0, 1, 2, 3, 0.5, 1.0 / 3, 1e-300, 1e300, 5e-324, math.Nextafter(1, 2), math.Nextafter(2, 0), 7, 1e9, 1e-9}
		for len(data) >= 2 {
			op, arg := data[0]%7, data[1]
			data = data[2:]
			k := int(arg % 16)
			switch op {
			case 0:
				e := tb.entry(costs[int(arg/16)%len(costs)])
				require.Equal(t, p.Insert(k, e) == nil, ref.Insert(k, e) == nil)
			case 1:
				p.Access(k)
				ref.Access(k)
			case 2:
				p.Pin(k)
				ref.Pin(k)
			case 3:
				p.Unpin(k)
				ref.Unpin(k)
			case 4:
				p.Remove(k)
				ref.Remove(k)
			case 5:
				want, wantOK := ref.Evict()
				got, gotOK := p.Evict()
				require.Equal(t, wantOK, gotOK)
				require.Equal(t, want, got)
			case 6:
				clock.Advance(time.Duration(arg) * time.Duration(arg) * time.Duration(arg) * 1000)
			}
			require.Equal(t, ref.Len(), p.Len())
		}
	})
}
