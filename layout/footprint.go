package layout

import "fmt"

// Usage counts units and their bytes.
type Usage struct {
	// Units is the number of units.
	Units int64
	// Bytes is the sum of their sizes.
	Bytes int64
}

// HeldBlocks returns the token blocks that slice i must hold for a sequence
// of tokens tokens: block indices first <= b < end. end is
// ceil(tokens/TokensPerUnit()). For a slice with a window w, the cache needs
// only the last w tokens, positions [tokens-w, tokens); it keeps every
// block that holds at least one of them, because a paged cache frees a block
// only when all of its tokens have left the window. So first is
// (tokens-w)/TokensPerUnit() when tokens > w, else 0, and a windowed slice
// holds at most ceil(w/TokensPerUnit())+1 blocks (one more than w alone
// needs when the window does not start on a block boundary). It returns an
// error matching ErrOutOfRange for a bad slice or negative tokens.
func (l *Layout) HeldBlocks(i int, tokens int64) (first, end int64, err error) {
	s, err := l.Slice(i)
	if err != nil {
		return 0, 0, err
	}
	if tokens < 0 {
		return 0, 0, fmt.Errorf("%w: tokens %d must not be negative", ErrOutOfRange, tokens)
	}
	first, end = l.heldBlocks(s.Window, tokens)
	return first, end, nil
}

// heldBlocks is HeldBlocks for a window and tokens >= 0.
func (l *Layout) heldBlocks(window int, tokens int64) (first, end int64) {
	t := int64(l.tokens)
	return windowStart(window, tokens) / t, ceilDiv(tokens, t)
}

// windowStart is the first token position a layer with this window still
// reads in a sequence of tokens tokens.
func windowStart(window int, tokens int64) int64 {
	if window == 0 || tokens <= int64(window) {
		return 0
	}
	return tokens - int64(window)
}

// Footprint returns the units and bytes l holds for one sequence of tokens
// tokens: every slice holds the blocks HeldBlocks gives, so full-attention
// slices hold ceil(tokens/TokensPerUnit()) units and windowed slices hold at
// most the blocks that overlap their window. It returns an error matching
// ErrOutOfRange for negative tokens, ErrOverflow when the total does
// not fit in an int64, and ErrInvalidLayout for a Layout not built by New.
func (l *Layout) Footprint(tokens int64) (Usage, error) {
	if !l.ready() {
		return Usage{}, errNotBuilt()
	}
	if tokens < 0 {
		return Usage{}, fmt.Errorf("%w: tokens %d must not be negative", ErrOutOfRange, tokens)
	}
	var u Usage
	for _, p := range l.pools {
		first, end := l.heldBlocks(p.Window, tokens)
		units, ok1 := mul64(end-first, int64(p.UnitsPerBlock))
		bytes, ok2 := mul64(units, p.UnitBytes)
		var ok3, ok4 bool
		u.Units, ok3 = add64(u.Units, units)
		u.Bytes, ok4 = add64(u.Bytes, bytes)
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return Usage{}, fmt.Errorf("%w: footprint of %d tokens", ErrOverflow, tokens)
		}
	}
	return u, nil
}
