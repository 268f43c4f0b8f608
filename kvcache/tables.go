package kvcache

import "fmt"

// BlockTable appends to dst the block table of sequence id for slice s: one
// GPU slot id (in the slice's pool) per logical block of the sequence, or -1
// for a block whose unit the sequence does not pin on the GPU now. A
// sequence pins what its last call needs: a dense sequence every block
// except those out of a windowed layer's window, a sparse one the blocks its
// last Append wrote and those its last SparseAccess selected. An unpinned
// unit gives -1 even if it is on the GPU (cached, or pinned by another
// sequence): it may be evicted and its slot reused by any later call, so a
// kernel must not read it. It is the form an attention kernel takes; fetch
// it after the call whose pins the kernel relies on. With enough room in dst
// it allocates nothing.
//
// It returns dst unchanged and an error wrapping ErrUnknownSequence or
// ErrOutOfRange (bad slice).
func (c *Cache) BlockTable(dst []int32, id SeqID, s int) ([]int32, error) {
	if err := c.lock("BlockTable"); err != nil {
		return dst, err
	}
	defer c.mu.Unlock()
	q, err := c.lookup(id)
	if err != nil {
		return dst, err
	}
	if s < 0 || s >= c.numSlices {
		return dst, fmt.Errorf("%w: slice %d not in [0, %d)", ErrOutOfRange, s, c.numSlices)
	}
	start := len(dst)
	p := c.slicePool[s]
	for i, b := range q.blocks {
		// The sequence's own pins: blocks[pinLo[p]:pinHi] in the slice's
		// pool (pinned units are on the GPU).
		if i >= int(q.pinLo[p]) && i < q.pinHi {
			dst = append(dst, c.uSlot[c.ix(c.unit(b, s))])
		} else {
			dst = append(dst, -1)
		}
	}
	for _, u := range q.stepPins {
		if c.sliceOf(u) == s {
			dst[start+int(c.blocks[c.blockOf(u)].index)] = c.uSlot[c.ix(u)]
		}
	}
	return dst, nil
}

// UnitLocation is where one unit of a sequence is.
type UnitLocation struct {
	// Tier is GPU, CPU or Dropped.
	Tier Tier
	// Pool is the slice's pool.
	Pool int
	// Slot is the slot in (Tier, Pool), -1 when dropped.
	Slot int32
	// Pinned reports whether some sequence pins the unit.
	Pinned bool
	// Shared reports whether another sequence holds the block too, or the
	// block is in the prefix tree (reusable by others).
	Shared bool
}

// Locate returns where unit (block, slice) of sequence id is. It returns an
// error wrapping ErrUnknownSequence or ErrOutOfRange.
func (c *Cache) Locate(id SeqID, block, slice int) (UnitLocation, error) {
	if err := c.lock("Locate"); err != nil {
		return UnitLocation{}, err
	}
	defer c.mu.Unlock()
	q, err := c.lookup(id)
	if err != nil {
		return UnitLocation{}, err
	}
	if block < 0 || block >= len(q.blocks) {
		return UnitLocation{}, fmt.Errorf("%w: block %d not in [0, %d)", ErrOutOfRange, block, len(q.blocks))
	}
	if slice < 0 || slice >= c.numSlices {
		return UnitLocation{}, fmt.Errorf("%w: slice %d not in [0, %d)", ErrOutOfRange, slice, c.numSlices)
	}
	b := q.blocks[block]
	u := c.unit(b, slice)
	r := &c.blocks[b]
	return UnitLocation{Tier: c.uTier[c.ix(u)], Pool: int(c.slicePool[slice]), Slot: c.uSlot[c.ix(u)],
		Pinned: c.uPins[c.ix(u)] > 0, Shared: r.node != nil || r.refs > 1}, nil
}

// SequenceTokens appends the tokens of sequence id to dst. It returns dst
// unchanged and an error wrapping ErrUnknownSequence for an id that is not
// live.
func (c *Cache) SequenceTokens(dst []uint32, id SeqID) ([]uint32, error) {
	if err := c.lock("SequenceTokens"); err != nil {
		return dst, err
	}
	defer c.mu.Unlock()
	q, err := c.lookup(id)
	if err != nil {
		return dst, err
	}
	return append(dst, q.tokens...), nil
}

// Len returns the number of tokens of sequence id. It returns an error
// wrapping ErrUnknownSequence for an id that is not live.
func (c *Cache) Len(id SeqID) (int, error) {
	if err := c.lock("Len"); err != nil {
		return 0, err
	}
	defer c.mu.Unlock()
	q, err := c.lookup(id)
	if err != nil {
		return 0, err
	}
	return len(q.tokens), nil
}
