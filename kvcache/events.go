package kvcache

import (
	"fmt"

	"github.com/kvtier/kvtier/radix"
)

// EventKind says what an Event reports.
type EventKind uint8

const (
	// BlockStored: a token block became reusable (committed to the prefix
	// tree, or adopted from a store by Cache.Adopt). Hash, ParentHash,
	// Tokens, Namespace, LoRA and To (GPU, or the tier Adopt placed it
	// on) are set.
	BlockStored EventKind = iota + 1
	// BlockRemoved: a block stopped being known (its node left the tree).
	// Hash is set.
	BlockRemoved
	// UnitMoved: one unit of a block changed tier, From one To another;
	// either may be Dropped. A move down the tiers is an offload, up to the
	// GPU an onboard, to Dropped a drop (the block stays known until
	// BlockRemoved), from Dropped a restore (recomputed, or merged from a
	// sequence that computed it). Not queued with
	// Config.BlockEventsOnly.
	UnitMoved
	// AllCleared: Clear forgot every block.
	AllCleared
	// BlockMoved: the block's medium changed, From one To another (see
	// Medium): the block as a whole, so that a consumer that wants
	// vLLM's block-level view need not count units. Hash, ParentHash,
	// Namespace and LoRA are set, and, unless To is Dropped, Tokens,
	// BlockSize and Extra. It follows the UnitMoved that changed it.
	BlockMoved
)

// String returns the kind's name.
func (k EventKind) String() string {
	switch k {
	case BlockStored:
		return "stored"
	case BlockRemoved:
		return "removed"
	case UnitMoved:
		return "moved"
	case AllCleared:
		return "cleared"
	case BlockMoved:
		return "block moved"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event reports a change of the cache that a KV-aware router or a monitor
// cares about. Only blocks in the prefix tree produce events: a sequence's
// private block is invisible until it is committed.
type Event struct {
	Kind EventKind
	// Hash is the block's chain hash (radix.Node.Hash).
	Hash uint64
	// ParentHash is the previous block's hash when HasParent.
	ParentHash uint64
	HasParent  bool
	// Tokens are the block's tokens (BlockStored, and BlockMoved to a
	// tier). The slice is the event's own copy.
	Tokens []uint32
	// BlockSize is the tokens per block, and Extra the block's extra
	// keys with their positions in the sequence (BlockStored, and
	// BlockMoved to a tier; Extra is the event's own copy).
	BlockSize int
	Extra     []radix.ExtraKey
	// Namespace and LoRA are the block's keys.
	Namespace string
	LoRA      string
	// Slice and Pool name the unit of a UnitMoved event.
	Slice int
	Pool  int
	// From and To are the unit's tiers before and after a UnitMoved
	// event; To of a stored block is GPU, or the tier Adopt placed it on;
	// for BlockMoved, the block's media before and after.
	From, To Tier
}

// Medium is where a block is as a whole, as its events reported its
// units: GPU when every unit is on the GPU, the lowest tier holding one of
// its units when every unit holds bytes and some are below the GPU (that
// tier bounds how fast the block loads), and Dropped when some unit holds
// no bytes (the block is not reusable as it is). BlockStored gives a
// block's first medium, BlockMoved every change, BlockRemoved its end.
func Medium(units []Tier) Tier {
	m := GPU
	for _, t := range units {
		if t == Dropped {
			return Dropped
		}
		m = max(m, t)
	}
	return m
}

// emitMove queues a UnitMoved event for unit u (unless
// Config.BlockEventsOnly) and, when that changes its block's medium, a
// BlockMoved.
func (c *Cache) emitMove(u UnitID, from, to Tier) {
	if !c.events.enabled() {
		return
	}
	n := c.units.rec(u).node
	if n == nil {
		return
	}
	s := c.units.slice(u)
	if !c.events.blocksOnly {
		ph, hp := n.ParentHash()
		keys := n.Keys()
		c.events.emit(Event{Kind: UnitMoved, Hash: n.Hash(), ParentHash: ph, HasParent: hp,
			Namespace: keys.Namespace, LoRA: keys.LoRA, Slice: s, Pool: c.geom.poolOfSlice(s), From: from, To: to})
	}
	units := c.events.media[c.units.block(u)]
	if units == nil {
		return
	}
	before := Medium(units)
	units[s] = to
	if after := Medium(units); after != before {
		ph, hp := n.ParentHash()
		keys := n.Keys()
		e := Event{Kind: BlockMoved, Hash: n.Hash(), ParentHash: ph, HasParent: hp,
			Namespace: keys.Namespace, LoRA: keys.LoRA, From: before, To: after}
		if after != Dropped {
			// A consumer stores the block on its new medium: it needs
			// what a BlockStored carries.
			e.Tokens = append([]uint32(nil), n.Tokens()...)
			e.BlockSize = c.geom.blockTokens
			e.Extra = append([]radix.ExtraKey(nil), n.Extra()...)
		}
		c.events.emit(e)
	}
}

// emitBlock queues a stored or removed event for block b; a stored
// block's units are on tier to.
func (c *Cache) emitBlock(kind EventKind, b int32, to Tier) {
	if !c.events.enabled() {
		return
	}
	n := c.units.blk(b).node
	if n == nil {
		return
	}
	ph, hp := n.ParentHash()
	keys := n.Keys()
	e := Event{Kind: kind, Hash: n.Hash(), ParentHash: ph, HasParent: hp, Namespace: keys.Namespace, LoRA: keys.LoRA}
	switch kind {
	case BlockStored:
		e.Tokens = append([]uint32(nil), n.Tokens()...)
		e.BlockSize = c.geom.blockTokens
		e.Extra = append([]radix.ExtraKey(nil), n.Extra()...)
		e.To = to
		units := make([]Tier, c.geom.slices)
		for i := range units {
			units[i] = to
		}
		c.events.media[b] = units
	case BlockRemoved:
		delete(c.events.media, b)
	}
	c.events.emit(e)
}
