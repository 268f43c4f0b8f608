package kvcache

import "fmt"

// EventKind says what an Event reports.
type EventKind uint8

const (
	// BlockStored: a token block became reusable (committed to the prefix
	// tree). Hash, ParentHash, Tokens, Namespace, LoRA and Tier (GPU) are
	// set.
	BlockStored EventKind = iota + 1
	// BlockRemoved: a block stopped being known (its node left the tree).
	// Hash is set.
	BlockRemoved
	// UnitOffloaded: one unit of a block moved from the GPU to the CPU.
	UnitOffloaded
	// UnitOnboarded: one unit moved from the CPU to the GPU.
	UnitOnboarded
	// UnitDropped: one unit lost its bytes (From says where it was). Its
	// block stays known until BlockRemoved.
	UnitDropped
	// AllCleared: Clear forgot every block.
	AllCleared
	// UnitRestored: a dropped unit of a cached block got bytes again on the
	// GPU (recomputed, or merged from a sequence that computed it).
	UnitRestored
)

// String returns the kind's name.
func (k EventKind) String() string {
	switch k {
	case BlockStored:
		return "stored"
	case BlockRemoved:
		return "removed"
	case UnitOffloaded:
		return "offloaded"
	case UnitOnboarded:
		return "onboarded"
	case UnitDropped:
		return "dropped"
	case AllCleared:
		return "cleared"
	case UnitRestored:
		return "restored"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event reports a change of the cache that a KV-aware router or a monitor
// cares about. Only blocks in the prefix tree produce events: a sequence's
// private (partial) block is invisible until it fills.
type Event struct {
	Kind EventKind
	// Hash is the block's chain hash (radix.Node.Hash).
	Hash uint64
	// ParentHash is the previous block's hash when HasParent.
	ParentHash uint64
	HasParent  bool
	// Tokens are the block's tokens (BlockStored only). The slice is the
	// event's own copy.
	Tokens []uint32
	// Namespace and LoRA are the block's keys.
	Namespace string
	LoRA      string
	// Slice and Pool name the unit of a tier event.
	Slice int
	Pool  int
	// From and To are the unit's tiers before and after a tier event; Tier
	// of a stored block is To (GPU).
	From, To Tier
}

// emitTier queues a tier event for unit u.
func (c *Cache) emitTier(u UnitID, from, to Tier) {
	if !c.events.enabled() {
		return
	}
	n := c.blocks[c.blockOf(u)].node
	if n == nil {
		return
	}
	k := UnitDropped
	switch {
	case to == CPU:
		k = UnitOffloaded
	case to == GPU && from == Dropped:
		k = UnitRestored
	case to == GPU:
		k = UnitOnboarded
	}
	ph, hp := n.ParentHash()
	keys := n.Keys()
	s := c.sliceOf(u)
	c.events.emit(Event{Kind: k, Hash: n.Hash(), ParentHash: ph, HasParent: hp,
		Namespace: keys.Namespace, LoRA: keys.LoRA, Slice: s, Pool: int(c.slicePool[s]), From: from, To: to})
}

// emitBlock queues a stored or removed event for block b.
func (c *Cache) emitBlock(kind EventKind, b int32) {
	if !c.events.enabled() {
		return
	}
	n := c.blocks[b].node
	if n == nil {
		return
	}
	ph, hp := n.ParentHash()
	keys := n.Keys()
	e := Event{Kind: kind, Hash: n.Hash(), ParentHash: ph, HasParent: hp, Namespace: keys.Namespace, LoRA: keys.LoRA}
	if kind == BlockStored {
		e.Tokens = append([]uint32(nil), n.Tokens()...)
		e.To = GPU
	}
	c.events.emit(e)
}
