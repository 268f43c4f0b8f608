package layout

import (
	"errors"
	"testing"
)

// FuzzLayout builds a Model and a Layout from arbitrary numbers and uses
// every query on them. It must never panic; whatever succeeds must obey the
// package's contracts, and whatever fails must fail with a sentinel.
func FuzzLayout(f *testing.F) {
	f.Add(28, 16, 8, 1024, 2, 0, 0, 0, 0, 2, 32, 0, 0, 1, 0, 0, int64(4096))
	f.Add(60, 128, 128, 128, 2, 512, 64, 0, 0, 3, 64, 59, 0, 2, 63, 575, int64(1<<20))
	f.Add(7, 4, 2, 16, 1, 0, 0, 3, 64, 1, 8, 2, 1, 1, 7, 15, int64(100))
	f.Add(-1, 0, 0, 0, 0, -1, -1, -1, -1, 0, 3, -1, -1, -1, -1, -1, int64(-1))
	f.Add(1<<40, 1<<30, 1<<30, 1<<40, 8, 0, 0, 1<<20, 0, 1, 1<<30, 1<<39, 1, 0, 5, 5, int64(1<<62))
	f.Add(1<<47, 1, 1, 1, 1, 0, 0, 0, 0, 1, 16, 0, 0, 0, 0, 0, int64(16))                      // absurd layers, tiny products
	f.Add(MaxLayers, MaxHeads, MaxHeads, 1, 1, 1, 0, 0, 0, 3, 16, 5, 0, 2, 3, 0, int64(1<<20)) // MLA at the slice bound
	f.Add(1<<9, 1<<8, 1<<8, 1, 1, 0, 0, 0, 0, 2, 16, 0, 0, 0, 0, 0, int64(16))                 // one slice too many for BSA
	f.Fuzz(func(t *testing.T, layers, qHeads, kvHeads, headDim, elem, latent, rope, cla, window, kind, tokens,
		kvLayer, kvHead, comp, token, dim int, seqTokens int64) {
		m := Model{Layers: layers, QueryHeads: qHeads, KVHeads: kvHeads, HeadDim: headDim, ElemBytes: elem,
			MLALatentDims: latent, MLARopeDims: rope, CLAFactor: cla}
		if window != 0 && layers > 0 && layers <= 4096 {
			// Alternate windowed and full layers, as Gemma-style models do.
			m.Windows = make([]int, layers)
			for i := range m.Windows {
				if i%2 == 0 {
					m.Windows[i] = window
				}
			}
		}
		l, err := New(m, Kind(kind), tokens)
		if err != nil {
			if !isSentinel(err) {
				t.Fatalf("New: error %v matches no sentinel", err)
			}
			if l != nil {
				t.Fatal("New returned a layout with an error")
			}
			return
		}
		slice, off, err := l.Locate(Element{KVLayer: kvLayer, KVHead: kvHead, Component: Component(comp), Token: token, Dim: dim})
		if err == nil {
			s, err := l.Slice(slice)
			if err != nil {
				t.Fatalf("Locate gave slice %d that Slice rejects: %v", slice, err)
			}
			if off < 0 || off >= s.UnitBytes {
				t.Fatalf("offset %d outside unit of %d bytes", off, s.UnitBytes)
			}
			if got, err := l.SliceOf(kvLayer, kvHead); err != nil || got != slice {
				t.Fatalf("SliceOf = %d, %v; Locate said %d", got, err, slice)
			}
		} else if !errors.Is(err, ErrOutOfRange) {
			t.Fatalf("Locate: %v", err)
		}
		if _, err := l.Slice(kvLayer); err != nil && !errors.Is(err, ErrOutOfRange) {
			t.Fatalf("Slice: %v", err)
		}
		if _, _, err := l.HeldBlocks(kvHead, seqTokens); err != nil && !isSentinel(err) {
			t.Fatalf("HeldBlocks: %v", err)
		}
		fp, err := l.Footprint(seqTokens)
		if err != nil && !isSentinel(err) {
			t.Fatalf("Footprint: %v", err)
		}
		if err == nil && (fp.Units < 0 || fp.Bytes < 0) {
			t.Fatalf("negative footprint %+v", fp)
		}
		for _, p := range l.Pools() {
			if p.UnitBytes <= 0 || p.UnitsPerBlock <= 0 {
				t.Fatalf("bad pool %+v", p)
			}
		}
		if l.UnitsPerBlock() > MaxUnitsPerBlock || layers > MaxLayers || qHeads > MaxHeads || elem > MaxElemBytes {
			t.Fatalf("New accepted %+v beyond the maxima (%d units per block)", m, l.UnitsPerBlock())
		}
		// A selection is only built when it stays small.
		if int64(layers)*int64(qHeads) <= 4096 && seqTokens >= 0 && seqTokens <= 1<<16 {
			sel := Selection{Tokens: seqTokens, BlockTokens: max(0, dim%1024), Blocks: make([][][]int64, layers)}
			for i := range sel.Blocks {
				sel.Blocks[i] = make([][]int64, qHeads)
				for q := range sel.Blocks[i] {
					sel.Blocks[i][q] = []int64{int64(token), int64(q)}
				}
			}
			u, err := l.Touched(sel)
			if err != nil && !isSentinel(err) {
				t.Fatalf("Touched: %v", err)
			}
			if err == nil && (u.Units < 0 || u.Bytes < 0) {
				t.Fatalf("negative usage %+v", u)
			}
		}
	})
}

func isSentinel(err error) bool {
	for _, s := range []error{ErrInvalidModel, ErrInvalidLayout, ErrInvalidSelection, ErrOutOfRange, ErrOverflow} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}
