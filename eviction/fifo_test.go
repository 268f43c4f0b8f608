package eviction_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/eviction/evictiontest"
)

func TestFIFOConformance(t *testing.T) {
	evictiontest.Run(t, func(evictiontest.Config) eviction.Policy[int] { return eviction.NewFIFO[int]() })
}

func TestFIFOOrder(t *testing.T) {
	cases := []struct {
		name, script, victims string
	}{
		{"insertion order", "i1 i2 i3 e e e e", "1 2 3 -"},
		{"access does not reorder", "i1 i2 i3 a1 a1 e e e", "1 2 3"},
		{"pinned key is skipped", "i1 i2 p1 e e", "2 -"},
		{"unpinned key keeps its age", "i1 i2 i3 p1 u1 e e e", "1 2 3"},
		{"parked key keeps its age", "i1 i2 i3 p1 e u1 e e", "2 1 3"},
		{"parked keys come back in insertion order", "i1 i2 i3 i4 p1 p2 e u2 u1 e e e", "3 1 2 4"},
		{"reclaimed key pinned again is skipped", "i1 i2 i3 p1 e u1 p1 e e u1 e", "2 3 - 1"},
		{"pinned in place stays in place", "i1 i2 i3 p2 e u2 e e", "1 2 3"},
		{"pin twice, unpin once", "i1 i2 p1 p1 u1 e e", "1 2"},
		{"remove a parked key", "i1 i2 p1 e r1 e", "2 -"},
		{"remove a reclaimed key", "i1 i2 i3 p1 e u1 r1 e e", "2 3 -"},
		{"reinsert after remove is newest", "i1 i2 r1 i1 e e", "2 1"},
		{"reinsert after evict is newest", "i1 i2 e i1 e e", "1 2 1"},
		{"unknown keys are ignored", "i1 a9 p9 u9 r9 i2 e e e", "1 2 -"},
		{"clock and priorities are ignored", "i1:100 +1s i2:0 e e", "1 2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.victims, runScript(t, eviction.NewFIFO[int](), new(eviction.ManualClock), c.script))
		})
	}
}

func TestFIFODifferential(t *testing.T) {
	mixes := []struct {
		name string
		w    diffOps
	}{
		{"cache", diffOps{insert: 30, access: 30, pin: 3, unpin: 3, remove: 4, evict: 25, advance: 5}},
		{"pinned", diffOps{insert: 25, access: 10, pin: 25, unpin: 15, remove: 5, evict: 20, advance: 0}},
	}
	for _, kind := range indexKinds {
		for _, m := range mixes {
			for seed := range uint64(10) {
				runDifferential(t, "FIFO/"+kind+"/"+m.name, seed, 3000, 64, m.w,
					func(eviction.Clock) eviction.Policy[int] { return must(eviction.NewFIFOWithIndex(newIndex(kind, 63))) },
					&refFIFO{}, plainEntry)
			}
		}
	}
}
