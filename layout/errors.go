package layout

import "errors"

// ErrInvalidModel reports a Model whose geometry is impossible: a
// non-positive size, a size above its maximum (see MaxLayers), query heads
// not a multiple of KV heads, a negative window, or window and MLA fields
// that contradict each other.
var ErrInvalidModel = errors.New("layout: invalid model")

// ErrInvalidLayout reports a bad unit kind or block size passed to New, or a
// Layout that was not built by New.
var ErrInvalidLayout = errors.New("layout: invalid layout")

// ErrInvalidSelection reports a Selection whose shape does not match the
// model (wrong number of layers or query heads) or whose sizes are negative.
var ErrInvalidSelection = errors.New("layout: invalid selection")

// ErrOutOfRange reports an index outside its valid range: a layer, KV layer,
// head, slice, token, dimension, component, selected block, or a negative
// token count.
var ErrOutOfRange = errors.New("layout: index out of range")

// ErrOverflow reports a size that does not fit in an int64 (or an int where
// the API returns one).
var ErrOverflow = errors.New("layout: size overflows int64")
