package kvcache

import (
	"fmt"

	"github.com/kvtier/kvtier/costmodel"
)

// Decider chooses the fate of a victim of a tier that has a tier below it:
// true moves it down (the tier below then makes room for it, or, when all
// of its units are pinned, the victim is dropped after all), false drops
// it. Config.Decider replaces DefaultDecider.
//
// The cache asks only about victims that can be of use below: a unit of a
// block in the prefix tree (a sequence's private block is never reusable,
// so its victims are dropped without asking). A Decider is called under
// the cache's lock, one victim at a time, with what a callback may do (see
// Mover); a panic is recovered and poisons the cache like a policy's (it
// decides what eviction does).
type Decider func(Victim) bool

// Victim describes a unit leaving tier From, for a Decider.
type Victim struct {
	// Unit places the unit for the cost model: its layer, its block's
	// position and context (the Entry.Unit its policies were given).
	Unit costmodel.Unit
	// Bytes is the unit's size.
	Bytes int64
	// From is the tier it leaves and To the tier below, where it would go.
	From, To Tier
	// Whole reports whether every other unit of the victim's block holds
	// bytes (none dropped, none being dropped by the same operation).
	// Under whole-block recompute, a block that lacks a unit is recomputed
	// by whatever uses it next, which gives up the copies below instead of
	// reading them.
	Whole bool
	// SparseHeld reports whether a live sparse sequence holds the block:
	// its SparseAccess restores dropped units one at a time and loads the
	// others, so a copy below is read whatever the block's other units
	// hold.
	SparseHeld bool

	tiers     *tierSet
	recompute *costmodel.Recompute
}

// LoadSeconds returns the time to copy the unit back from To to the first
// tier: the sum of the links of tiers To, To-1, ..., 2 (TierConfig.Link; a
// zero link costs nothing). It returns an error when a link cannot price
// the copy as a finite number of seconds.
func (v Victim) LoadSeconds() (float64, error) {
	if v.tiers == nil {
		return 0, fmt.Errorf("%w: Victim was not made by a Cache", ErrInvalidConfig)
	}
	return v.tiers.loadSeconds(v.To, v.Bytes)
}

// RecomputeSeconds returns Config.Recompute's cost of recomputing the
// unit, and false when the cache has no Recompute. Under whole-block
// recompute dropping the first unit of a block costs the whole block, so
// that is the cost to weigh against one unit's load. It returns an error
// when the cost cannot be computed as a finite number of seconds.
func (v Victim) RecomputeSeconds() (float64, bool, error) {
	if v.recompute == nil {
		return 0, false, nil
	}
	s, err := v.recompute.Cost(v.Unit)
	return s, true, err
}

// DefaultDecider is the rule a Cache applies when Config.Decider is nil.
// It moves a victim down when both hold:
//
//   - its block is whole, or a live sparse sequence holds it (see Victim):
//     otherwise whatever uses the block next recomputes it and gives up the
//     copy below, so the move would cost a copy for nothing (a unit moved
//     before its block lost another one keeps its copy below until that
//     tier's policy evicts it or the block is recomputed);
//   - the cache has no Config.Recompute, or loading the unit back from the
//     tier below (LoadSeconds) is strictly cheaper than recomputing its
//     block (RecomputeSeconds), as costmodel.Choose decides. Only the way
//     back counts: the move down runs off the critical path. A cost that
//     cannot be computed drops the victim.
//
// The victims of the last tier are always dropped.
func DefaultDecider(v Victim) bool {
	if !v.Whole && !v.SparseHeld {
		return false
	}
	recompute, ok, err := v.RecomputeSeconds()
	if !ok {
		return true
	}
	if err != nil {
		return false
	}
	load, err := v.LoadSeconds()
	return err == nil && costmodel.Choose(load, recompute) == costmodel.Offload
}

// shouldMove asks the Decider about victim v of tier t in pool p.
func (c *Cache) shouldMove(v UnitID, t Tier, p int) bool {
	r := c.units.rec(v)
	if r.node == nil {
		// A private block (partial, never reusable) is pinned by its
		// sequence except while the Truncate that cuts it off runs,
		// which frees it once committed: a copy would be wasted.
		return false
	}
	if c.tiers.arena(t+1, p).capacity() == 0 {
		return false
	}
	whole, sparse := r.held == int32(c.geom.slices), r.sparseRefs > 0
	if c.decider == nil && c.recompute == nil {
		// DefaultDecider with no cost: it needs nothing else.
		return whole || sparse
	}
	return c.decide(Victim{Unit: c.entryOf(v).Unit, Bytes: c.geom.pools[p].unitBytes, From: t, To: t + 1,
		Whole: whole, SparseHeld: sparse, tiers: &c.tiers, recompute: c.recompute})
}
