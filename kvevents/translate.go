package kvevents

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/radix"
)

// Translator turns a kvcache.Cache's events into vLLM's block-level
// events, in the order consumers rely on: a block's store on a new medium
// before its removal from the old one, and a parent before its children.
//
// A router scores a server by the longest prefix of a request's blocks
// the server holds, and vLLM's consumers drop a BlockStored whose parent
// they do not know. kvtier's policies, though, evict units, not leaves
// first: a parent can lose its bytes while a child keeps them. Such a
// child still saves its server work (the cache recomputes the parent and
// loads the child), but a prefix score cannot count it and a consumer
// that needs parents cannot place it. So the Translator announces exactly
// the reachable blocks: those that hold bytes and whose ancestors all do.
// When a block stops being reachable, it and then its announced
// descendants are removed, children first; when it becomes reachable
// again (its parent recomputed), it and its descendants that hold bytes
// are stored again, parents first. Every BlockStored it sends therefore
// has a parent the consumer holds, and every BlockRemoved names a block
// on the medium the consumer holds it on.
//
// The mapping:
//   - kvcache.BlockStored becomes a BlockStored on the tier's medium;
//     consecutive ones that continue each other (a child right after its
//     parent, on the same medium, under the same LoRA) are merged into one
//     run, as vLLM publishes a request's blocks.
//   - kvcache.BlockMoved to a tier becomes a BlockStored there, then a
//     BlockRemoved from the old medium; to Dropped, BlockRemoveds (see
//     above).
//   - kvcache.BlockRemoved becomes a BlockRemoved from the block's medium
//     if it was announced.
//   - kvcache.AllCleared becomes AllBlocksCleared; UnitMoved events are
//     not published (BlockMoved summarizes them): a cache whose events
//     only feed a Translator sets kvcache.Config.BlockEventsOnly.
//
// Medium names are the cache's tier names upper-cased ("GPU", "CPU",
// "DISK", ...). LoRA maps to lora_name (lora_id is not set: kvtier names
// adapters, it does not number them).
//
// A namespace is a tenant, as vLLM's cache_salt is, and goes on the wire
// where vLLM puts the salt: as the last of the extra keys of a chain's
// first block (the block without a parent). kvtier's block hashes differ
// between namespaces already (radix/HASHING.md), but a router that
// computes its own keys from the events' tokens (llm-d's indexer does)
// sees the same tokens under two tenants as one block unless the salt is
// among the extra keys: it would credit one tenant with the other's
// blocks, and drop a tenant's entry when the other's copy goes. With the
// salt, such a router keeps them apart (and, unless it salts the
// prompts it scores the same way, finds no tenant's blocks rather than
// another tenant's). OmitNamespace leaves the salt out.
//
// Extra keys become one entry per block, shaped by ExtraKeys: the block's
// extra key values as integers (ExtraKeyValues, the default), or as vLLM
// writes a multimodal item's key (ExtraKeyPairs, ExtraKeyIdentifiers),
// with the LoRA name first as vLLM puts it.
//
// A Translator keeps, per block of the cache's prefix tree, what it needs
// to announce the block again: its parent, children, media, tokens and
// extra keys (about 100 bytes plus 4 per token). It is not safe for
// concurrent use.
type Translator struct {
	// ExtraKeys shapes the extra keys of BlockStored; set it before the
	// first Append.
	ExtraKeys ExtraKeyShape
	// OmitNamespace leaves the namespace (cache_salt) out of the extra
	// keys; set it before the first Append.
	OmitNamespace bool

	blocks map[uint64]*block
	names  []string
}

// ExtraKeyShape is how a Translator writes a block's extra keys.
type ExtraKeyShape int

const (
	// ExtraKeyValues writes each extra key's Value as an unsigned
	// integer: kvtier's own keys, read back by a kvtier consumer.
	ExtraKeyValues ExtraKeyShape = iota
	// ExtraKeyPairs writes the block's entry as vLLM does for a
	// multimodal request before version 0.18: the LoRA name (if any),
	// then each key as [identifier, offset] (the identifier the Value in
	// 16 lower-case hex digits, the offset the key's token position
	// within the block), then the namespace on a chain's first block.
	ExtraKeyPairs
	// ExtraKeyIdentifiers is ExtraKeyPairs with each key as its bare
	// identifier string, as vLLM writes it from version 0.18.
	ExtraKeyIdentifiers
)

// block is the Translator's record of a block of the cache's tree.
type block struct {
	parent    uint64
	hasParent bool
	// medium is where the block's bytes are (Dropped: not whole);
	// announced the medium consumers were told (Dropped: none).
	medium, announced kvcache.Tier
	lora, namespace   string
	blockSize         int
	tokens            []uint32
	extra             []any
	children          []uint64
}

// NewTranslator returns a Translator for the events of c. It must see
// every event c emits from its creation on (create it with the cache).
func NewTranslator(c *kvcache.Cache) *Translator {
	tr := &Translator{blocks: make(map[uint64]*block)}
	for t := kvcache.GPU; ; t++ {
		name := c.TierName(t)
		if name == "" {
			break
		}
		tr.names = append(tr.names, strings.ToUpper(name))
	}
	return tr
}

// Medium returns the medium name of tier t.
func (tr *Translator) Medium(t kvcache.Tier) string {
	if t < kvcache.GPU || int(t) > len(tr.names) {
		return ""
	}
	return tr.names[t-1]
}

// Append appends to dst the events that evs translate to and returns it.
func (tr *Translator) Append(dst []Event, evs []kvcache.Event) []Event {
	for i := range evs {
		e := &evs[i]
		switch e.Kind {
		case kvcache.BlockStored:
			b := &block{parent: e.ParentHash, hasParent: e.HasParent, medium: e.To, announced: kvcache.Dropped}
			tr.set(b, e)
			tr.blocks[e.Hash] = b
			if p := tr.blocks[e.ParentHash]; e.HasParent && p != nil {
				p.children = append(p.children, e.Hash)
			}
			dst = tr.settle(dst, e.Hash, b)
		case kvcache.BlockMoved:
			b := tr.blocks[e.Hash]
			if b == nil {
				continue // not seen stored: the Translator came late
			}
			b.medium = e.To
			if e.To != kvcache.Dropped {
				tr.set(b, e)
			}
			dst = tr.settle(dst, e.Hash, b)
		case kvcache.BlockRemoved:
			b := tr.blocks[e.Hash]
			if b == nil {
				continue
			}
			dst = tr.retract(dst, e.Hash, b)
			if p := tr.blocks[b.parent]; b.hasParent && p != nil {
				if i := slices.Index(p.children, e.Hash); i >= 0 {
					p.children = slices.Delete(p.children, i, i+1)
				}
			}
			delete(tr.blocks, e.Hash)
		case kvcache.AllCleared:
			clear(tr.blocks)
			dst = append(dst, AllBlocksCleared{})
		}
	}
	return dst
}

// set copies into b what a BlockStored of e's block carries, its extra
// keys in the Translator's shape.
func (tr *Translator) set(b *block, e *kvcache.Event) {
	b.lora, b.namespace, b.blockSize = e.LoRA, e.Namespace, e.BlockSize
	b.tokens = append(b.tokens[:0], e.Tokens...)
	b.extra = b.extra[:0]
	if tr.ExtraKeys != ExtraKeyValues && e.LoRA != "" {
		b.extra = append(b.extra, e.LoRA)
	}
	for _, x := range e.Extra {
		b.extra = append(b.extra, tr.extraKey(x, e.BlockSize))
	}
	if !tr.OmitNamespace && !e.HasParent && e.Namespace != "" {
		b.extra = append(b.extra, e.Namespace)
	}
	if len(b.extra) == 0 {
		b.extra = nil
	}
}

// extraKey writes x in the Translator's shape.
func (tr *Translator) extraKey(x radix.ExtraKey, blockSize int) any {
	switch tr.ExtraKeys {
	case ExtraKeyPairs:
		off := 0
		if blockSize > 0 {
			off = x.Pos % blockSize
		}
		return []any{fmt.Sprintf("%016x", x.Value), off}
	case ExtraKeyIdentifiers:
		return fmt.Sprintf("%016x", x.Value)
	}
	return x.Value
}

// reachable reports whether consumers should hold block b: it holds bytes
// and its parent is announced (or it has none).
func (tr *Translator) reachable(b *block) bool {
	if b.medium == kvcache.Dropped {
		return false
	}
	if !b.hasParent {
		return true
	}
	p := tr.blocks[b.parent]
	return p != nil && p.announced != kvcache.Dropped
}

// settle brings what consumers were told about block h in line with its
// state, and, when that changes whether it is announced, its
// descendants'.
func (tr *Translator) settle(dst []Event, h uint64, b *block) []Event {
	if !tr.reachable(b) {
		return tr.retract(dst, h, b)
	}
	if b.announced == b.medium {
		return dst
	}
	was := b.announced
	dst = tr.store(dst, h, b)
	b.announced = b.medium
	if was != kvcache.Dropped {
		return append(dst, BlockRemoved{BlockHashes: []uint64{h}, Medium: tr.Medium(was)})
	}
	for _, c := range b.children {
		if cb := tr.blocks[c]; cb != nil {
			dst = tr.settle(dst, c, cb)
		}
	}
	return dst
}

// retract removes block h and its announced descendants from consumers,
// children first.
func (tr *Translator) retract(dst []Event, h uint64, b *block) []Event {
	if b.announced == kvcache.Dropped {
		return dst
	}
	for _, c := range b.children {
		if cb := tr.blocks[c]; cb != nil {
			dst = tr.retract(dst, c, cb)
		}
	}
	dst = append(dst, BlockRemoved{BlockHashes: []uint64{h}, Medium: tr.Medium(b.announced)})
	b.announced = kvcache.Dropped
	return dst
}

// store appends a BlockStored of block h on its medium, extending the last
// event when it is a run this block continues.
func (tr *Translator) store(dst []Event, h uint64, b *block) []Event {
	medium := tr.Medium(b.medium)
	if n := len(dst); n > 0 && b.hasParent {
		if run, ok := dst[n-1].(BlockStored); ok && run.Medium == medium && run.LoRAName == b.lora &&
			run.BlockSize == b.blockSize && run.BlockHashes[len(run.BlockHashes)-1] == b.parent {
			run.BlockHashes = append(run.BlockHashes, h)
			run.TokenIDs = append(run.TokenIDs, b.tokens...)
			if run.ExtraKeys != nil || b.extra != nil {
				for len(run.ExtraKeys) < len(run.BlockHashes)-1 {
					run.ExtraKeys = append(run.ExtraKeys, nil)
				}
				run.ExtraKeys = append(run.ExtraKeys, slices.Clone(b.extra))
			}
			dst[n-1] = run
			return dst
		}
	}
	s := BlockStored{BlockHashes: []uint64{h}, TokenIDs: slices.Clone(b.tokens), BlockSize: b.blockSize,
		Medium: medium, LoRAName: b.lora}
	if b.hasParent {
		s.ParentBlockHash = Ptr(b.parent)
	}
	if b.extra != nil {
		s.ExtraKeys = [][]any{slices.Clone(b.extra)}
	}
	return append(dst, s)
}

// Reachable returns the blocks of c that a router can use, with their
// medium names: those that hold bytes and whose ancestors all do. It is
// what the Translator has announced once every event c emitted so far
// went through Append, so a consumer's view (an Index) can be checked
// against it. It calls c.Blocks and has its cost.
func (tr *Translator) Reachable(c *kvcache.Cache) (map[uint64]string, error) {
	blocks, err := c.Blocks(nil)
	if err != nil {
		return nil, err
	}
	byHash := make(map[uint64]*kvcache.CachedBlock, len(blocks))
	for i := range blocks {
		byHash[blocks[i].Hash] = &blocks[i]
	}
	// state: 0 unknown, 1 reachable, 2 not; a chain is walked once.
	state := make(map[uint64]uint8, len(blocks))
	var walk func(b *kvcache.CachedBlock) bool
	walk = func(b *kvcache.CachedBlock) bool {
		if s := state[b.Hash]; s != 0 {
			return s == 1
		}
		ok := b.Medium != kvcache.Dropped
		if ok && b.HasParent {
			p := byHash[b.ParentHash]
			ok = p != nil && walk(p)
		}
		state[b.Hash] = 2
		if ok {
			state[b.Hash] = 1
		}
		return ok
	}
	out := make(map[uint64]string)
	for i := range blocks {
		if walk(&blocks[i]) {
			out[blocks[i].Hash] = tr.Medium(blocks[i].Medium)
		}
	}
	return out, nil
}
