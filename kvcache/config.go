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
// the two fields.
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

// TierConfig describes one tier of a Cache.
type TierConfig struct {
	// Name names the tier in errors, Stats and Cache.TierName; empty means
	// "GPU" for the first tier, "CPU" for the second and "tierN" below.
	// Names must differ.
	Name string
	// Capacity is the tier's size. It must not be zero, and the first
	// tier's must give every layout pool at least one slot.
	Capacity Capacity
	// Policy builds the eviction policy of each of the tier's arenas (one
	// per layout pool). Nil means LRUPolicy().
	Policy PolicyFactory
	// Link is the link between this tier and the one above it, over which
	// its units are moved down and loaded back: the default Decider prices
	// a load with it. The zero Link costs nothing; it is ignored for the
	// first tier.
	Link costmodel.Link
	// WriteThrough, on one tier below the GPU, fills the tier as blocks
	// are committed: once an operation has committed a block, its units
	// on the GPU are copied into free slots of this tier (through the
	// Mover, or as a transfer of the Engine), off the operation's
	// critical path. Such a copy is the unit's backup: the unit stays
	// where it is, and keeps the backup while it moves between the tiers
	// above this one; when the tier right above evicts it, the move down
	// costs no copy (the backup becomes its location); a unit loaded
	// back from this tier keeps its copy there as a backup. On the tier
	// right below the GPU it makes GPU evictions free; on a store below
	// the CPU (a disk, a Redis shared by servers, see package tierstore)
	// it publishes every committed block at once, so another server can
	// load it while this one still holds it. A backup takes a slot like
	// any unit (TierStats.Backups counts them, within Cached) and the
	// tier's policy evicts it like any unit, which costs nothing but the
	// backup. Write-through never evicts to make room for a backup: when
	// the tier is full, the units are moved down on eviction as without
	// it (write-back). At most one tier has it.
	WriteThrough bool
	// Shares gives namespaces shares of this tier: a reservation no other
	// namespace evicts them below and a cap (see Share). A tier without
	// shares treats every namespace alike. Shares cannot be combined with
	// Config.BlockKeys.
	Shares []Share
}

// GPUAndCPU returns the usual two tiers: a GPU of capacity gpu and, unless
// cpu is zero, a CPU tier of capacity cpu below it, both with LRU
// policies and no link cost. Set their fields for anything else.
func GPUAndCPU(gpu, cpu Capacity) []TierConfig {
	tiers := []TierConfig{{Name: "GPU", Capacity: gpu}}
	if cpu != (Capacity{}) {
		tiers = append(tiers, TierConfig{Name: "CPU", Capacity: cpu})
	}
	return tiers
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

// Config describes a Cache. Layout and Tiers are required; every other
// field has a default.
type Config struct {
	// Layout is the model geometry and unit kind. Its TokensPerUnit is the
	// cache's block size (tokens per token block).
	Layout *layout.Layout
	// Tiers lists the tiers, fastest first, 1 to MaxTiers of them: the
	// first is the GPU, which attention kernels read (Tier GPU), the
	// second (Tier CPU) receives the GPU's victims, and each further tier
	// the victims of the one above it, as the Decider chooses. Units are
	// loaded back to the first tier from wherever they are. Victims of
	// the last tier are dropped.
	Tiers []TierConfig
	// Recompute is the cost of recomputing a unit by prefill, the cache's
	// one cost model: the default Decider weighs it against the cost of
	// loading a victim back, and RetentionPolicy prices units with it.
	// Nil means no cost is known: the default Decider moves every victim
	// it can, and RetentionPolicy cannot be used.
	Recompute *costmodel.Recompute
	// Decider chooses, for each victim of a tier with a tier below it,
	// whether it moves down or is dropped. Nil means DefaultDecider.
	Decider Decider
	// Clock is handed to policy factories. Nil means a new
	// eviction.SystemClock.
	Clock eviction.Clock
	// Mover executes the copies the cache plans inside its calls. Nil (and
	// no Engine) means metadata only: copies are planned, counted and
	// reported, no bytes move (simulations).
	Mover Mover
	// Engine moves the bytes of the copies the cache plans off its lock,
	// asynchronously: operations return at once, with the units in flight
	// marked, and Poll applies what the engine finished (see
	// TransferEngine). Set at most one of Mover and Engine.
	Engine TransferEngine
	// Events, when not nil, receives every event (see EventSink).
	Events EventSink
	// EventBuffer is the capacity, in events, of the buffer that
	// TakeEvents drains: a server that pulls events once per scheduling
	// step sets it instead of (or beside) Events. When the buffer is full
	// the oldest events are dropped and counted (Stats.EventsDropped). 0
	// means no buffer; with neither a buffer nor a sink no event is built.
	EventBuffer int
	// BlockEventsOnly leaves UnitMoved events out (BlockMoved still
	// reports every change of a block's medium): for consumers of
	// block-level events only, such as a publisher of vLLM's events. When
	// blocks move, most of the cost of events is the UnitMoved of each of
	// their units.
	BlockEventsOnly bool
	// HashSeed seeds the chain hash of token blocks (radix.Hasher). Caches
	// whose events are compared by a router should share it.
	HashSeed uint64
	// MaxBlocks bounds the token blocks the prefix tree keeps, the
	// cache's metadata. Blocks that hold bytes or that live sequences use
	// are bounded by the tiers and the sequences; the others (hollow:
	// dropped, kept for the cached blocks below them) are removed, least
	// recently hollowed first and with their subtrees, whenever the tree
	// holds more (see Stats.PrunedBlocks). 0 means twice the token blocks
	// the tiers hold together, and at least 1024; use math.MaxInt for no
	// bound.
	MaxBlocks int
	// BlockKeys makes the policy of each arena whose pool has several
	// units per block (a per-layer or per-head layout) track one key per
	// token block instead of one per unit: the UnitID of the block's
	// first unit in the pool, inserted with an Entry whose Size is the
	// pool's units per block and whose Layer is 0 (PoolInfo.KeyUnits).
	// A block's units in a pool then leave a tier together, when none of
	// them there is pinned (with an Engine, while a long operation holds
	// a reservation, a GPU victim block whose slots an operation does not
	// all take is dropped rather than moved down),
	// and the policy is told of a block once where it was told of each
	// unit (a block's hits once per operation): the policy's share of a
	// miss or a decode step is paid per block, and a miss costs about
	// 0.73 times as much (BENCHMARKS.md, "Block keys"). Use it when the
	// units of a block share fate, as they do under dense attention,
	// sliding windows included (each window is a pool of its own). Leave
	// it off for sparse access that pins a few units of each block (BSA),
	// where a block's unselected units could otherwise be evicted on
	// their own, and for a policy that weighs units by layer.
	BlockKeys bool
	// PartialReuse makes a dense Acquire reuse the leading tokens of a
	// cached block that the prompt's first uncached block agrees with
	// (TensorRT-LLM's partial reuse): the prompt's block gets a fresh
	// private block filled by copying the cached one (copy on write, as
	// Truncate and Fork do), and Plan.Compute starts after the tokens
	// that agree (Plan.PartialTokens). With Request.ComputeLast, the
	// block that holds the prompt's last token is reused this way up to
	// the token before it. A block is reused only when it is whole (every
	// unit holds bytes, none restored by a live sparse sequence that has
	// not declared it written), when pinning it for the copy leaves the
	// prompt room (else the block is computed whole, as Admit says), and,
	// with Config.Recompute, when loading its units that are not on the
	// GPU (TierConfig.Link; a copy between GPU slots is taken as free) is
	// strictly cheaper than recomputing the tokens that agree (their
	// share of the block's recompute cost). The copy moves whole units:
	// its slots' positions past the agreeing tokens hold the cached
	// block's KV until the server writes its own, so with a
	// TransferEngine the server waits for the copy (Plan.Loading,
	// Readiness) before it computes, as for any load; a failed copy is in
	// Readiness.Recompute, the block from its first token. An Acquire that
	// runs in steps (a prompt of more units than a step's; see Long
	// operations in the package doc) holds the block it copies, from the
	// end of its first phase to the copy, with pins and a reference, so
	// that its other steps do not evict it and another sequence's
	// Truncate copies it on write rather than rewriting it. Off by
	// default: a prompt that agrees with a cached block on a few tokens
	// then computes the block whole.
	PartialReuse bool
}

// tierName returns the name of the i-th tier (from 0) of cfg.
func tierName(cfg TierConfig, i int) string {
	switch {
	case cfg.Name != "":
		return cfg.Name
	case i == 0:
		return "GPU"
	case i == 1:
		return "CPU"
	}
	return Tier(i + 1).String()
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
