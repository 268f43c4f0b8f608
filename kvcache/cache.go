package kvcache

import (
	"fmt"
	"math/bits"
	"sync"

	"github.com/kvtier/kvtier/costmodel"
	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/layout"
	"github.com/kvtier/kvtier/radix"
)

// Cache is a tiered KV cache: it owns the GPU and CPU slot arenas, the prefix
// tree of reusable token blocks, the sequences and their block tables, and
// one eviction policy per (tier, pool). Build one with New; the zero Cache is
// not usable.
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

	lay         *layout.Layout
	blockTokens int
	numSlices   int
	sliceShift  uint
	slicePool   []int32 // slice -> pool
	sliceLayer  []int32 // slice -> KV layer, -1 when the unit spans several
	kvLayers    int
	layers      int
	queryHeads  int
	headGroup   int // query heads per stored KV head
	storedHeads int
	layerKV     []int32 // model layer -> KV layer
	sliceFor    []int   // kvLayer*storedHeads + head -> slice
	sliceHead   []int   // slice -> KV head, -1 when it holds every head
	pools       []poolGeom
	gpu, cpu    []*arena // per pool

	tree  *radix.Tree[int32]
	cost  *costmodel.Model
	mover Mover

	ids unitIDs
	// Unit state, indexed by ix(UnitID) (block<<sliceShift | slice).
	uTier []Tier
	uSlot []int32
	uPins []int32

	blocks     []blockRec
	freeBlocks []int32
	gcQueue    []int32
	// hollowHead and hollowTail delimit the list of hollow nodes, least
	// recently hollowed first; maxBlocks is the tree's budget (see
	// metadata.go).
	hollowHead, hollowTail int32
	hollowCount            int
	maxBlocks              int

	seqs    map[SeqID]*sequence
	nextSeq SeqID
	// writing counts the private full blocks of live sequences by chain
	// hash (see commit.go).
	writing map[uint64]int32

	tx      txn
	scratch scratch
	st      counters

	// poisoned is the ErrPolicy error of the first policy that refused an
	// Insert; once set, every mutating call returns it (see ErrPolicy).
	poisoned error

	events eventLog
	// snap is the Stats at the end of the last operation, which a
	// callback of the running one sees (see lock.go).
	snap Stats
}

// New validates cfg and returns a Cache. Errors wrap ErrInvalidConfig and
// name the bad field.
func New(cfg Config) (*Cache, error) {
	l := cfg.Layout
	if l == nil || l.UnitsPerBlock() == 0 {
		return nil, fmt.Errorf("%w: Layout is nil or not built by layout.New", ErrInvalidConfig)
	}
	if cfg.GPU.Units == 0 && cfg.GPU.Bytes == 0 {
		return nil, fmt.Errorf("%w: GPU capacity is zero", ErrInvalidConfig)
	}
	if cfg.EventBuffer < 0 {
		return nil, fmt.Errorf("%w: EventBuffer %d is negative", ErrInvalidConfig, cfg.EventBuffer)
	}
	if cfg.MaxBlocks < 0 {
		return nil, fmt.Errorf("%w: MaxBlocks %d is negative", ErrInvalidConfig, cfg.MaxBlocks)
	}
	lp := l.Pools()
	gpuSlots, err := splitCapacity("GPU", cfg.GPU, lp)
	if err != nil {
		return nil, err
	}
	cpuSlots, err := splitCapacity("CPU", cfg.CPU, lp)
	if err != nil {
		return nil, err
	}
	for p, n := range gpuSlots {
		if n == 0 {
			return nil, fmt.Errorf("%w: GPU capacity %+v gives pool %d (unit %d bytes) no slot", ErrInvalidConfig, cfg.GPU, p, lp[p].UnitBytes)
		}
	}
	if cfg.CostModel != nil {
		if err := cfg.CostModel.Validate(); err != nil {
			return nil, fmt.Errorf("%w: CostModel: %w", ErrInvalidConfig, err)
		}
	}
	clock := cfg.Clock
	if clock == nil {
		clock = eviction.NewSystemClock()
	}
	m := l.Model()
	c := &Cache{
		lay:         l,
		blockTokens: l.TokensPerUnit(),
		numSlices:   l.UnitsPerBlock(),
		kvLayers:    m.KVLayers(),
		layers:      m.Layers,
		queryHeads:  m.QueryHeads,
		headGroup:   m.QueryHeads / m.StoredHeads(),
		storedHeads: m.StoredHeads(),
		mover:       cfg.Mover,
		seqs:        make(map[SeqID]*sequence),
		hollowHead:  noBlock,
		hollowTail:  noBlock,
		writing:     make(map[uint64]int32),
		nextSeq:     1,
	}
	if cfg.CostModel != nil {
		cm := *cfg.CostModel
		c.cost = &cm
	}
	c.sliceShift = uint(bits.Len(uint(c.numSlices - 1)))
	if c.ids, err = newUnitIDs(c.sliceShift); err != nil {
		return nil, err
	}
	c.pools = make([]poolGeom, len(lp))
	for i, p := range lp {
		c.pools[i] = poolGeom{unitBytes: p.UnitBytes, window: p.Window, unitsPerBlock: p.UnitsPerBlock}
	}
	c.maxBlocks = cfg.MaxBlocks
	if c.maxBlocks == 0 {
		c.maxBlocks = defaultMaxBlocks(c.pools, gpuSlots, cpuSlots)
	}
	c.slicePool = make([]int32, c.numSlices)
	c.sliceLayer = make([]int32, c.numSlices)
	for i := range c.numSlices {
		s, err := l.Slice(i)
		if err != nil {
			return nil, fmt.Errorf("%w: Layout: %w", ErrInvalidConfig, err)
		}
		c.slicePool[i] = int32(s.Pool)
		c.sliceLayer[i] = int32(s.KVLayer)
		c.pools[s.Pool].slices = append(c.pools[s.Pool].slices, i)
	}
	c.sliceHead = make([]int, c.numSlices)
	for i := range c.numSlices {
		s, _ := l.Slice(i)
		c.sliceHead[i] = s.KVHead
	}
	c.layerKV = make([]int32, c.layers)
	for layer := range c.layers {
		k, err := m.KVLayerOf(layer)
		if err != nil {
			return nil, fmt.Errorf("%w: Layout: %w", ErrInvalidConfig, err)
		}
		c.layerKV[layer] = int32(k)
	}
	c.sliceFor = make([]int, c.kvLayers*c.storedHeads)
	for k := range c.kvLayers {
		for h := range c.storedHeads {
			s, err := l.SliceOf(k, h)
			if err != nil {
				return nil, fmt.Errorf("%w: Layout: %w", ErrInvalidConfig, err)
			}
			c.sliceFor[k*c.storedHeads+h] = s
		}
	}
	gpuFactory, cpuFactory := cfg.GPUPolicy, cfg.CPUPolicy
	if gpuFactory == nil {
		gpuFactory = LRUFactory
	}
	if cpuFactory == nil {
		cpuFactory = LRUFactory
	}
	for p := range lp {
		ga, err := c.makeArena(GPU, p, gpuSlots[p], lp[p].UnitBytes, clock, gpuFactory)
		if err != nil {
			return nil, err
		}
		ca, err := c.makeArena(CPU, p, cpuSlots[p], lp[p].UnitBytes, clock, cpuFactory)
		if err != nil {
			return nil, err
		}
		c.gpu = append(c.gpu, ga)
		c.cpu = append(c.cpu, ca)
	}
	c.tree, err = radix.NewTree[int32](c.blockTokens, cfg.HashSeed)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	c.events.init(cfg.Events, cfg.EventBuffer)
	c.snap = c.stats()
	return c, nil
}

func (c *Cache) makeArena(t Tier, pool, slots int, unitBytes int64, clock eviction.Clock, f PolicyFactory) (*arena, error) {
	p, n, err := callFactory(f, PoolInfo{Tier: t, Pool: pool, Slots: slots, UnitBytes: unitBytes, Clock: clock})
	if err != nil {
		return nil, fmt.Errorf("%w: %s policy of pool %d: %w", ErrInvalidConfig, t, pool, err)
	}
	if p == nil {
		return nil, fmt.Errorf("%w: %s policy factory returned nil for pool %d", ErrInvalidConfig, t, pool)
	}
	if n != 0 {
		return nil, fmt.Errorf("%w: %s policy of pool %d is not empty (%d keys)", ErrInvalidConfig, t, pool, n)
	}
	return newArena(c, t, pool, slots, p), nil
}

// arenaOf returns the arena of tier t and pool p.
func (c *Cache) arenaOf(t Tier, p int) *arena {
	if t == CPU {
		return c.cpu[p]
	}
	return c.gpu[p]
}

// Layout returns the layout the cache was built with.
func (c *Cache) Layout() *layout.Layout { return c.lay }

// BlockTokens returns the number of tokens per token block.
func (c *Cache) BlockTokens() int { return c.blockTokens }

// Slots returns the number of slots of tier t in pool p, or 0 for a bad tier
// or pool.
func (c *Cache) Slots(t Tier, p int) int {
	if p < 0 || p >= len(c.pools) || (t != GPU && t != CPU) {
		return 0
	}
	return c.arenaOf(t, p).capacity()
}

// Pools returns the number of pools (slot arenas per tier).
func (c *Cache) Pools() int { return len(c.pools) }

// SlicePool returns the pool of slice s, or -1 when s is out of range.
func (c *Cache) SlicePool(s int) int {
	if s < 0 || s >= c.numSlices {
		return -1
	}
	return int(c.slicePool[s])
}
