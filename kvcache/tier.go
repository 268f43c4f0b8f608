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

// UnitID names one unit inside a Cache: the record of its token block and
// its slice. It is the key the cache gives its eviction policies. An id is
// valid while its block is known to the cache and is reused after the block
// is forgotten, so it is not a stable name across time; use block hashes
// (events) for that.
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
