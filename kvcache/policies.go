package kvcache

import (
	"fmt"

	"github.com/kvtier/kvtier/costmodel"
	"github.com/kvtier/kvtier/eviction"
)

// PoolInfo describes one arena (one tier in one layout pool) to a
// PolicyFactory.
type PoolInfo struct {
	// Tier is the arena's tier and TierName its name.
	Tier     Tier
	TierName string
	// Pool is the layout pool index.
	Pool int
	// Slots is the number of unit slots of the arena (at least 1 on the
	// GPU, possibly 0 below it: the policy then never sees a key); for
	// the policy of a namespace with a share of the tier (see Share), the
	// most slots the namespace may hold there.
	Slots int
	// UnitBytes is the size of every unit in the arena.
	UnitBytes int64
	// KeyUnits is the number of units one key of the policy stands for:
	// 1, or under Config.BlockKeys the pool's units per block, when each
	// key is a block's and its Entry's Size is KeyUnits.
	KeyUnits int
	// Clock is the cache's clock (Config.Clock), for policies that read
	// time.
	Clock eviction.Clock
	// Recompute is Config.Recompute, for cost-aware policies (nil when
	// not set).
	Recompute *costmodel.Recompute
	// keyBits is the width of a UnitID without its generation.
	keyBits int
}

// NewIndex returns a new key index for a policy of this arena (see
// eviction.Index): an eviction.TaggedIndex over the bits of a UnitID that
// name its block record and slice, so that a lookup is one slice access
// instead of a Go map operation (2 to 5 times faster at 1k to 128k-token
// prompts, BENCHMARKS.md). The policies of LRUPolicy, FIFOPolicy,
// PrioritizedLRUPolicy and S3FIFOPolicy use it; a factory of a user's
// policy built on package eviction can too.
func (info PoolInfo) NewIndex() (eviction.Index[UnitID], error) {
	if info.keyBits == 0 {
		return nil, fmt.Errorf("%w: PoolInfo was not made by a Cache", ErrInvalidConfig)
	}
	return eviction.NewTaggedIndex[UnitID](info.keyBits)
}

// PolicyFactory builds the eviction policy of one arena: one tier in one
// layout pool. The cache calls it once per arena in New, and once more per
// Share of the arena's tier (each namespace with a share has a policy of
// its own, which must be of the same kind: the optional interfaces of
// package eviction it implements are the tier's own policy's). LRUPolicy,
// FIFOPolicy, PrioritizedLRUPolicy, S3FIFOPolicy, ARCPolicy,
// WTinyLFUPolicy and RetentionPolicy return factories of package
// eviction's policies.
//
// A factory rather than a policy value because the cache needs several
// independent policies (one per tier and pool: a policy orders the keys of
// one arena only, and policies are stateful and not goroutine-safe, so one
// value cannot be shared), and because some policies need the arena's size
// (S3-FIFO sizes its queues from the capacity) which only the cache knows
// after splitting the tier capacity.
//
// What a policy may assume:
//
//   - A key (UnitID) names one unit of one block for the cache's lifetime:
//     a block the cache forgets never lends its keys to another, so history
//     kept by key (ghosts, counts) never mixes two blocks. A key is
//     inserted again only when the same unit comes back to the arena
//     (loaded back after a move down, restored after a drop), or when a
//     rollback puts a victim back into a policy that does not implement
//     eviction.Transactional.
//   - The cache inserts only valid entries (Size 1: capacity is counted in
//     slots, every slot of an arena has the same size; its request's
//     priority) of keys the policy does not track, and relies on Insert
//     never failing there. Every policy in package eviction accepts these
//     inserts. A policy whose Insert fails poisons the cache: see
//     ErrPolicy.
//   - Calls come one at a time, under the cache's lock. A policy may call
//     Stats and the configuration getters of its cache; any other method
//     returns ErrReentrant. It must not wait for another goroutine that
//     calls the cache.
//   - A policy that implements eviction.Transactional is told when an
//     operation begins and ends, and is rolled back (Rollback) when the
//     operation fails: it is left exactly as before. Others are compensated
//     by ordinary calls (victims inserted again, pins undone by Unpin).
//   - A panic is recovered: the policy is not called again and the cache
//     is poisoned (ErrPolicy), so a policy never sees a half-applied
//     operation's consequences.
//
// The Entry's Unit places the unit for cost-aware policies (and for
// Config.Recompute): Layer and Layers are the unit's KV layer and the
// model's KV layers (Layers 0 when the unit spans every layer); Chunk is the
// index of the unit's token block in the sequence that made it and
// ContextTokens the tokens before that block (Chunk × BlockTokens); Chunks
// is that sequence's length in blocks, taken as the larger of its prompt's
// blocks (the whole Request.Tokens, Plan.Pending included) and its blocks
// after the call that made the block. So a prompt's blocks, dense or sparse
// (a sparse prompt is fed through Append block by block), are weighted
// against the whole prompt by the position weight (Chunk+1)/Chunks, and a
// decoded block is the latest chunk when made (Chunks = Chunk+1 one token
// at a time). A block reused from the prefix tree keeps the Entry of the
// sequence that made it.
//
// A key is pinned while a sequence uses its unit (Pin and Unpin on the
// first and last user), and a unit that Acquire or SparseAccess finds on
// the GPU is reported as a hit with Access, once pinned, unless the policy
// declares with eviction.PinnedAccessIgnorer that Access of a pinned key
// changes nothing (the LRU, FIFO, PrioritizedLRU and Retention of package
// eviction do; S3-FIFO, ARC and W-TinyLFU count the hit).
type PolicyFactory func(PoolInfo) (eviction.Policy[UnitID], error)

// indexed returns a factory of the policies build makes over a new index
// of the arena's UnitIDs (PoolInfo.NewIndex).
func indexed(build func(PoolInfo, eviction.Index[UnitID]) (eviction.Policy[UnitID], error)) PolicyFactory {
	return func(info PoolInfo) (eviction.Policy[UnitID], error) {
		idx, err := info.NewIndex()
		if err != nil {
			return nil, err
		}
		return build(info, idx)
	}
}

// LRUPolicy returns the default PolicyFactory: an eviction.LRU per arena.
func LRUPolicy() PolicyFactory {
	return indexed(func(_ PoolInfo, idx eviction.Index[UnitID]) (eviction.Policy[UnitID], error) {
		return eviction.NewLRUWithIndex(idx)
	})
}

// FIFOPolicy returns a factory of eviction.FIFO policies.
func FIFOPolicy() PolicyFactory {
	return indexed(func(_ PoolInfo, idx eviction.Index[UnitID]) (eviction.Policy[UnitID], error) {
		return eviction.NewFIFOWithIndex(idx)
	})
}

// PrioritizedLRUPolicy returns a factory of eviction.PrioritizedLRU
// policies, reading priority expiries from the cache's clock.
// Request.Priorities feed them.
func PrioritizedLRUPolicy() PolicyFactory {
	return indexed(func(info PoolInfo, idx eviction.Index[UnitID]) (eviction.Policy[UnitID], error) {
		return eviction.NewPrioritizedLRUWithIndex(info.Clock, idx)
	})
}

// capacityOr returns capacity, or when it is 0 the arena's slots (at least
// 1: an arena of zero slots never inserts): the Capacity a sized policy's
// factory gives it.
func (info PoolInfo) capacityOr(capacity int64) int64 {
	if capacity == 0 {
		return int64(max(1, info.Slots))
	}
	return capacity
}

// S3FIFOPolicy returns a factory of eviction.S3FIFO policies configured by
// cfg, with Capacity set to the arena's slots (at least 1: an arena of zero
// slots never inserts) when cfg.Capacity is 0.
func S3FIFOPolicy(cfg eviction.S3FIFOConfig) PolicyFactory {
	return indexed(func(info PoolInfo, idx eviction.Index[UnitID]) (eviction.Policy[UnitID], error) {
		c := cfg
		c.Capacity = info.capacityOr(c.Capacity)
		return eviction.NewS3FIFOWithIndex(c, idx)
	})
}

// ARCPolicy returns a factory of eviction.ARC policies configured by cfg,
// with Capacity set to the arena's slots (at least 1: an arena of zero
// slots never inserts) when cfg.Capacity is 0. A unit found on the GPU
// again moves to ARC's frequency list, and a block that comes back after
// its units were evicted (onboarded or recomputed) moves the target
// between recency and frequency.
func ARCPolicy(cfg eviction.ARCConfig) PolicyFactory {
	return indexed(func(info PoolInfo, idx eviction.Index[UnitID]) (eviction.Policy[UnitID], error) {
		c := cfg
		c.Capacity = info.capacityOr(c.Capacity)
		return eviction.NewARCWithIndex(c, idx)
	})
}

// WTinyLFUPolicy returns a factory of eviction.WTinyLFU policies configured
// by cfg, with Capacity set to the arena's slots (at least 1) when
// cfg.Capacity is 0; Keys, when 0, then follows Capacity, one key per
// slot. Each placement and each hit counts a sighting of the unit, so a
// block many requests share outlives one a single request wrote.
func WTinyLFUPolicy(cfg eviction.WTinyLFUConfig) PolicyFactory {
	return indexed(func(info PoolInfo, idx eviction.Index[UnitID]) (eviction.Policy[UnitID], error) {
		c := cfg
		c.Capacity = info.capacityOr(c.Capacity)
		return eviction.NewWTinyLFUWithIndex(c, idx)
	})
}

// RetentionPolicy returns a factory of eviction.Retention policies (cost
// aware, Pensieve) pricing units with Config.Recompute and reading the
// cache's clock. Each unit is priced by the Entry the cache inserts (see
// PolicyFactory): its KV layer for the layer weight, its block's index
// among the larger of the prompt's blocks and the sequence's blocks so far
// for the position weight, and the tokens before its block as context. New
// fails with ErrInvalidConfig when Config.Recompute is nil.
func RetentionPolicy() PolicyFactory {
	return func(info PoolInfo) (eviction.Policy[UnitID], error) {
		if info.Recompute == nil {
			return nil, fmt.Errorf("%w: RetentionPolicy prices units with Config.Recompute, which is nil", ErrInvalidConfig)
		}
		return eviction.NewRetention[UnitID](info.Clock, *info.Recompute)
	}
}
