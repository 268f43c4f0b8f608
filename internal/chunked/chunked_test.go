package chunked

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"unsafe"
)

// TestArrayMatchesSlice drives an Array and a plain slice with the same
// random pushes, truncations and writes, and compares every element.
func TestArrayMatchesSlice(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var a Array[uint64]
	var ref []uint64
	for step := range 3000 {
		switch op := rng.IntN(10); {
		case op < 7:
			for range rng.IntN(2 * Len) {
				v := rng.Uint64()
				if i := a.Push(v); i != len(ref) {
					t.Fatalf("step %d: Push returned %d, want %d", step, i, len(ref))
				}
				ref = append(ref, v)
			}
		case op < 9 && len(ref) > 0:
			i := rng.IntN(len(ref))
			v := rng.Uint64()
			*a.At(i) = v
			ref[i] = v
		default:
			n := rng.IntN(len(ref) + 1)
			a.Truncate(n)
			ref = ref[:n]
		}
		if a.Len() != len(ref) {
			t.Fatalf("step %d: Len %d, want %d", step, a.Len(), len(ref))
		}
		for range 16 {
			if len(ref) == 0 {
				break
			}
			if i := rng.IntN(len(ref)); *a.At(i) != ref[i] {
				t.Fatalf("step %d: element %d is %d, want %d", step, i, *a.At(i), ref[i])
			}
		}
	}
	n := 0
	a.All(func(i int, v *uint64) bool {
		if *v != ref[i] {
			t.Fatalf("All: element %d is %d, want %d", i, *v, ref[i])
		}
		n++
		return true
	})
	if n != len(ref) {
		t.Fatalf("All visited %d elements, want %d", n, len(ref))
	}
}

// TestSpan checks that Span gives the elements of one chunk as a slice
// that aliases the Array, and nil for a range that crosses chunks.
func TestSpan(t *testing.T) {
	var a Array[int]
	for i := range 3 * Len {
		a.Push(i)
	}
	for _, tc := range []struct{ i, n int }{{0, Len}, {Len, 32}, {Len + 224, 32}, {2*Len + 5, 7}, {0, 0}} {
		sp := a.Span(tc.i, tc.n)
		if len(sp) != tc.n || cap(sp) != tc.n {
			t.Fatalf("Span(%d, %d): len %d cap %d", tc.i, tc.n, len(sp), cap(sp))
		}
		for k, v := range sp {
			if v != tc.i+k {
				t.Fatalf("Span(%d, %d)[%d] = %d", tc.i, tc.n, k, v)
			}
		}
		if tc.n > 0 {
			sp[0] = -1
			if *a.At(tc.i) != -1 {
				t.Fatalf("Span(%d, %d): a write through it did not reach the Array", tc.i, tc.n)
			}
			*a.At(tc.i) = tc.i
		}
	}
	for _, tc := range []struct{ i, n int }{{Len - 1, 2}, {Len + 200, 57}, {0, Len + 1}} {
		if sp := a.Span(tc.i, tc.n); sp != nil {
			t.Fatalf("Span(%d, %d) crosses a chunk but returned %d elements", tc.i, tc.n, len(sp))
		}
	}
}

// TestArrayElementsStay checks that a pointer to an element stays valid
// and points at the element however much the Array grows.
func TestArrayElementsStay(t *testing.T) {
	var a Array[int]
	a.Push(7)
	p := a.At(0)
	for i := range 3 * Len * DirLen {
		a.Push(i)
	}
	*p = 9
	if *a.At(0) != 9 {
		t.Fatalf("element 0 moved")
	}
}

// TestSparseMatchesMap drives a Sparse and a map with the same random
// writes, near and far apart, and compares reads.
func TestSparseMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var s Sparse[int32]
	ref := map[uint64]int32{}
	idx := func() uint64 {
		switch rng.IntN(3) {
		case 0:
			return rng.Uint64N(4 * Len)
		case 1:
			return rng.Uint64N(Len * DirLen * 3)
		}
		return rng.Uint64N(1 << 31)
	}
	for step := range 20000 {
		i := idx()
		if rng.IntN(2) == 0 {
			v := rng.Int32()
			*s.Ref(i) = v
			ref[i] = v
		}
		if got := s.Get(i); got != ref[i] {
			t.Fatalf("step %d: element %d is %d, want %d", step, i, got, ref[i])
		}
	}
	seen := 0
	s.All(func(i uint64, v int32) bool {
		if v != ref[i] {
			t.Fatalf("All: element %d is %d, want %d", i, v, ref[i])
		}
		if v != 0 {
			seen++
		}
		return true
	})
	want := 0
	for _, v := range ref {
		if v != 0 {
			want++
		}
	}
	if seen != want {
		t.Fatalf("All saw %d non-zero elements, want %d", seen, want)
	}
}

// TestPushAllocatesOneChunk checks the point of the package: no Push
// allocates more than one chunk, one directory block and the top level's
// growth (a pointer per directory block), whatever the Array holds.
func TestPushAllocatesOneChunk(t *testing.T) {
	elem := int(unsafe.Sizeof([3]uint64{}))
	var ms runtime.MemStats
	// The bytes each chunk-opening Push allocated, the least of three
	// runs: the runtime allocates a little of its own now and then (more
	// under -race), counted in TotalAlloc, and that noise only adds.
	var least []uint64
	var a Array[[3]uint64]
	for run := range 3 {
		a = Array[[3]uint64]{}
		k := 0
		for i := range 4 * Len * DirLen {
			if i&(Len-1) != 0 {
				a.Push([3]uint64{})
				continue
			}
			runtime.ReadMemStats(&ms)
			before := ms.TotalAlloc
			a.Push([3]uint64{})
			runtime.ReadMemStats(&ms)
			if d := ms.TotalAlloc - before; run == 0 {
				least = append(least, d)
			} else {
				least[k] = min(least[k], d)
			}
			k++
		}
	}
	worst := slices.Max(least)
	// (4 KiB of slack for the runtime's own allocations all the same.)
	limit := uint64(Len*elem + DirLen*8 + 2*8*len(a.top) + 4096)
	if worst > limit {
		t.Fatalf("a Push allocated %d bytes, limit %d (chunk %d, directory block %d)", worst, limit, Len*elem, DirLen*8)
	}
}
