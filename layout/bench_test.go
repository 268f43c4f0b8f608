package layout

import (
	"testing"
)

// sink keeps results alive so the compiler cannot drop the work.
var sink int64

func BenchmarkLocate(b *testing.B) {
	for _, kind := range Kinds() {
		b.Run(kind.String(), func(b *testing.B) {
			l := mustNew(b, SeedModel(), kind, 32)
			b.ReportAllocs()
			var e Element
			for i := 0; b.Loop(); i++ {
				e.KVLayer, e.KVHead, e.Component, e.Token, e.Dim = i%28, i%8, Component(i&1), i%32, i%1024
				_, off, err := l.Locate(e)
				if err != nil {
					b.Fatal(err)
				}
				sink += off
			}
		})
	}
}

// BenchmarkStridesInline is the baseline for Locate: the same offset from
// precomputed strides with no range checks, as a kernel would compute it.
func BenchmarkStridesInline(b *testing.B) {
	st := mustNew(b, SeedModel(), PagedLayer, 32).Strides()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		sink += int64(i&1)*st.Component + int64(i%8)*st.Head + int64(i%32)*st.Token + int64(i%1024)*st.Dim
	}
}

type touchCase struct {
	name  string
	model Model
	kind  Kind
	unit  int
	sel   Selection
}

func touchCases() []touchCase {
	seed := SeedModel()
	big := Llama31_405B()
	return []touchCase{
		{"seed/paged32", seed, PagedLayer, 32, worstCaseSelection(seed, 4096, 512, 3)},
		{"seed/bsa512", seed, BSA, 512, worstCaseSelection(seed, 4096, 512, 3)},
		{"405B-128k/paged64", big, PagedLayer, 64, worstCaseSelection(big, 128<<10, 4096, 8)},
		{"405B-128k/bsa4096", big, BSA, 4096, worstCaseSelection(big, 128<<10, 4096, 8)},
	}
}

func BenchmarkAppendTouched(b *testing.B) {
	for _, c := range touchCases() {
		b.Run(c.name, func(b *testing.B) {
			l := mustNew(b, c.model, c.kind, c.unit)
			buf, err := l.AppendTouched(nil, c.sel)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				buf, _ = l.AppendTouched(buf[:0], c.sel)
			}
			sink += int64(len(buf))
			b.ReportMetric(float64(len(buf)), "units")
		})
	}
}

// BenchmarkTouchedMapBaseline is the baseline for AppendTouched: the obvious
// implementation that expands every selected block into its units and
// deduplicates them in a map, with the same result.
func BenchmarkTouchedMapBaseline(b *testing.B) {
	for _, c := range touchCases() {
		b.Run(c.name, func(b *testing.B) {
			l := mustNew(b, c.model, c.kind, c.unit)
			want, err := l.AppendTouched(nil, c.sel)
			if err != nil {
				b.Fatal(err)
			}
			if got := touchedByMap(l, c.sel); len(got) != len(want) {
				b.Fatalf("baseline found %d units, AppendTouched %d", len(got), len(want))
			}
			b.ReportAllocs()
			for b.Loop() {
				sink += int64(len(touchedByMap(l, c.sel)))
			}
		})
	}
}

func touchedByMap(l *Layout, sel Selection) map[UnitRef]struct{} {
	m := l.model
	bt := int64(sel.BlockTokens)
	unit := int64(l.tokens)
	group := m.QueryHeads / m.StoredHeads()
	set := map[UnitRef]struct{}{}
	for layer, heads := range sel.Blocks {
		k, _ := m.KVLayerOf(layer)
		for q, blocks := range heads {
			slice, _ := l.SliceOf(k, q/group)
			for _, blk := range blocks {
				lo, hi := blk*bt, min((blk+1)*bt, sel.Tokens)
				for u := lo / unit; u <= (hi-1)/unit; u++ {
					set[UnitRef{slice, u}] = struct{}{}
				}
			}
		}
	}
	return set
}

func BenchmarkFootprint(b *testing.B) {
	m := Llama31_405B()
	m.Windows = make([]int, m.Layers)
	for i := range m.Windows {
		if i%4 != 3 {
			m.Windows[i] = 8192
		}
	}
	l := mustNew(b, m, BSA, 64)
	b.ReportAllocs()
	for b.Loop() {
		u, _ := l.Footprint(1 << 20)
		sink += u.Bytes
	}
}
