package kvcache

import (
	"fmt"
	"time"

	"github.com/kvtier/kvtier/internal/chunked"
	"github.com/kvtier/kvtier/radix"
)

// UnitID names one unit inside a Cache: one slice of one token block. It is
// the key the cache gives its eviction policies. An id names one block for
// the cache's lifetime: when a block is forgotten (its node leaves the
// prefix tree, a private block is freed, Clear) its ids are never given to
// another block, so a policy may keep history (ghosts, counts) keyed by
// UnitID without mixing blocks. The value is opaque: it packs a record
// index, a generation and the slice, and ids are not comparable across
// caches; use block hashes (events) for a name a router can share.
type UnitID uint64

// noUnit marks a free slot in arena.owner.
const noUnit = ^UnitID(0)

// recordBits is the width of a block record index: records are int32.
const recordBits = 31

// minGenBits is the fewest generation bits a UnitID keeps: a record is
// retired after 2^minGenBits blocks at worst (see unitTable.free).
const minGenBits = 16

// maxSliceShift is the widest slice field that leaves minGenBits.
const maxSliceShift = 64 - recordBits - minGenBits

// unitTable is the state of every unit and of the block records they
// belong to. A block record holds one token block (see blockRec); its
// units are UnitID(gen<<genShift | record<<sliceShift | slice), from the
// low bits up the slice, the record and the record's generation. The
// generation makes an id name one block for the cache's lifetime although
// records are reused: freeing a record moves its generation on, and a
// record whose generations run out is retired, never reused.
//
// The state of a unit (tier, slot, pins) lives in an array indexed by the
// id without its generation (ix), 2^sliceShift entries per record, so that
// the hot paths read it without a map. Records and states are chunked
// arrays (package chunked) that grow by a small chunk and never move what
// they hold: an append-doubled slice copied every unit's state, hundreds
// of MB under the cache's lock, when the records in use passed a power of
// two.
type unitTable struct {
	sliceShift uint
	genShift   uint
	indexMask  UnitID
	maxGen     uint32

	recs   chunked.Array[blockRec]
	states chunked.Array[unitState]
	// scratch holds the copy statesOf returns for a record whose states
	// span chunks.
	scratch []unitState

	// free is the last freed record, the top of the stack of records to
	// reuse (chained through blockRec.hollowNext); noBlock when none.
	free    int32
	freeLen int
	retired int // records whose generations ran out
}

// unitState is where a unit is: on a tier with a slot there, or Dropped
// with slot -1; pins counts the sequences (and the running transaction)
// that pin it on the GPU; busy counts the unfinished transfers that read
// or write its slot (see transfers.go), during which its policy keeps it
// pinned and the slot is not freed.
type unitState struct {
	slot  int32
	pins  int32
	busy  uint16
	tier  Tier
	flags unitFlags
	// loadBy names the transfer that brings the unit's bytes into its GPU
	// slot (a load, a copy-on-write, or the slot's old content still
	// moving down): until it is done no kernel may read the unit, nor
	// write a fresh one. storeBy names the transfer that moves a victim's
	// bytes into its new slot below. 0 when none (see loading, storing).
	loadBy, storeBy transferID
	// backup is, for a GPU unit with a copy on the write-through tier
	// (TierConfig.WriteThrough), that copy's slot plus one; 0 when none.
	backup int32
}

// hasBytes reports whether the unit holds bytes: it is on a tier and,
// there, not unwritten.
func (st *unitState) hasBytes() bool { return st.tier != Dropped && st.flags&unitUnwritten == 0 }

// loading reports whether a transfer still brings st's bytes to the GPU.
func (st *unitState) loading() bool { return st.loadBy != 0 }

// storing reports whether a transfer still moves st's bytes down.
func (st *unitState) storing() bool { return st.storeBy != 0 }

// unitFlags mark a unit whose bytes are not what its tier says (see
// transfers.go and writethrough.go).
type unitFlags uint8

const (
	// unitUnwritten: a GPU unit without bytes that keeps its slot: its
	// load failed, or its sequence gave it up while a transfer still held
	// the slot. Its block does not count it as held. A sequence that
	// recomputes it and declares it written makes it whole again; once no
	// pin and no transfer holds it, it is dropped (see Cache.dropLater).
	unitUnwritten unitFlags = 1 << iota
	// unitBacking: the unit's backup (see unitState.backup) is being
	// written; it is not a copy yet. unitBackupVoid: the bytes that
	// backup is being written from changed meanwhile (a truncation
	// detached the block): it is given up when written.
	unitBacking
	unitBackupVoid
	// unitClaimed: a unit on a tier below the GPU that a long Acquire
	// will load keeps its slot there, pinned in its policy, until the
	// Acquire's step for its block (see slices.go): victims the earlier
	// steps move down do not evict it. The claim holds the policy's pin
	// while no transfer does (lowerHeld); whatever takes the unit off
	// its tier (a load, a recompute, a merge, a drop) ends the claim.
	unitClaimed
)

// lowerHeld reports whether st, a unit on a tier below the GPU, stays
// pinned in its policy whatever the running transaction does: a transfer
// holds it, or a long Acquire claims it.
func lowerHeld(st *unitState) bool { return st.busy > 0 || st.flags&unitClaimed != 0 }

// blockRec is the cache's record of one token block: its node in the prefix
// tree (nil for a sequence's private block, which is partial, uncommitted or
// a copy-on-write or recompute copy), how many sequences hold it, how many
// of its units hold bytes, and what the policies are told about it.
type blockRec struct {
	node *radix.Node[int32]
	// refs counts the sequences whose block list holds this block, of
	// which sparseRefs are sparse: a sparse sequence brings single units
	// back (SparseAccess), so a copy of one of the block's units in a lower
	// tier stays useful while another unit has no bytes (see Victim).
	refs, sparseRefs int32
	// held counts units with bytes (on any tier). A transaction that
	// chooses to drop a unit counts it out at once (and back on rollback),
	// so that later victims of the same operation see the block as
	// lacking it.
	held int32
	// index is the block's position in its sequence (its chunk).
	index int32
	// chunks is the length in blocks of the sequence that made the block
	// (sequence.chunks), for the cost model's position weight.
	chunks int32
	// prio and prioDur are the priority the next insert of a unit uses.
	prio int8
	live bool
	// tenant is the number of the block's namespace among those with a
	// share of some tier (see shares.go), 0 for the others.
	tenant  uint8
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
	// pending counts the block's units that a transfer holds (the sum of
	// their unitState.busy) or that are unwritten: the block is not
	// forgotten while a transfer reads or writes one of its slots or a
	// unit without bytes keeps one. orphan says that it was to be
	// forgotten meanwhile (a private block nobody holds any more): the
	// last of them to go forgets it (see Cache.unpend).
	pending int32
	orphan  bool
	// gen is the record's generation (see unitTable).
	gen uint32
}

// newUnitTable returns an empty table for blocks of 2^sliceShift slices at
// most. It fails when the slices leave too few generation bits.
func newUnitTable(sliceShift uint) (unitTable, error) {
	if sliceShift > maxSliceShift {
		return unitTable{}, fmt.Errorf("%w: Layout has more than %d units per block", ErrInvalidConfig, 1<<maxSliceShift)
	}
	genShift := recordBits + sliceShift
	genBits := min(64-genShift, 32)
	return unitTable{sliceShift: sliceShift, genShift: genShift, indexMask: 1<<genShift - 1,
		maxGen: uint32(uint64(1)<<genBits - 1), free: noBlock}, nil
}

// alloc returns a fresh record with every unit dropped and no reference.
func (t *unitTable) alloc(index, chunks int, prio int, dur time.Duration) int32 {
	var b int32
	if t.free != noBlock {
		b = t.free
		t.free = t.blk(b).hollowNext
		t.freeLen--
	} else {
		b = int32(t.recs.Push(blockRec{}))
		for range 1 << t.sliceShift {
			t.states.Push(unitState{slot: -1})
		}
	}
	r := t.blk(b)
	*r = blockRec{index: int32(index), chunks: int32(max(chunks, index+1)),
		prio: int8(prio), prioDur: dur, live: true, gen: r.gen, twin: -1,
		hollowPrev: noBlock, hollowNext: noBlock}
	return b
}

// release forgets record b, whose units hold no bytes and no pins: its
// generation moves on, so its next block gets new UnitIDs, or, when its
// generations are used up, it is retired. Records are reused last freed
// first.
func (t *unitTable) release(b int32) {
	r := t.blk(b)
	gen := r.gen
	if gen == t.maxGen {
		*r = blockRec{gen: gen}
		t.retired++
		return
	}
	*r = blockRec{gen: gen + 1, hollowNext: t.free}
	t.free = b
	t.freeLen++
}

// live returns the records in use.
func (t *unitTable) live() int { return t.recs.Len() - t.freeLen - t.retired }

// records returns how many records were ever allocated: every record is
// below it (live, free or retired).
func (t *unitTable) records() int32 { return int32(t.recs.Len()) }

// blk returns block record b.
func (t *unitTable) blk(b int32) *blockRec { return t.recs.At(int(b)) }

// id returns the id of slice s of block b.
func (t *unitTable) id(b int32, s int) UnitID { return t.base(b) | UnitID(s) }

// base returns the id of slice 0 of block b; slice s's is base(b) | s.
func (t *unitTable) base(b int32) UnitID {
	return UnitID(t.blk(b).gen)<<t.genShift | UnitID(b)<<t.sliceShift
}

// ix returns the index of unit u in the unit arrays (tier, slot, pins):
// its record and slice, without the generation.
func (t *unitTable) ix(u UnitID) UnitID { return u & t.indexMask }

// block returns the record of unit u.
func (t *unitTable) block(u UnitID) int32 { return int32(t.ix(u) >> t.sliceShift) }

// slice returns the slice of unit u.
func (t *unitTable) slice(u UnitID) int { return int(u & (1<<t.sliceShift - 1)) }

// rec returns the record of unit u.
func (t *unitTable) rec(u UnitID) *blockRec { return t.blk(t.block(u)) }

// current reports whether u names a slice below slices of a live block as
// it is now (its record's current generation): false for garbage and for a
// unit of a block forgotten since.
func (t *unitTable) current(u UnitID, slices int) bool {
	if uint64(t.ix(u)>>t.sliceShift) >= uint64(t.recs.Len()) || t.slice(u) >= slices {
		return false
	}
	b := t.block(u)
	return t.blk(b).live && t.base(b)|UnitID(t.slice(u)) == u
}

// of returns the state of unit u, to read or write.
func (t *unitTable) of(u UnitID) *unitState { return t.states.At(int(t.ix(u))) }

// statesOf returns the states of block record b's units, indexed by
// slice. A record's states lie in one chunk of the state array when the
// chunk holds whole records, which the hot loops over a block's units
// read as a slice (one lookup per block instead of one per unit);
// otherwise they are copied into a scratch slice, valid until the next
// call, and writes to it are lost.
func (t *unitTable) statesOf(b int32) []unitState {
	n := 1 << t.sliceShift
	i := int(b) << t.sliceShift
	if span := t.states.Span(i, n); span != nil {
		return span
	}
	t.scratch = t.scratch[:0]
	for k := range n {
		t.scratch = append(t.scratch, *t.states.At(i + k))
	}
	return t.scratch
}

// tierOf, slotOf and pinsOf read a unit's state.
func (t *unitTable) tierOf(u UnitID) Tier  { return t.of(u).tier }
func (t *unitTable) slotOf(u UnitID) int32 { return t.of(u).slot }
func (t *unitTable) pinsOf(u UnitID) int32 { return t.of(u).pins }

// place puts u on tier tr at slot s (Dropped: slot -1).
func (t *unitTable) place(u UnitID, tr Tier, s int32) {
	st := t.of(u)
	st.tier, st.slot = tr, s
}
