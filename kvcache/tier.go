package kvcache

import "fmt"

// Tier is where a unit's bytes live. Tiers are exclusive: a unit is on the
// GPU, on the CPU, or dropped, never in two places at once.
type Tier uint8

const (
	// Dropped means the unit has no bytes anywhere. Its block stays known
	// (in the prefix tree) so that a later request learns which tokens to
	// recompute. It is the zero Tier.
	Dropped Tier = iota
	// GPU is the primary tier: attention kernels read it.
	GPU
	// CPU is the secondary tier, the offload target.
	CPU
)

// String returns "dropped", "gpu", "cpu" or "Tier(n)".
func (t Tier) String() string {
	switch t {
	case Dropped:
		return "dropped"
	case GPU:
		return "gpu"
	case CPU:
		return "cpu"
	}
	return fmt.Sprintf("Tier(%d)", uint8(t))
}

// UnitID names one unit inside a Cache: one slice of one token block. It is
// the key the cache gives its eviction policies. An id names one block for
// the cache's lifetime: when a block is forgotten (its node leaves the
// prefix tree, a private block is freed, Clear) its ids are never given to
// another block, so a policy may keep history (ghosts, counts) keyed by
// UnitID without mixing blocks. The value is opaque: it packs a record
// index, a generation and the slice, and ids are not comparable across
// caches; use block hashes (events) for a name a router can share.
type UnitID uint64

// SeqID names a sequence returned by Acquire or Fork. Ids are never reused
// by a Cache.
type SeqID uint64

// TokenRange is the half-open token interval [Start, End) of a sequence.
type TokenRange struct {
	Start, End int
}

// Len returns the number of tokens in r.
func (r TokenRange) Len() int { return r.End - r.Start }

// unitIDs is the layout of a UnitID: from the low bits up, the slice
// (sliceShift bits), the block record (recordBits) and the record's
// generation (the rest). The generation makes an id name one block for the
// cache's lifetime although records are reused.
type unitIDs struct {
	genShift  uint
	indexMask UnitID
	maxGen    uint32
}

// recordBits is the width of a block record index: records are int32.
const recordBits = 31

// minGenBits is the fewest generation bits a UnitID keeps: a record is
// retired after 2^minGenBits blocks at worst (see freeBlock).
const minGenBits = 16

// maxSliceShift is the widest slice field that leaves minGenBits.
const maxSliceShift = 64 - recordBits - minGenBits

func newUnitIDs(sliceShift uint) (unitIDs, error) {
	if sliceShift > maxSliceShift {
		return unitIDs{}, fmt.Errorf("%w: Layout has more than %d units per block", ErrInvalidConfig, 1<<maxSliceShift)
	}
	genShift := recordBits + sliceShift
	genBits := min(64-genShift, 32)
	return unitIDs{genShift: genShift, indexMask: 1<<genShift - 1, maxGen: uint32(uint64(1)<<genBits - 1)}, nil
}
