package kvcache

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestTokenListMatchesSlice checks tokenList against a plain slice under
// random appends, truncations and clones, for several block sizes.
func TestTokenListMatchesSlice(t *testing.T) {
	for _, B := range []int{1, 3, 16, 512, 5000} {
		rng := rand.New(rand.NewPCG(uint64(B), 7))
		l := newTokenList(B)
		var ref []uint32
		next := uint32(0)
		for step := range 400 {
			switch op := rng.IntN(10); {
			case op < 6:
				n := rng.IntN(3 * tokenChunk)
				if rng.IntN(3) > 0 {
					n = rng.IntN(40)
				}
				add := make([]uint32, n)
				for i := range add {
					next++
					add[i] = next
				}
				l.append(add...)
				ref = append(ref, add...)
			case op < 9:
				n := rng.IntN(len(ref) + 1)
				l.truncate(n)
				ref = ref[:n]
			default:
				l = l.clone()
			}
			if l.len() != len(ref) {
				t.Fatalf("B=%d step %d: len %d, want %d", B, step, l.len(), len(ref))
			}
			if got := l.appendTo(nil); !slices.Equal(got, ref) {
				t.Fatalf("B=%d step %d: tokens differ", B, step)
			}
			for range 8 {
				if len(ref) == 0 {
					break
				}
				j := rng.IntN(len(ref))
				if l.at(j) != ref[j] {
					t.Fatalf("B=%d step %d: token %d is %d, want %d", B, step, j, l.at(j), ref[j])
				}
				i := j / B
				if (i+1)*B <= len(ref) && !slices.Equal(l.span(i*B, (i+1)*B), ref[i*B:(i+1)*B]) {
					t.Fatalf("B=%d step %d: block %d differs", B, step, i)
				}
			}
		}
		if l.per%B != 0 {
			t.Fatalf("B=%d: chunks of %d tokens split blocks", B, l.per)
		}
	}
}

// TestSeqTablesMatchReference checks seqTables against plain per-slice
// slices under random resizes (mostly one block more, as decoding does,
// sometimes a jump or a cut) and sets, and that the tables move to larger
// arrays a piece at a time: no resize that fits the current arrays copies
// more than tableStep entries.
func TestSeqTablesMatchReference(t *testing.T) {
	for _, slices_ := range []int{1, 3, 28, 224} {
		rng := rand.New(rand.NewPCG(uint64(slices_), 11))
		var tb seqTables
		ref := make([][]int32, slices_)
		n := 0
		for step := range 3000 {
			prev := n
			switch op := rng.IntN(100); {
			case op < 85:
				n++
			case op < 92:
				n += rng.IntN(3000)
			default:
				n = rng.IntN(n + 1)
			}
			growing := tb.next != nil
			done := 0 // entries in the next arrays before the resize
			if growing {
				done = tb.moved*prev + tb.part
			}
			var first *int32
			room := 0
			if tb.cur != nil {
				first, room = &tb.cur[0][:1][0], cap(tb.cur[0])
			}
			tb.resize(slices_, n)
			for sl := range ref {
				for len(ref[sl]) < n {
					ref[sl] = append(ref[sl], -1)
				}
				ref[sl] = ref[sl][:n]
			}
			copied := 0
			switch {
			case tb.next != nil && growing:
				copied = tb.moved*prev + tb.part - done
			case tb.next != nil:
				copied = tb.moved*prev + tb.part
			case first != nil && &tb.cur[0][:1][0] != first:
				copied = slices_*prev - done // switched to the larger arrays
			}
			if n <= room && copied > tableStep {
				t.Fatalf("slices %d step %d: a resize from %d to %d blocks copied %d entries", slices_, step, prev, n, copied)
			}
			for range 5 {
				if n == 0 {
					break
				}
				sl, i, v := rng.IntN(slices_), rng.IntN(n), int32(rng.IntN(1000))
				tb.set(sl, i, v)
				ref[sl][i] = v
			}
			for sl := range slices_ {
				if got := tb.table(sl, n); !slices.Equal(got, ref[sl]) && !(n == 0 && len(got) == 0) {
					t.Fatalf("slices %d step %d: table %d differs", slices_, step, sl)
				}
			}
		}
	}
}

// TestMaxTokensSizesTables checks Request.MaxTokens: a sequence acquired
// with it decodes up to that length without its block tables moving, and
// a negative one is refused, naming the value.
func TestMaxTokensSizesTables(t *testing.T) {
	l := seedPaged(t, 16)
	c, err := New(Config{Layout: l, Tiers: GPUAndCPU(Capacity{Units: 28 * 2000}, Capacity{})})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Acquire(Request{Tokens: seqTokens(32, 0), MaxTokens: -5})
	if !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), "-5") {
		t.Fatalf("MaxTokens -5: got %v, want ErrInvalidRequest naming -5", err)
	}
	for _, hint := range []int{0, 16 << 10} {
		p, err := c.Acquire(Request{Tokens: seqTokens(1024, uint32(hint)), MaxTokens: hint})
		if err != nil {
			t.Fatal(err)
		}
		first := &c.seqs[p.Seq].tables.cur[0][:1][0]
		moved := false
		for i := range 15 << 10 {
			if _, err := c.Append(p.Seq, uint32(i)); err != nil {
				t.Fatal(err)
			}
			moved = moved || &c.seqs[p.Seq].tables.cur[0][:1][0] != first || c.seqs[p.Seq].tables.next != nil
		}
		if moved != (hint == 0) {
			t.Fatalf("MaxTokens %d: tables moved %v while decoding to %d tokens", hint, moved, 16<<10-1024)
		}
		if err := c.Release(p.Seq); err != nil {
			t.Fatal(err)
		}
	}
}
