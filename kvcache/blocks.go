package kvcache

import (
	"time"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/radix"
)

// blockRec is the cache's record of one token block: its node in the prefix
// tree (nil for a sequence's private block, which is partial or a
// copy-on-write copy), how many sequences hold it, how many of its units
// hold bytes, and what the policies are told about it.
//
// The units of block b are UnitID(gen<<genShift | b<<sliceShift | slice)
// (see unitIDs); their state lives in the flat tables of Cache (uTier,
// uSlot, uPins), indexed by the UnitID without its generation (ix).
type blockRec struct {
	node *radix.Node[int32]
	// refs counts the sequences whose block list holds this block, of
	// which sparseRefs are sparse: a sparse sequence brings single units
	// back (SparseAccess), so a CPU copy of one of the block's units stays
	// useful while another unit has no bytes (see shouldOffload).
	refs, sparseRefs int32
	// held counts units on the GPU or the CPU (with bytes).
	held int32
	// txDrops counts the block's units the running transaction has chosen
	// to drop (GPU victims not offloaded, CPU victims); 0 between
	// transactions.
	txDrops int32
	// index is the block's position in its sequence (its chunk).
	index int32
	// chunks is the length in blocks of the sequence that made the block
	// (sequence.chunks), for the cost model's position weight.
	chunks int32
	// prio and prioDur are the priority the next insert of a unit uses.
	prio    int8
	live    bool
	prioDur time.Duration
	// twin is, for a private block that recomputes a cached block (see
	// recomputeCopy), that block's record; -1 otherwise.
	twin int32
	// hash is the chain hash of a private full block (its twin's for a
	// recompute copy); indexed says whether it is counted in
	// Cache.writing.
	hash    uint64
	indexed bool
	// hollow says whether the block is on the list of hollow nodes (see
	// metadata.go), linked through hollowPrev and hollowNext.
	hollow                 bool
	hollowPrev, hollowNext int32
	// gen is the record's generation: freeing the record increments it,
	// so that the UnitIDs of the record's next block differ from those of
	// every block it held before (see UnitID).
	gen uint32
}

// allocBlock returns a fresh block record with all units dropped.
func (c *Cache) allocBlock(index, chunks int, prio int, dur time.Duration) int32 {
	var b int32
	if n := len(c.freeBlocks); n > 0 {
		b = c.freeBlocks[n-1]
		c.freeBlocks = c.freeBlocks[:n-1]
	} else {
		b = int32(len(c.blocks))
		c.blocks = append(c.blocks, blockRec{})
		stride := 1 << c.sliceShift
		for range stride {
			c.uTier = append(c.uTier, Dropped)
			c.uSlot = append(c.uSlot, -1)
			c.uPins = append(c.uPins, 0)
		}
	}
	c.blocks[b] = blockRec{index: int32(index), chunks: int32(max(chunks, index+1)),
		prio: int8(prio), prioDur: dur, live: true, gen: c.blocks[b].gen, twin: -1,
		hollowPrev: noBlock, hollowNext: noBlock}
	return b
}

// addRef adds a reference to block b from a sequence (sparse or not).
func (c *Cache) addRef(b int32, sparse bool) {
	r := &c.blocks[b]
	if r.refs == 0 {
		c.unmarkHollow(b)
	}
	r.refs++
	if sparse {
		r.sparseRefs++
	}
}

// freeBlock forgets block b. Its units must hold no bytes and no pins. The
// record's generation moves on, so its next block gets new UnitIDs; a record
// whose generations are used up is retired rather than reused, so that no
// UnitID ever names two blocks.
func (c *Cache) freeBlock(b int32) {
	gen := c.blocks[b].gen
	if gen == c.ids.maxGen {
		c.blocks[b] = blockRec{gen: gen}
		c.st.retiredRecords++
		return
	}
	c.blocks[b] = blockRec{gen: gen + 1}
	c.freeBlocks = append(c.freeBlocks, b)
}

// unit returns the id of slice s of block b.
func (c *Cache) unit(b int32, s int) UnitID { return c.units(b) | UnitID(s) }

// units returns the id of slice 0 of block b; slice s's is units(b) | s.
func (c *Cache) units(b int32) UnitID {
	return UnitID(c.blocks[b].gen)<<c.ids.genShift | UnitID(b)<<c.sliceShift
}

// ix returns the index of unit u in the unit tables (uTier, uSlot, uPins):
// its record and slice, without the generation.
func (c *Cache) ix(u UnitID) UnitID { return u & c.ids.indexMask }

// blockOf returns the block of unit u.
func (c *Cache) blockOf(u UnitID) int32 { return int32(c.ix(u) >> c.sliceShift) }

// sliceOf returns the slice of unit u.
func (c *Cache) sliceOf(u UnitID) int { return int(u & (1<<c.sliceShift - 1)) }

// poolOfUnit returns the pool of unit u.
func (c *Cache) poolOfUnit(u UnitID) int { return int(c.slicePool[c.sliceOf(u)]) }

// entryOf returns what the policies are told about unit u.
func (c *Cache) entryOf(u UnitID) eviction.Entry {
	b := &c.blocks[c.blockOf(u)]
	e := eviction.Entry{Size: 1, Priority: int(b.prio), PriorityDuration: b.prioDur}
	e.Chunk = int(b.index)
	e.Chunks = int(b.chunks)
	e.ContextTokens = int64(b.index) * int64(c.blockTokens)
	if l := c.sliceLayer[c.sliceOf(u)]; l >= 0 {
		e.Layer = int(l)
		e.Layers = c.kvLayers
	}
	return e
}
