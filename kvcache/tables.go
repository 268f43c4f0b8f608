package kvcache

import "fmt"

// A sequence keeps its block tables itself, one per slice, and every
// operation on it updates the entries it changes (syncTables, mergeBlock):
// so a decode step's tables cost nothing to produce, and BlockTables hands
// out views of them instead of building copies whose size grows with the
// context.

// syncTables brings the block tables of s up to date after a committed
// transaction on it: one entry per block of s in every slice, the units it
// stopped pinning reading -1 (unless it still pins them another way: a
// unit of the blocks its last Append wrote that a step also selected), the
// units it pins newly reading their GPU slots.
func (c *Cache) syncTables(s *sequence) {
	n := len(s.blocks)
	s.tables.resize(c.geom.slices, n)
	span := s.span()
	for _, u := range c.tx.unpins {
		i, sl := int(c.units.rec(u).index), c.units.slice(u)
		if i >= n {
			continue // cut off by a Truncate
		}
		if s.blocks[i] == c.units.block(u) && span.pins(i, int(c.geom.slicePool[sl])) {
			continue // pinned by the sequence's blocks still
		}
		s.tables.set(sl, i, -1)
	}
	for k := range c.tx.needs {
		nd := &c.tx.needs[k]
		s.tables.set(c.units.slice(nd.u), int(c.units.rec(nd.u).index), nd.slot)
	}
}

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
// it allocates nothing. BlockTables gives every table of a whole batch
// under one lock acquisition, without copying.
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
	if s < 0 || s >= c.geom.slices {
		return dst, fmt.Errorf("%w: slice %d not in [0, %d)", ErrOutOfRange, s, c.geom.slices)
	}
	return append(dst, q.table(s)...), nil
}

// table returns the block table of slice sl of s.
func (s *sequence) table(sl int) []int32 {
	return s.tables.table(sl, len(s.blocks))
}

// StepTables holds the block tables of a batch of sequences, as
// Cache.BlockTables fills them: Table(i, s) is the table of slice s of the
// i-th sequence. Reuse one across steps: it keeps its capacity, so a step
// allocates nothing.
//
// The tables are read-only views of the cache's own: an entry changes when
// an operation on that sequence changes its pins, so read each table (or
// copy it into a kernel's argument) after the step's operations on its
// sequence and before the next one. Writing an entry corrupts the cache's
// tables.
type StepTables struct {
	slices int
	seqs   []stepTable
}

// stepTable is one sequence's tables in a StepTables: its tables per
// slice, of n blocks.
type stepTable struct {
	tables [][]int32
	n      int
}

// Len returns the number of sequences of the batch.
func (t *StepTables) Len() int { return len(t.seqs) }

// Table returns the block table of slice s of the i-th sequence of the
// batch (see BlockTable), or nil when i or s is out of range.
func (t *StepTables) Table(i, s int) []int32 {
	if i < 0 || s < 0 || s >= t.slices || i >= len(t.seqs) || t.seqs[i].tables == nil {
		return nil
	}
	return t.seqs[i].tables[s][:t.seqs[i].n]
}

// BlockTables fills t with the block tables of every slice of each
// sequence of ids, in order, under one acquisition of the cache's lock: a
// server calls it once per scheduling step, after the step's Appends (or
// SparseAccess calls), instead of BlockTable once per sequence and slice.
// It copies no entry (see StepTables), so its cost is a few nanoseconds per
// sequence whatever the context and the number of slices.
//
// It returns an error wrapping ErrUnknownSequence, naming the first id that
// is not live; t is then empty.
func (c *Cache) BlockTables(t *StepTables, ids ...SeqID) error {
	if err := c.lock("BlockTables"); err != nil {
		return err
	}
	defer c.mu.Unlock()
	t.slices = c.geom.slices
	t.seqs = t.seqs[:0]
	for _, id := range ids {
		q, err := c.lookup(id)
		if err != nil {
			clear(t.seqs)
			t.seqs = t.seqs[:0]
			return err
		}
		t.seqs = append(t.seqs, stepTable{tables: q.tables.cur, n: len(q.blocks)})
	}
	return nil
}

// UnitLocation is where one unit of a sequence is.
type UnitLocation struct {
	// Tier is the unit's tier, or Dropped.
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
	if slice < 0 || slice >= c.geom.slices {
		return UnitLocation{}, fmt.Errorf("%w: slice %d not in [0, %d)", ErrOutOfRange, slice, c.geom.slices)
	}
	b := q.blocks[block]
	u := c.units.id(b, slice)
	r := c.units.blk(b)
	return UnitLocation{Tier: c.units.tierOf(u), Pool: c.geom.poolOfSlice(slice), Slot: c.units.slotOf(u),
		Pinned: c.units.pinsOf(u) > 0, Shared: r.node != nil || r.refs > 1}, nil
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
	return q.tokens.appendTo(dst), nil
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
	return q.tokens.len(), nil
}
