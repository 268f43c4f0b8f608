package kvcache

import (
	"fmt"
	"sort"

	"github.com/kvtier/kvtier/radix"
)

// UnitKey is the identity of the bytes a Copy moves: which block and which
// slice of it, under which keys, after which parent. A store below the CPU
// that addresses units by content (a directory of files, a Redis shared by
// several servers) names and checks what it holds with it: two units with
// equal keys hold equal bytes in caches built over the same layout, model
// and hash seed. A KeyedEngine receives one per copy.
//
// The slices alias the cache's prefix tree and are valid, unchanged, until
// the transfer's done is called; an engine that keeps them longer copies
// them.
type UnitKey struct {
	// Shared says whether the unit belongs to a block of the prefix tree.
	// When it is false (a sequence's own block, not yet committed, which
	// a sparse sequence may move down), only Unit names it: its bytes
	// mean nothing outside this cache, and Hash, Parent, Tokens and Extra
	// are zero.
	Shared bool
	// Unit is the unit's id in this cache (see UnitID).
	Unit UnitID
	// Hash is the block's chain hash (radix.Hasher with Config.HashSeed),
	// which covers the keys, every token of the prefix and the extra keys.
	Hash uint64
	// Parent is the chain hash of the block before it; HasParent is false
	// for a sequence's first block.
	Parent    uint64
	HasParent bool
	// Depth is the block's position in its sequence, from 1.
	Depth int
	// Slice is the unit's slice in its block (see layout.Layout), and
	// Pool its layout pool.
	Slice, Pool int
	// Keys are the namespace and LoRA the block was computed under.
	Keys radix.Keys
	// Tokens are the block's own tokens and Extra its extra keys (their
	// positions count from the sequence's start).
	Tokens []uint32
	Extra  []radix.ExtraKey
}

// KeyedEngine is a TransferEngine that needs the identity of the units it
// moves, as a store below the CPU does to name and check them. When
// Config.Engine implements it, the cache calls StartKeyed instead of
// Start, with keys[i] naming the unit copies[i] moves; the contract is
// Start's, and keys, like copies, belong to the engine until done.
//
// An engine that finds a unit absent from a store (never written there,
// evicted by the store, or lost) reports it with an error wrapping
// ErrUnitMissing, and one whose stored bytes fail their check (a header
// naming another unit, a bad checksum, a short value) with one wrapping
// ErrUnitCorrupt. The cache treats both as any failed load (the units are
// recomputed, see Cache.Poll) and counts them on the store tier they were
// read from (TierStats.Missing, TierStats.Corrupt).
//
// Stores reports whether the engine keeps tier t's bytes in such a store:
// Cache.Adopt registers units only on those tiers (bytes in memory, read
// by slot with no check, would be served as whatever the slot holds).
type KeyedEngine interface {
	TransferEngine
	StartKeyed(copies []Copy, keys []UnitKey, done func(error))
	Stores(t Tier) bool
}

// unitKeys returns the identity of the unit each of copies moves, in a
// new slice (the engine keeps it until done). A copy into the GPU (a load,
// a copy-on-write) is named by the owner of its source slot: the loaded
// unit stays there until its load is done, and a copy-on-write reads a
// cached block's unit (its destination belongs to a private block with no
// content identity). A copy down the tiers (a move down, a backup) is
// named by the owner of its destination slot, reserved for the unit until
// the transfer is done: its source slot may already belong to the unit
// that refills it.
func (c *Cache) unitKeys(copies []Copy) []UnitKey {
	keys := make([]UnitKey, len(copies))
	for i, cp := range copies {
		if cp.To == GPU {
			keys[i] = c.unitKey(c.tiers.arena(cp.From, cp.Pool).owner[cp.FromSlot], cp.Pool)
		} else {
			keys[i] = c.unitKey(c.tiers.arena(cp.To, cp.Pool).owner[cp.ToSlot], cp.Pool)
		}
	}
	return keys
}

// unitKey returns the identity of unit u of pool p.
func (c *Cache) unitKey(u UnitID, p int) UnitKey {
	k := UnitKey{Unit: u, Slice: c.units.slice(u), Pool: p}
	if u == noUnit {
		return k
	}
	r := c.units.rec(u)
	n := r.node
	if n == nil && r.twin >= 0 {
		n = c.units.blk(r.twin).node
	}
	if n == nil {
		return k
	}
	k.Shared = true
	k.Hash = n.Hash()
	k.Parent, k.HasParent = n.ParentHash()
	k.Depth = n.Depth()
	k.Keys = n.Keys()
	k.Tokens = n.Tokens()
	k.Extra = n.Extra()
	return k
}

// UnitKeys appends to dst the identity of every unit of the full blocks of
// req's prompt, block by block and, in a block, slice by slice: the keys
// under which a store below the CPU holds them. Tokens and Extra alias
// req's slices. It does not take the cache's lock. It returns an error
// wrapping ErrInvalidRequest for bad extra keys. A lookup that asks a
// store about a few units of a long prompt uses PromptKeys instead, which
// builds only the keys it is asked for.
func (c *Cache) UnitKeys(dst []UnitKey, req Request) ([]UnitKey, error) {
	pk, err := c.PromptKeys(req)
	if err != nil {
		return dst, err
	}
	for i := range pk.Blocks() {
		for sl := range c.geom.slices {
			dst = append(dst, pk.Unit(i, sl))
		}
	}
	return dst, nil
}

// PromptKeys names the units of the full blocks of one request's prompt
// (see UnitKey) without building a key per unit: the prompt is hashed once
// (a chain hash per block), and Unit builds the key of any unit on demand.
// tierstore.Lookup asks a shared store about one unit per block, and only
// of the blocks it probes, so that a 32k-token prompt costs a few dozen
// keys, not one per unit. A PromptKeys aliases the request's Tokens and
// Extra; it is not safe for concurrent use.
type PromptKeys struct {
	keys        radix.Keys
	tokens      []uint32
	extra       []radix.ExtraKey
	hashes      []uint64
	blockTokens int
	slicePool   []int32
}

// PromptKeys hashes the full blocks of req's prompt, without the cache's
// lock. It returns an error wrapping ErrInvalidRequest for bad extra keys.
func (c *Cache) PromptKeys(req Request) (PromptKeys, error) {
	keys := radix.Keys{Namespace: req.Namespace, LoRA: req.LoRA}
	hashes, err := c.tree.Hasher().Hash(nil, keys, req.Tokens, req.Extra)
	if err != nil {
		return PromptKeys{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	return PromptKeys{keys: keys, tokens: req.Tokens, extra: req.Extra, hashes: hashes,
		blockTokens: c.geom.blockTokens, slicePool: c.geom.slicePool}, nil
}

// Blocks returns the number of full blocks of the prompt.
func (k *PromptKeys) Blocks() int { return len(k.hashes) }

// Unit returns the identity of unit slice of full block i of the prompt,
// as UnitKeys would give it. It panics when i or slice is out of range,
// like an index expression.
func (k *PromptKeys) Unit(i, slice int) UnitKey {
	B := k.blockTokens
	u := UnitKey{Shared: true, Unit: noUnit, Hash: k.hashes[i], Depth: i + 1, Slice: slice, Pool: int(k.slicePool[slice]),
		Keys: k.keys, Tokens: k.tokens[i*B : (i+1)*B]}
	if i > 0 {
		u.Parent, u.HasParent = k.hashes[i-1], true
	}
	// The extra keys are sorted by position (Hash checked it).
	start := sort.Search(len(k.extra), func(j int) bool { return k.extra[j].Pos >= i*B })
	end := sort.Search(len(k.extra), func(j int) bool { return k.extra[j].Pos >= (i+1)*B })
	if end > start {
		u.Extra = k.extra[start:end]
	}
	return u
}
