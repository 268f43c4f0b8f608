package layout

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
)

// Selection is the sparse block selection of one decode step (block-sparse
// attention, MoBA): for every model layer and query head, the blocks of the
// sequence that head attends to.
//
// The zero Selection is invalid for any model (it has no layers). A
// Selection is read, never modified, by the methods that take it.
type Selection struct {
	// Tokens is the length of the sequence at this step, in tokens. The
	// last block may be partial; selected blocks past the end are out of
	// range.
	Tokens int64
	// BlockTokens is the size of a selection block in tokens (the MoBA
	// block size). 0 means the layout's TokensPerUnit. Any positive size
	// works: a selection block touches every unit that holds one of its
	// tokens, so a 512-token selection block over 32-token pages touches 16
	// pages, and a 16-token selection block over 64-token units touches the
	// one unit that contains it.
	BlockTokens int
	// Blocks[layer][queryHead] lists the selection blocks that query head
	// selects in that model layer, as indices 0 <= b < ceil(Tokens /
	// BlockTokens), in any order, duplicates allowed. len(Blocks) must equal
	// Model.Layers and every len(Blocks[layer]) must equal
	// Model.QueryHeads; an empty list selects nothing.
	Blocks [][][]int64
}

// UnitRef names one unit of a sequence: the unit of slice Slice that holds
// token block Block (tokens Block×TokensPerUnit up to
// (Block+1)×TokensPerUnit-1).
type UnitRef struct {
	// Slice is the slice index, as for Layout.Slice.
	Slice int
	// Block is the index of the token block in the sequence.
	Block int64
}

// AppendTouched appends to dst every unit that sel reads and returns the
// extended slice. A unit is read if any query head that reads its KV selects
// a block overlapping it: for PagedLayer and AllLayers the union over all
// query heads of the unit's layers; for BSA, per KV head, the union over the
// query heads of its GQA group (all query heads under MLA). Under CLA the
// union also runs over the model layers that share a KV layer. A windowed
// slice reads only the units that overlap its window (see HeldBlocks).
//
// Each unit appears once: the result counts what must be resident for the
// step, not how often kernels re-read it. Units come ordered by slice, then
// block. With enough capacity in dst it allocates nothing. On error it
// returns dst unchanged and an error matching ErrInvalidSelection (shape or
// sizes) or ErrOutOfRange (a selected block outside the sequence).
func (l *Layout) AppendTouched(dst []UnitRef, sel Selection) ([]UnitRef, error) {
	if !l.ready() {
		return dst, errNotBuilt()
	}
	blockTokens, err := l.checkSelection(sel)
	if err != nil {
		return dst, err
	}
	orig := len(dst)
	for slice := range l.numSlices {
		if dst, err = l.appendSliceTouched(dst, slice, sel, blockTokens); err != nil {
			return dst[:orig], err
		}
	}
	return dst, nil
}

// Touched returns the number and bytes of the units AppendTouched would
// list for sel, with the same errors. It allocates a scratch list; use
// AppendTouched with a reused buffer on a hot path.
func (l *Layout) Touched(sel Selection) (Usage, error) {
	refs, err := l.AppendTouched(nil, sel)
	if err != nil {
		return Usage{}, err
	}
	return l.usageOf(refs)
}

// usageOf sums the unit bytes of refs produced by AppendTouched.
func (l *Layout) usageOf(refs []UnitRef) (Usage, error) {
	u := Usage{Units: int64(len(refs))}
	for _, r := range refs {
		var ok bool
		if u.Bytes, ok = add64(u.Bytes, l.pools[l.poolOf(r.Slice)].UnitBytes); !ok {
			return Usage{}, fmt.Errorf("%w: bytes of %d touched units", ErrOverflow, len(refs))
		}
	}
	return u, nil
}

// poolOf returns the pool of a slice index already checked.
func (l *Layout) poolOf(slice int) int {
	switch {
	case l.kind == AllLayers:
		return slice
	case l.kvPool == nil:
		return 0
	case l.kind == BSA:
		return l.kvPool[slice/l.heads]
	default:
		return l.kvPool[slice]
	}
}

// checkSelection validates the shape of sel and returns its block size.
// Block indices are checked while they are read.
func (l *Layout) checkSelection(sel Selection) (int64, error) {
	if sel.Tokens < 0 {
		return 0, fmt.Errorf("%w: tokens %d must not be negative", ErrInvalidSelection, sel.Tokens)
	}
	if sel.BlockTokens < 0 {
		return 0, fmt.Errorf("%w: block tokens %d must not be negative", ErrInvalidSelection, sel.BlockTokens)
	}
	if len(sel.Blocks) != l.model.Layers {
		return 0, fmt.Errorf("%w: %d layers selected for a model of %d", ErrInvalidSelection, len(sel.Blocks), l.model.Layers)
	}
	for layer, heads := range sel.Blocks {
		if len(heads) != l.model.QueryHeads {
			return 0, fmt.Errorf("%w: layer %d selects for %d query heads, model has %d", ErrInvalidSelection, layer, len(heads), l.model.QueryHeads)
		}
	}
	if sel.BlockTokens == 0 {
		return int64(l.tokens), nil
	}
	return int64(sel.BlockTokens), nil
}

// bitmapWords sizes the on-stack bitmap that deduplicates selected blocks:
// sequences of up to 64×64 = 4096 selection blocks (2M tokens in 512-token
// MoBA blocks) use it; longer ones sort instead.
const bitmapWords = 64

// appendSliceTouched appends the units of one slice that sel reads.
//
// It first deduplicates the selected blocks of every (layer, query head)
// pair that reads the slice, then expands each block, in increasing order,
// into the units it overlaps. Short sequences deduplicate in a bitmap on the
// stack; long ones gather the blocks into dst, sort and compact them, write
// the expansion after them and move it down, so no memory beyond dst is
// needed either way.
func (l *Layout) appendSliceTouched(dst []UnitRef, slice int, sel Selection, blockTokens int64) ([]UnitRef, error) {
	numBlocks := ceilDiv(sel.Tokens, blockTokens)
	x := unitExpander{
		slice:       slice,
		tokens:      sel.Tokens,
		blockTokens: blockTokens,
		unitTokens:  int64(l.tokens),
		from:        windowStart(l.pools[l.poolOf(slice)].Window, sel.Tokens),
		last:        -1,
	}
	if numBlocks <= bitmapWords*64 {
		var seen [bitmapWords]uint64
		err := l.eachSelected(slice, sel, numBlocks, func(b int64) { seen[b>>6] |= 1 << (b & 63) })
		if err != nil {
			return dst, err
		}
		for w, word := range seen[:ceilDiv(numBlocks, 64)] {
			for word != 0 {
				b := int64(w)<<6 | int64(bits.TrailingZeros64(word))
				word &= word - 1
				dst = x.appendUnits(dst, b)
			}
		}
		return dst, nil
	}

	start := len(dst)
	err := l.eachSelected(slice, sel, numBlocks, func(b int64) { dst = append(dst, UnitRef{Slice: slice, Block: b}) })
	if err != nil {
		return dst, err
	}
	keys := dst[start:]
	slices.SortFunc(keys, func(a, b UnitRef) int { return cmp.Compare(a.Block, b.Block) })
	n := len(slices.Compact(keys))
	dst = dst[:start+n]
	for i := range n {
		dst = x.appendUnits(dst, dst[start+i].Block)
	}
	moved := copy(dst[start:], dst[start+n:])
	return dst[:start+moved], nil
}

// eachSelected calls visit for every block selected by a (model layer,
// query head) pair whose KV lives in slice, after checking it is in
// [0, numBlocks).
func (l *Layout) eachSelected(slice int, sel Selection, numBlocks int64, visit func(b int64)) error {
	qlo, qhi := 0, l.model.QueryHeads
	if l.kind == BSA {
		h := slice % l.heads
		qlo, qhi = h*l.group, (h+1)*l.group
	}
	var kvLayers []int // the KV layers of the slice, or nil for the range [klo, khi)
	klo, khi := 0, l.kvLayers
	switch l.kind {
	case AllLayers:
		if l.groupLayers != nil {
			kvLayers = l.groupLayers[slice]
		}
	case PagedLayer:
		klo, khi = slice, slice+1
	case BSA:
		klo, khi = slice/l.heads, slice/l.heads+1
	}
	if kvLayers != nil {
		klo, khi = 0, len(kvLayers)
	}
	f := l.model.claFactor()
	for i := klo; i < khi; i++ {
		k := i
		if kvLayers != nil {
			k = kvLayers[i]
		}
		first := k * f // < Layers, so no overflow
		for layer := first; layer < min(first+f, l.model.Layers); layer++ {
			for q, blocks := range sel.Blocks[layer][qlo:qhi] {
				for _, b := range blocks {
					if b < 0 || b >= numBlocks {
						return fmt.Errorf("%w: layer %d query head %d selects block %d, sequence has %d",
							ErrOutOfRange, layer, qlo+q, b, numBlocks)
					}
					visit(b)
				}
			}
		}
	}
	return nil
}

// unitExpander turns selection blocks, fed in increasing order, into the
// units of one slice they overlap. The unit ranges of increasing blocks
// only move forward and can share at most a boundary unit, so remembering
// the last unit emitted removes every repeat.
type unitExpander struct {
	slice                           int
	tokens, blockTokens, unitTokens int64
	from                            int64 // first token inside the slice's window
	last                            int64 // last unit appended, -1 before any
}

func (x *unitExpander) appendUnits(dst []UnitRef, b int64) []UnitRef {
	lo := b * x.blockTokens // b < ceil(tokens/blockTokens), so lo < tokens: no overflow
	hi := x.tokens
	if lo <= x.tokens-x.blockTokens {
		hi = lo + x.blockTokens
	}
	lo = max(lo, x.from)
	if lo >= hi {
		return dst // the block lies wholly before the window
	}
	u0, u1 := max(lo/x.unitTokens, x.last+1), (hi-1)/x.unitTokens
	for u := u0; u <= u1; u++ {
		dst = append(dst, UnitRef{Slice: x.slice, Block: u})
	}
	x.last = max(x.last, u1)
	return dst
}
