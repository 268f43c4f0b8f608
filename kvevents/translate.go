package kvevents

import (
	"slices"
	"strings"

	"github.com/kvtier/kvtier/kvcache"
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
// adapters, it does not number them). A namespace has no field of its
// own: vLLM's cache_salt is a request field whose effect is in the block
// hashes, and kvtier's namespace is in its hashes the same way (two
// namespaces never share a hash, see radix/HASHING.md). A router that
// ignores the salt may send a tenant to a server that holds the same
// tokens under another namespace; that server computes them again and
// never serves the other tenant's KV. Extra keys become one entry per
// block: the block's extra key values.
//
// A Translator keeps, per block of the cache's prefix tree, what it needs
// to announce the block again: its parent, children, media, tokens and
// extra keys (about 100 bytes plus 4 per token). It is not safe for
// concurrent use.
type Translator struct {
	blocks map[uint64]*block
	names  []string
}

// block is the Translator's record of a block of the cache's tree.
type block struct {
	parent    uint64
	hasParent bool
	// medium is where the block's bytes are (Dropped: not whole);
	// announced the medium consumers were told (Dropped: none).
	medium, announced kvcache.Tier
	lora              string
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
			b.set(e)
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
				b.set(e)
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

// set copies what a BlockStored of e's block carries.
func (b *block) set(e *kvcache.Event) {
	b.lora, b.blockSize = e.LoRA, e.BlockSize
	b.tokens = append(b.tokens[:0], e.Tokens...)
	b.extra = b.extra[:0]
	for _, x := range e.Extra {
		b.extra = append(b.extra, x.Value)
	}
	if len(b.extra) == 0 {
		b.extra = nil
	}
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
