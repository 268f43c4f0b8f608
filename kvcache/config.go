package kvcache

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/kvtier/kvtier/costmodel"
	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/layout"
)

// Capacity is the size of one tier, in units or in bytes: set exactly one of
// the two fields (both zero means no capacity, allowed only for the CPU
// tier).
//
// A tier keeps one slot arena per layout pool (layers that differ in window
// size, or in unit size under AllLayers, have separate arenas so that every
// slot of an arena has one size). The capacity is split across pools in
// proportion to what one token block needs in each:
//
//   - Units: pool p gets floor(Units × UnitsPerBlock_p / Σ UnitsPerBlock) slots;
//   - Bytes: pool p gets floor(Bytes × w_p / Σ w / UnitBytes_p) slots, where
//     w_p = UnitBytes_p × UnitsPerBlock_p is the pool's bytes per token block.
//
// So a tier sized for N whole token blocks holds N blocks in every pool.
// Windowed pools need fewer blocks per sequence than full-attention ones, so
// this split favours full attention over windows; size the capacity with
// that in mind.
type Capacity struct {
	// Units is the number of unit slots over all pools.
	Units int64
	// Bytes is the memory over all pools.
	Bytes int64
}

// PoolInfo describes one (tier, pool) arena to a PolicyFactory.
type PoolInfo struct {
	// Tier is GPU or CPU.
	Tier Tier
	// Pool is the layout pool index.
	Pool int
	// Slots is the number of unit slots of the arena; 0 for a tier with
	// no capacity (the policy then never sees a key).
	Slots int
	// UnitBytes is the size of every unit in the arena.
	UnitBytes int64
	// Clock is the cache's clock (Config.Clock), for policies that read
	// time.
	Clock eviction.Clock
}

// PolicyFactory builds the eviction policy of one (tier, pool) arena. The
// cache calls it once per arena in New.
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
//     (onboarded after an offload, restored after a drop), or when a
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
// Config.CostModel): Layer and Layers are the unit's KV layer and the
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
// eviction do; S3-FIFO counts the hit).
type PolicyFactory func(PoolInfo) (eviction.Policy[UnitID], error)

// LRUFactory is the default PolicyFactory: an eviction.LRU per arena.
func LRUFactory(PoolInfo) (eviction.Policy[UnitID], error) {
	return eviction.NewLRU[UnitID](), nil
}

// EventSink receives the cache's events, in the order they happened. The
// goroutine that ran an operation calls it with that operation's events,
// without the cache's lock held, once the events of every earlier operation
// have been delivered; calls never overlap. So the sink applies
// backpressure: a slow sink slows the callers whose operations emit events,
// and the events waiting for it are one operation's worth per waiting
// caller. A sink may call the cache, mutating calls included (their events
// are delivered after the current ones, in order). A panic in the sink is
// recovered and counted (Stats.SinkPanics, Cache.SinkPanic); the sink still
// gets the events that follow. A sink that ends its goroutine
// (runtime.Goexit, as t.FailNow does) loses the rest of that operation's
// events, counted the same way, and later deliveries go on.
type EventSink func(Event)

// Config describes a Cache. Layout and GPU are required; every other field
// has a default.
type Config struct {
	// Layout is the model geometry and unit kind. Its TokensPerUnit is the
	// cache's block size (tokens per token block).
	Layout *layout.Layout
	// GPU is the capacity of the primary tier. It must be positive and give
	// every pool at least one slot.
	GPU Capacity
	// CPU is the capacity of the offload tier; zero means no CPU tier
	// (every GPU victim is dropped).
	CPU Capacity
	// GPUPolicy and CPUPolicy build the eviction policy of each arena of
	// their tier. Nil means LRUFactory.
	GPUPolicy, CPUPolicy PolicyFactory
	// CostModel decides, for each GPU victim, whether it is offloaded to
	// CPU (transfer cheaper than recompute) or dropped. Nil means always
	// offload when the CPU tier has or can make room. The victim is priced
	// by the Unit of its policy Entry (layer, position among its
	// sequence's blocks, context: see PolicyFactory).
	//
	// The decision compares one unit's transfer time (its bytes over the
	// link) with its block's recompute cost (costmodel.Model.Decide on
	// the Entry's Unit: the cost of a block's prefill, times the unit's
	// layer and position weights). That is not a mismatch of units: a
	// block with a dropped unit is recomputed whole, through every layer,
	// so dropping one unit of a block whose other units hold bytes costs
	// the block's recompute, while offloading it costs only its own copy
	// back. That is the marginal choice for the first unit of a block to
	// leave.
	//
	// For the later ones dropping costs nothing more, so they are dropped
	// without asking the cost model (with or without one): a GPU victim
	// whose block already lacks a unit's bytes (dropped before, or by the
	// same operation) is never offloaded. Whatever uses such a block next
	// recomputes it and frees its CPU copies instead of reading them: a
	// dense Acquire (or a Truncate that pins it again) recomputes it
	// whole, and a sparse Acquire takes the cached prefix only up to it,
	// so the Append that writes it again adopts the cached block and
	// frees its CPU copies. This holds for sliding-window layers too: a
	// dense Acquire pins every unit of every prompt block, so a dropped
	// unit of a windowed layer forces the block's recompute like any
	// other. The exception is a block that a live sparse sequence holds:
	// SparseAccess gives each dropped unit it touches a fresh slot and
	// onboards the touched units that are on the CPU, even of the same
	// layer and block, so there a CPU copy is read whatever the block's
	// other units hold, and the cost model decides as for a first unit.
	// (Under SparseAccess the recompute of a layer's block is counted
	// once, but the cache does not know which of its heads a later step
	// will select, so a per-layer rule could drop a copy a step reads.)
	// The rule is applied when the victim is picked: a unit offloaded
	// before its block loses another one keeps its CPU copy until the
	// CPU policy evicts it or the block is recomputed.
	CostModel *costmodel.Model
	// Clock is handed to policy factories. Nil means a new
	// eviction.SystemClock.
	Clock eviction.Clock
	// Mover executes the copies the cache plans. Nil means metadata only:
	// copies are planned, counted and reported, no bytes move (simulations).
	Mover Mover
	// Events, when not nil, receives every event (see EventSink).
	Events EventSink
	// EventBuffer is the capacity, in events, of the buffer that
	// TakeEvents drains: a server that pulls events once per scheduling
	// step sets it instead of (or beside) Events. When the buffer is full
	// the oldest events are dropped and counted (Stats.EventsDropped). 0
	// means no buffer; with neither a buffer nor a sink no event is built.
	EventBuffer int
	// HashSeed seeds the chain hash of token blocks (radix.Hasher). Caches
	// whose events are compared by a router should share it.
	HashSeed uint64
	// MaxBlocks bounds the token blocks the prefix tree keeps, the
	// cache's metadata. Blocks that hold bytes or that live sequences use
	// are bounded by the tiers and the sequences; the others (hollow:
	// dropped, kept for the cached blocks below them) are removed, least
	// recently hollowed first and with their subtrees, whenever the tree
	// holds more (see Stats.PrunedBlocks). 0 means twice the token blocks
	// the GPU and CPU tiers hold together, and at least 1024; use
	// math.MaxInt for no bound.
	MaxBlocks int
}

// poolGeom is what the cache keeps of a layout pool.
type poolGeom struct {
	unitBytes     int64
	window        int
	unitsPerBlock int
	slices        []int
}

// splitCapacity returns the slots of each pool for capacity c, or an error
// naming the tier.
func splitCapacity(name string, c Capacity, pools []layout.Pool) ([]int, error) {
	if c.Units < 0 || c.Bytes < 0 {
		return nil, fmt.Errorf("%w: %s capacity (units %d, bytes %d) must not be negative", ErrInvalidConfig, name, c.Units, c.Bytes)
	}
	if c.Units > 0 && c.Bytes > 0 {
		return nil, fmt.Errorf("%w: %s capacity sets both units (%d) and bytes (%d); set one", ErrInvalidConfig, name, c.Units, c.Bytes)
	}
	out := make([]int, len(pools))
	if c.Units == 0 && c.Bytes == 0 {
		return out, nil
	}
	var total uint64
	for _, p := range pools {
		if c.Units > 0 {
			total += uint64(p.UnitsPerBlock)
		} else {
			hi, lo := bits.Mul64(uint64(p.UnitBytes), uint64(p.UnitsPerBlock))
			if hi != 0 || total+lo < total {
				return nil, fmt.Errorf("%w: %s pool %d bytes per block overflow", ErrInvalidConfig, name, p.Index)
			}
			total += lo
		}
	}
	for i, p := range pools {
		var slots uint64
		if c.Units > 0 {
			hi, lo := bits.Mul64(uint64(c.Units), uint64(p.UnitsPerBlock))
			slots, _ = bits.Div64(hi, lo, total)
		} else {
			w := uint64(p.UnitBytes) * uint64(p.UnitsPerBlock) // checked above
			hi, lo := bits.Mul64(uint64(c.Bytes), w)
			share, _ := bits.Div64(hi, lo, total) // share <= Bytes, no overflow
			slots = share / uint64(p.UnitBytes)
		}
		if slots > math.MaxInt32-1 {
			return nil, fmt.Errorf("%w: %s pool %d would have %d slots, more than %d", ErrInvalidConfig, name, p.Index, slots, math.MaxInt32-1)
		}
		out[i] = int(slots)
	}
	return out, nil
}

// PoolSlots returns the number of slots each layout pool of l gets in a tier
// of capacity c: what a Cache built with that capacity allocates, and what a
// Mover's memory must hold. It returns an error wrapping ErrInvalidConfig for
// a negative capacity, both fields set, or a pool too large for int32 slot
// ids.
func PoolSlots(l *layout.Layout, c Capacity) ([]int, error) {
	if l == nil || l.UnitsPerBlock() == 0 {
		return nil, fmt.Errorf("%w: Layout is nil or not built by layout.New", ErrInvalidConfig)
	}
	return splitCapacity("tier", c, l.Pools())
}

// FIFOFactory builds an eviction.FIFO per arena.
func FIFOFactory(PoolInfo) (eviction.Policy[UnitID], error) {
	return eviction.NewFIFO[UnitID](), nil
}

// PrioritizedLRUFactory builds an eviction.PrioritizedLRU per arena, reading
// priority expiries from the cache's clock. Request.Priorities feed it.
func PrioritizedLRUFactory(info PoolInfo) (eviction.Policy[UnitID], error) {
	return eviction.NewPrioritizedLRU[UnitID](info.Clock), nil
}

// S3FIFOFactory returns a factory of eviction.S3FIFO policies configured by
// cfg, with Capacity set to the arena's slots (at least 1: an arena of zero
// slots never inserts) when cfg.Capacity is 0.
func S3FIFOFactory(cfg eviction.S3FIFOConfig) PolicyFactory {
	return func(info PoolInfo) (eviction.Policy[UnitID], error) {
		c := cfg
		if c.Capacity == 0 {
			c.Capacity = int64(max(1, info.Slots))
		}
		return eviction.NewS3FIFO[UnitID](c)
	}
}

// RetentionFactory returns a factory of eviction.Retention policies (cost
// aware, Pensieve) pricing units with cost and reading the cache's clock.
// Each unit is priced by the Entry the cache inserts (see PolicyFactory):
// its KV layer for the layer weight, its block's index among the larger of
// the prompt's blocks and the sequence's blocks so far for the position
// weight, and the tokens before its block as context.
func RetentionFactory(cost costmodel.Recompute) PolicyFactory {
	return func(info PoolInfo) (eviction.Policy[UnitID], error) {
		return eviction.NewRetention[UnitID](info.Clock, cost)
	}
}
