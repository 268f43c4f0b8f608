// Package kvevents publishes KV-cache events in vLLM's wire format, so that
// KV-aware routers written against vLLM (llm-d's KV-cache indexer, NVIDIA
// Dynamo, ...) can consume a kvtier server's events without changes.
//
// The wire types (BlockStored, BlockRemoved, AllBlocksCleared, Batch), the
// Encoder, Decode, Publisher, Subscriber and Index know nothing of kvcache:
// a router can use them alone. Translator maps a kvcache.Cache's events
// onto them.
//
// # Wire format
//
// The format below was read from vLLM's vllm/distributed/kv_events.py
// (the msgspec Struct definitions of EventBatch, KVCacheEvent, BlockStored,
// BlockRemoved and AllBlocksCleared, plus ZmqEventPublisher) and checked
// against the example consumer examples/online_serving/kv_events_subscriber.py
// and a decoded capture from a vLLM 0.26 server quoted in
// volcano-sh/kthena issue #1535. In summary:
//
// A batch is a msgpack array of up to three elements: the timestamp (a
// float64, seconds since the Unix epoch), the list of events, and the data
// parallel rank. The rank is the only field with a default (None); because
// vLLM serializes with "omit defaults", a nil rank is left out entirely and
// the array then has two elements. vLLM's publisher always fills in its own
// rank before encoding, so in practice the array has three elements;
// Publisher does the same with Options.DPRank. The newest vLLM revisions
// no longer declare EventBatch array_like: their batch is a map with the
// keys "ts", "events" and, unless nil, "data_parallel_rank", and their
// decoders read a batch only in that form. EncoderOptions.Batch chooses
// (BatchArray, the default, or BatchMap); Decode reads both.
//
// Events are a tagged union whose tag is the Go/Python type name
// ("BlockStored", "BlockRemoved", "AllBlocksCleared"). Two layouts exist:
//
//   - Positional (older vLLM, array_like=True, still what most consumers
//     decode): the event is an array whose first element is the tag and the
//     remaining elements are the fields in declaration order. Only a run of
//     trailing fields that all equal their defaults is dropped; a defaulted
//     field followed by a set one is written as nil.
//   - Tagged map (vLLM after PR #42892 removed array_like from the event
//     structs): the event is a map with key "type" holding the tag, then one
//     key per field. Fields without a default are always present (possibly
//     nil); a field with a default is present only if its value differs from
//     that default.
//
// Field order and defaults:
//
//	BlockStored:  block_hashes        required, list of hashes
//	              parent_block_hash   required, hash or nil
//	              token_ids           required, list of ints
//	              block_size          required, int
//	              lora_id             required, int or nil (deprecated upstream)
//	              medium              required, string or nil ("GPU", "CPU", ...)
//	              lora_name           required, string or nil
//	              extra_keys          default nil: one entry per block, each nil
//	                                  or an array of arbitrary values
//	              group_idx           default nil, int
//	              kv_cache_spec_kind  default nil, string
//	              kv_cache_spec_sliding_window default nil, int
//	BlockRemoved: block_hashes        required
//	              medium              required, string or nil
//	              group_idx           default nil, int
//	AllBlocksCleared: no fields.
//
// Hashes (vLLM's ExternalBlockHash) are either integers or raw bytes; the
// Encoder writes a uint64 hash as a msgpack unsigned integer (HashInt, the
// default) or as 8 bytes big-endian in a msgpack bin (HashBytes).
//
// Newer vLLM revisions add further trailing defaulted fields (for example a
// "locality" field on BlockStored and BlockRemoved); consumers decode by
// position or name and tolerate absent trailing fields, so leaving them out
// is compatible.
//
// # Transport
//
// See Publisher: a ZMQ PUB socket sends three frames per batch (topic,
// 8-byte big-endian sequence number starting at 0, payload) and an optional
// ROUTER socket serves replays from an in-memory ring of recent batches.
//
// # Ordering
//
// Consumers apply events in order and rely on two properties that the
// producer (the caller of Publish) must keep: when a block moves between
// media, its BlockStored on the new medium is published before its
// BlockRemoved on the old one (so the block never looks absent), and a
// parent block is stored before its children (a BlockStored whose
// parent_block_hash is unknown to the consumer is dropped by it). Publisher
// preserves the order of events within a batch and the order of batches.
//
// # Library choices
//
// msgpack is written with github.com/vmihailenco/msgpack/v5: maintained,
// fast, and its low-level Encoder methods (EncodeArrayLen, EncodeUint, ...)
// allow writing the positional layout directly without reflection.
// ZMQ is github.com/go-zeromq/zmq4, a pure-Go ZMTP 3 implementation, which
// keeps kvtier free of cgo and of a libzmq system dependency; it interoperates
// with libzmq/pyzmq peers over tcp.
package kvevents

// Medium names used by vLLM. Other tier names are passed through unchanged.
const (
	MediumGPU = "GPU"
	MediumCPU = "CPU"
)

// Event tags, as written on the wire.
const (
	TagBlockStored      = "BlockStored"
	TagBlockRemoved     = "BlockRemoved"
	TagAllBlocksCleared = "AllBlocksCleared"
)

// Event is one of *BlockStored, *BlockRemoved, *AllBlocksCleared (or their
// value forms).
type Event interface {
	// Tag returns the wire tag of the event.
	Tag() string
}

// BlockStored reports a run of consecutive blocks of one sequence that were
// stored on Medium. Block i covers TokenIDs[i*BlockSize:(i+1)*BlockSize].
type BlockStored struct {
	BlockHashes []uint64
	// ParentBlockHash is the hash of the block preceding BlockHashes[0];
	// nil for a run that starts at the beginning of a sequence.
	ParentBlockHash *uint64
	TokenIDs        []uint32
	BlockSize       int
	// LoRAID is nil when no LoRA adapter is involved.
	LoRAID *int
	// Medium is the tier name ("GPU", "CPU", ...); "" is written as nil.
	Medium string
	// LoRAName is the adapter name; "" is written as nil.
	LoRAName string
	// ExtraKeys, if non-nil, has one entry per block: nil or the extra
	// values that went into that block's hash (multimodal ids, cache salt,
	// ...). Each value must be msgpack-encodable (strings, integers, bytes,
	// nil, bools, floats, slices, maps). Nil omits the field.
	ExtraKeys [][]any
	// GroupIdx is the KV-cache group; nil omits the field.
	GroupIdx *int
	// KVCacheSpecKind (e.g. "full_attention", "sliding_window"); "" omits it.
	KVCacheSpecKind string
	// KVCacheSpecSlidingWindow, nil omits it.
	KVCacheSpecSlidingWindow *int
}

// BlockRemoved reports blocks removed from Medium.
type BlockRemoved struct {
	BlockHashes []uint64
	// Medium is the tier name; "" is written as nil.
	Medium string
	// GroupIdx is the KV-cache group; nil omits the field.
	GroupIdx *int
}

// AllBlocksCleared reports that every block was dropped (e.g. a cache reset).
type AllBlocksCleared struct{}

// Tag implements Event.
func (BlockStored) Tag() string { return TagBlockStored }

// Tag implements Event.
func (BlockRemoved) Tag() string { return TagBlockRemoved }

// Tag implements Event.
func (AllBlocksCleared) Tag() string { return TagAllBlocksCleared }

// Batch is the unit of publication: one msgpack payload, one sequence number.
type Batch struct {
	// Timestamp in seconds since the Unix epoch.
	Timestamp float64
	Events    []Event
	// DPRank is the data-parallel rank; nil omits it (Publisher fills it
	// from Options.DPRank).
	DPRank *int
}

// Ptr returns a pointer to v; a convenience for the optional fields.
func Ptr[T any](v T) *T { return &v }
