package layout

import (
	"cmp"
	"fmt"
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
	Slice int
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

// appendSliceTouched appends the units of one slice that sel reads.
//
// It first gathers the selected block indices of every (layer, query head)
// pair that reads the slice into dst, sorts and deduplicates them, then
// expands each block into the units it overlaps. Blocks are sorted, so
// their unit ranges only grow and overlap at most in the unit they share at
// a boundary; tracking the last unit emitted removes those repeats. The
// expansion is written after the keys and then moved down over them, so no
// scratch memory beyond dst is needed.
func (l *Layout) appendSliceTouched(dst []UnitRef, slice int, sel Selection, blockTokens int64) ([]UnitRef, error) {
	start := len(dst)
	qlo, qhi := 0, l.model.QueryHeads
	if l.kind == BSA {
		h := slice % l.heads
		qlo, qhi = h*l.group, (h+1)*l.group
	}
	numBlocks := ceilDiv(sel.Tokens, blockTokens)
	var err error
	switch {
	case l.kind == AllLayers && l.groupLayers != nil:
		for _, k := range l.groupLayers[slice] {
			if dst, err = l.appendSelected(dst, slice, k, qlo, qhi, sel, numBlocks); err != nil {
				return dst, err
			}
		}
	default:
		klo, khi := 0, l.kvLayers // AllLayers with a single slice
		switch l.kind {
		case PagedLayer:
			klo, khi = slice, slice+1
		case BSA:
			klo, khi = slice/l.heads, slice/l.heads+1
		}
		for k := klo; k < khi; k++ {
			if dst, err = l.appendSelected(dst, slice, k, qlo, qhi, sel, numBlocks); err != nil {
				return dst, err
			}
		}
	}

	keys := dst[start:]
	slices.SortFunc(keys, func(a, b UnitRef) int { return cmp.Compare(a.Block, b.Block) })
	keys = slices.Compact(keys)
	n := len(keys)
	dst = dst[:start+n]

	unitTokens := int64(l.tokens)
	from := windowStart(l.pools[l.poolOf(slice)].Window, sel.Tokens)
	last := int64(-1)
	for i := range n {
		b := dst[start+i].Block
		lo := b * blockTokens // b < numBlocks, so lo < Tokens: no overflow
		hi := sel.Tokens
		if lo <= sel.Tokens-blockTokens {
			hi = lo + blockTokens
		}
		lo = max(lo, from)
		if lo >= hi {
			continue // the block lies wholly before the window
		}
		u0, u1 := max(lo/unitTokens, last+1), (hi-1)/unitTokens
		for u := u0; u <= u1; u++ {
			dst = append(dst, UnitRef{Slice: slice, Block: u})
		}
		last = max(last, u1)
	}
	moved := copy(dst[start:], dst[start+n:])
	return dst[:start+moved], nil
}

// appendSelected appends, as UnitRef keys of slice, the blocks that query
// heads [qlo, qhi) of every model layer reading KV layer k select.
func (l *Layout) appendSelected(dst []UnitRef, slice, k, qlo, qhi int, sel Selection, numBlocks int64) ([]UnitRef, error) {
	f := l.model.claFactor()
	first := k * f
	last := min(first+f, l.model.Layers)
	for layer := first; layer < last; layer++ {
		for q, blocks := range sel.Blocks[layer][qlo:qhi] {
			for _, b := range blocks {
				if b < 0 || b >= numBlocks {
					return dst, fmt.Errorf("%w: layer %d query head %d selects block %d, sequence has %d",
						ErrOutOfRange, layer, qlo+q, b, numBlocks)
				}
				dst = append(dst, UnitRef{Slice: slice, Block: b})
			}
		}
	}
	return dst, nil
}
