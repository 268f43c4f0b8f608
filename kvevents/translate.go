package kvevents

import (
	"strings"

	"github.com/kvtier/kvtier/kvcache"
)

// Translator turns a kvcache.Cache's events into vLLM's block-level
// events, in an order consumers rely on: a block's store on a new medium
// before its removal from the old one, and parents before children (the
// cache emits blocks parent first).
//
// The mapping:
//   - kvcache.BlockStored becomes a BlockStored on the tier's medium;
//     consecutive ones that continue each other (a child right after its
//     parent, on the same medium, under the same LoRA) are merged into one
//     run, as vLLM publishes a request's blocks.
//   - kvcache.BlockMoved to a tier becomes a BlockStored there, then a
//     BlockRemoved from the old medium (none when the block came back from
//     Dropped); to Dropped, a BlockRemoved from the old medium.
//   - kvcache.BlockRemoved becomes a BlockRemoved from the block's medium,
//     unless it was Dropped already (removed before).
//   - kvcache.AllCleared becomes AllBlocksCleared; UnitMoved events are
//     not published (BlockMoved summarizes them).
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
// A Translator keeps each announced block's medium (8 bytes and a map
// entry per block) to know where a removed block was. It is not safe for
// concurrent use.
type Translator struct {
	media map[uint64]kvcache.Tier
	names []string
}

// NewTranslator returns a Translator for the events of c.
func NewTranslator(c *kvcache.Cache) *Translator {
	tr := &Translator{media: make(map[uint64]kvcache.Tier)}
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
			tr.media[e.Hash] = e.To
			dst = tr.store(dst, e, e.To)
		case kvcache.BlockMoved:
			tr.media[e.Hash] = e.To
			if e.To != kvcache.Dropped {
				dst = tr.store(dst, e, e.To)
			}
			if e.From != kvcache.Dropped {
				dst = append(dst, BlockRemoved{BlockHashes: []uint64{e.Hash}, Medium: tr.Medium(e.From)})
			}
		case kvcache.BlockRemoved:
			if m, ok := tr.media[e.Hash]; ok && m != kvcache.Dropped {
				dst = append(dst, BlockRemoved{BlockHashes: []uint64{e.Hash}, Medium: tr.Medium(m)})
			}
			delete(tr.media, e.Hash)
		case kvcache.AllCleared:
			clear(tr.media)
			dst = append(dst, AllBlocksCleared{})
		}
	}
	return dst
}

// store appends a BlockStored of e's block on tier t, extending the last
// event when it is a run this block continues.
func (tr *Translator) store(dst []Event, e *kvcache.Event, t kvcache.Tier) []Event {
	medium := tr.Medium(t)
	var extra []any
	for _, x := range e.Extra {
		extra = append(extra, x.Value)
	}
	if n := len(dst); n > 0 && e.HasParent {
		if run, ok := dst[n-1].(BlockStored); ok && run.Medium == medium && run.LoRAName == e.LoRA &&
			run.BlockSize == e.BlockSize && run.BlockHashes[len(run.BlockHashes)-1] == e.ParentHash {
			run.BlockHashes = append(run.BlockHashes, e.Hash)
			run.TokenIDs = append(run.TokenIDs, e.Tokens...)
			if run.ExtraKeys != nil || extra != nil {
				for len(run.ExtraKeys) < len(run.BlockHashes)-1 {
					run.ExtraKeys = append(run.ExtraKeys, nil)
				}
				run.ExtraKeys = append(run.ExtraKeys, extra)
			}
			dst[n-1] = run
			return dst
		}
	}
	s := BlockStored{BlockHashes: []uint64{e.Hash}, TokenIDs: append([]uint32(nil), e.Tokens...), BlockSize: e.BlockSize,
		Medium: medium, LoRAName: e.LoRA}
	if e.HasParent {
		s.ParentBlockHash = Ptr(e.ParentHash)
	}
	if extra != nil {
		s.ExtraKeys = [][]any{extra}
	}
	return append(dst, s)
}
