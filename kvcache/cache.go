package kvcache

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/kvtier/kvtier/costmodel"
	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/layout"
	"github.com/kvtier/kvtier/radix"
)

// Cache is a tiered KV cache: it owns the slot arenas of its tiers, the
// prefix tree of reusable token blocks, the sequences and their block
// tables, and one eviction policy per arena (tier and pool). Build one with
// New; the zero Cache is not usable.
//
// Concurrency: a Cache is safe for concurrent use by any number of
// goroutines. One mutex serializes every method, because policies and the
// prefix tree are not goroutine-safe and an operation must see and change
// slots, pins and the tree atomically. The lock is held across Mover calls:
// an operation's rollback restores the exact slots it took, which is only
// correct if no other operation can observe or reuse them meanwhile; a GPU
// Mover normally only enqueues copies, so the hold is short. The event sink
// is called after the lock is released (events are queued under the lock and
// drained in order), so a sink may call the cache.
type Cache struct {
	mu sync.Mutex
	// waiting counts the callers blocked on mu: a long operation lets
	// them in between its slices (see slices.go).
	waiting atomic.Int32
	// sliceUnits is the size of a long operation's steps (see
	// slices.go; tests make it small), and long counts the long
	// operations under way.
	sliceUnits int
	long       int
	// afterStep, when a test sets it, is called between two steps of a
	// long operation (the lock not held) with the operation's method
	// name, so that a test can be the caller a step lets in.
	afterStep func(call string)
	// idle wakes the calls that wait for a sequence a long Commit is
	// committing (see waitIdle).
	idle sync.Cond

	// The parts, each with one job:
	geom   *geometry // what the layout says, immutable (geometry.go)
	units  unitTable // units, block records and the UnitID codec (units.go)
	tiers  tierSet   // the tiers' slot arenas and policies (tiers.go, arena.go)
	tree   *radix.Tree[int32]
	seqs   map[SeqID]*sequence // live sequences (sequence.go)
	tx     txn                 // the running operation's transaction (transaction.go)
	meta   metadata            // the tree's budget and hollow nodes (metadata.go)
	events eventLog            // events waiting for the sink and TakeEvents (eventlog.go)

	// The user's code the cache calls (callbacks.go).
	mover  Mover
	engine TransferEngine
	keyed  KeyedEngine // engine, when it is one
	// blockKeys is Config.BlockKeys (see blockkeys.go).
	blockKeys bool
	// tenants numbers the namespaces with a share of some tier (see
	// shares.go).
	tenants tenants
	// partialReuse is Config.PartialReuse (see partial.go).
	partialReuse bool
	xfer         transfers // transfers in flight (transfers.go)
	wt           writeThrough
	decider      Decider
	recompute    *costmodel.Recompute

	nextSeq SeqID
	// writing counts the private full blocks of live sequences by chain
	// hash (see commit.go).
	writing map[uint64]int32
	// gcQueue holds blocks whose last bytes went, to collect (gc.go).
	gcQueue []int32
	// losses counts the decreases of blocks' held counts (loseBytes),
	// ever: unchanged, no block that was whole has lost a unit.
	losses  uint64
	scratch scratch
	st      counters
	// poisoned is the error of the first breach of a policy's contract;
	// once set, every mutating call returns it (see ErrPolicy).
	poisoned error
	// snap is the Stats at the end of the last operation, which a
	// callback of the running one sees (see lock.go); statsUnchanged says
	// that the running operation changed nothing Stats reports (an Append
	// into a partial block), so snap need not be computed again.
	snap           Stats
	statsUnchanged bool
}

// New validates cfg and returns a Cache. Errors wrap ErrInvalidConfig and
// name the bad field.
func New(cfg Config) (*Cache, error) {
	g, err := newGeometry(cfg.Layout)
	if err != nil {
		return nil, err
	}
	if err := validateConfig(&cfg); err != nil {
		return nil, err
	}
	units, err := newUnitTable(g.sliceShift)
	if err != nil {
		return nil, err
	}
	c := &Cache{
		geom:    g,
		units:   units,
		seqs:    make(map[SeqID]*sequence),
		writing: make(map[uint64]int32),
		nextSeq: 1,
		mover:   cfg.Mover,
		engine:  cfg.Engine,
		decider: cfg.Decider,

		blockKeys:    cfg.BlockKeys,
		partialReuse: cfg.PartialReuse,
		sliceUnits:   defaultSliceUnits,
	}
	c.idle.L = &c.mu
	if cfg.BlockKeys {
		c.scratch.hits = make(map[UnitID]struct{})
	}
	if c.engine != nil {
		c.xfer.init()
		c.tx.recordsMoves = true
		c.keyed, _ = c.engine.(KeyedEngine)
	}
	for i, tc := range cfg.Tiers {
		if tc.WriteThrough {
			c.wt.tier = Tier(i + 1)
		}
	}
	if cfg.Recompute != nil {
		r := *cfg.Recompute
		c.recompute = &r
	}
	if err := c.numberTenants(&cfg); err != nil {
		return nil, err
	}
	slots, err := c.buildTiers(cfg)
	if err != nil {
		return nil, err
	}
	maxBlocks := cfg.MaxBlocks
	if maxBlocks == 0 {
		maxBlocks = defaultMaxBlocks(g.pools, slots)
	}
	c.meta = newMetadata(maxBlocks)
	c.tree, err = radix.NewTree[int32](g.blockTokens, cfg.HashSeed)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	c.events.init(cfg.Events, cfg.EventBuffer)
	c.events.blocksOnly = cfg.BlockEventsOnly
	c.snap = c.stats()
	return c, nil
}

// validateConfig checks the fields of cfg that need no layout.
func validateConfig(cfg *Config) error {
	if n := len(cfg.Tiers); n == 0 || n > MaxTiers {
		return fmt.Errorf("%w: %d tiers, want 1 to %d", ErrInvalidConfig, n, MaxTiers)
	}
	if cfg.Mover != nil && cfg.Engine != nil {
		return fmt.Errorf("%w: both a Mover and an Engine: set one", ErrInvalidConfig)
	}
	if cfg.EventBuffer < 0 {
		return fmt.Errorf("%w: EventBuffer %d is negative", ErrInvalidConfig, cfg.EventBuffer)
	}
	if cfg.MaxBlocks < 0 {
		return fmt.Errorf("%w: MaxBlocks %d is negative", ErrInvalidConfig, cfg.MaxBlocks)
	}
	if cfg.Recompute != nil {
		if err := cfg.Recompute.Validate(); err != nil {
			return fmt.Errorf("%w: Recompute: %w", ErrInvalidConfig, err)
		}
	}
	names := map[string]int{}
	wt := 0
	for i, t := range cfg.Tiers {
		name := tierName(t, i)
		if j, dup := names[name]; dup {
			return fmt.Errorf("%w: tiers %d and %d are both named %q", ErrInvalidConfig, j+1, i+1, name)
		}
		names[name] = i
		if t.Capacity == (Capacity{}) {
			return fmt.Errorf("%w: tier %d (%s) has no capacity", ErrInvalidConfig, i+1, name)
		}
		if err := validateShares(cfg, i, name); err != nil {
			return err
		}
		if t.WriteThrough && i == 0 {
			return fmt.Errorf("%w: tier 1 (%s) has WriteThrough: only a tier below the GPU may", ErrInvalidConfig, name)
		}
		if t.WriteThrough {
			if wt != 0 {
				return fmt.Errorf("%w: tiers %d and %d both have WriteThrough: at most one may", ErrInvalidConfig, wt, i+1)
			}
			wt = i + 1
		}
		if i > 0 && t.Link != (costmodel.Link{}) {
			if err := t.Link.Validate(); err != nil {
				return fmt.Errorf("%w: tier %d (%s) Link: %w", ErrInvalidConfig, i+1, name, err)
			}
		}
	}
	return nil
}

// buildTiers builds the arenas and policies of cfg's tiers and returns the
// slots of each tier per pool.
func (c *Cache) buildTiers(cfg Config) ([][]int, error) {
	g := c.geom
	lp := g.layout.Pools()
	clock := cfg.Clock
	if clock == nil {
		clock = eviction.NewSystemClock()
	}
	var all [][]int
	for i, tc := range cfg.Tiers {
		t := Tier(i + 1)
		name := tierName(tc, i)
		slots, err := splitCapacity(name, tc.Capacity, lp)
		if err != nil {
			return nil, err
		}
		if t == GPU {
			for p, n := range slots {
				if n == 0 {
					return nil, fmt.Errorf("%w: %s capacity %+v gives pool %d (unit %d bytes) no slot", ErrInvalidConfig, name, tc.Capacity, p, lp[p].UnitBytes)
				}
			}
		}
		factory := tc.Policy
		if factory == nil {
			factory = LRUPolicy()
		}
		level := tierLevel{name: name, link: tc.Link}
		if t == GPU {
			level.link = costmodel.Link{}
		}
		for p := range lp {
			info := PoolInfo{Tier: t, TierName: name, Pool: p, Slots: slots[p], UnitBytes: lp[p].UnitBytes, KeyUnits: 1, Clock: clock,
				Recompute: c.recompute, keyBits: int(c.units.genShift)}
			if c.blockKeys {
				info.KeyUnits = lp[p].UnitsPerBlock
			}
			a, err := c.makeArena(info, factory)
			if err != nil {
				return nil, err
			}
			if err := c.shareArena(a, info, tc.Shares, factory); err != nil {
				return nil, err
			}
			level.arenas = append(level.arenas, a)
			c.tiers.forgets = c.tiers.forgets || a.forgetter != nil
		}
		c.tiers.levels = append(c.tiers.levels, level)
		all = append(all, slots)
	}
	return all, nil
}

func (c *Cache) makeArena(info PoolInfo, f PolicyFactory) (*arena, error) {
	p, n, err := callFactory(f, info)
	if err != nil {
		return nil, fmt.Errorf("%w: %s policy of pool %d: %w", ErrInvalidConfig, info.TierName, info.Pool, err)
	}
	if p == nil {
		return nil, fmt.Errorf("%w: %s policy factory returned nil for pool %d", ErrInvalidConfig, info.TierName, info.Pool)
	}
	if n != 0 {
		return nil, fmt.Errorf("%w: %s policy of pool %d is not empty (%d keys)", ErrInvalidConfig, info.TierName, info.Pool, n)
	}
	a := newArena(c, info.Tier, info.Pool, info.Slots, p)
	if info.KeyUnits > 1 {
		a.keyUnits, a.keySlice = info.KeyUnits, c.geom.pools[info.Pool].slices[0]
	}
	return a, nil
}

// Layout returns the layout the cache was built with.
func (c *Cache) Layout() *layout.Layout { return c.geom.layout }

// BlockTokens returns the number of tokens per token block.
func (c *Cache) BlockTokens() int { return c.geom.blockTokens }

// Tiers returns the number of tiers.
func (c *Cache) Tiers() int { return len(c.tiers.levels) }

// TierName returns the name of tier t (TierConfig.Name, or its default),
// "dropped" for Dropped, or "" for a tier the cache does not have.
func (c *Cache) TierName(t Tier) string {
	if t == Dropped {
		return t.String()
	}
	if !c.tiers.valid(t) {
		return ""
	}
	return c.tiers.levels[t-1].name
}

// Slots returns the number of slots of tier t in pool p, or 0 for a bad tier
// or pool.
func (c *Cache) Slots(t Tier, p int) int {
	if p < 0 || p >= len(c.geom.pools) || !c.tiers.valid(t) {
		return 0
	}
	return c.tiers.arena(t, p).capacity()
}

// Pools returns the number of pools (slot arenas per tier).
func (c *Cache) Pools() int { return len(c.geom.pools) }

// SlicePool returns the pool of slice s, or -1 when s is out of range.
func (c *Cache) SlicePool(s int) int {
	if s < 0 || s >= c.geom.slices {
		return -1
	}
	return c.geom.poolOfSlice(s)
}
