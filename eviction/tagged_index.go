package eviction

import "fmt"

// TaggedIndex is an [Index] for integer keys whose low bits name a slot
// (a record or slot number, numbered densely from 0) and whose high bits
// tell apart the keys that slot has named over time (a generation): a
// slice indexed by the low bits, each slot holding the whole key it is
// bound to. A lookup is one memory access and one comparison, as with a
// [DenseIndex], while keys may be as large as the type allows.
//
// It suits ids that reuse a number with a new generation, such as
// kvcache.UnitID, when the keys a policy holds at once rarely share their
// low bits. A key whose low bits are bound to another key (an S3FIFO ghost
// of an earlier generation still held when the number is reused) goes to
// an overflow map, so the index is correct for any keys; it is fast when
// the overflow stays small.
//
// Memory: 16 bytes per slot, in chunks of 4096 slots allocated when a key
// is first stored in one (growing never copies the slots held), plus the
// overflow map. An Insert of a
// negative key, or of a key whose low value is above [MaxDenseKey], returns
// an error wrapping [ErrKeyOutOfRange] and leaves the policy unchanged.
//
// Create one with [NewTaggedIndex] and give it to one policy constructor
// (such as [NewLRUWithIndex]); a second constructor refuses it. It is not
// safe for concurrent use (nor is the policy that holds it).
type TaggedIndex[K DenseKey] struct {
	mask uint64
	// slots[s] is the key bound to slot s and its node plus 1 (0: none).
	slots sparse[taggedSlot[K]]
	// over holds the keys whose slot is bound to another key; nil until
	// one is.
	over    map[K]int32
	n       int
	claimed bool
}

var _ Index[int] = (*TaggedIndex[int])(nil)

// taggedSlot is one slot of a TaggedIndex: the key bound to it and the
// key's node plus 1, 0 when the slot is free.
type taggedSlot[K DenseKey] struct {
	key  K
	node int32
}

// NewTaggedIndex returns an empty index whose slot is the key's lowBits
// low bits (1 to 63). It allocates nothing yet. It returns an error
// wrapping [ErrInvalidConfig] for lowBits outside [1, 63].
func NewTaggedIndex[K DenseKey](lowBits int) (*TaggedIndex[K], error) {
	if lowBits < 1 || lowBits > 63 {
		return nil, fmt.Errorf("%w: TaggedIndex low bits %d is outside [1, 63]", ErrInvalidConfig, lowBits)
	}
	return &TaggedIndex[K]{mask: 1<<uint(lowBits) - 1}, nil
}

// Len returns the number of keys the index holds: the policy's tracked
// keys, and for S3FIFO and ARC their ghost keys too.
func (x *TaggedIndex[K]) Len() int { return x.n }

// Overflow returns how many keys the index holds in its overflow map
// (their slot is bound to another key).
func (x *TaggedIndex[K]) Overflow() int { return len(x.over) }

func (x *TaggedIndex[K]) lookup(k K) (int32, bool) {
	if sl := x.slots.get(uint64(k) & x.mask); sl.node != 0 && sl.key == k {
		return sl.node - 1, true
	}
	if x.over == nil {
		return 0, false
	}
	i, ok := x.over[k]
	return i, ok
}

func (x *TaggedIndex[K]) store(k K, i int32) error {
	if k < 0 {
		return fmt.Errorf("%w: key %d is negative", ErrKeyOutOfRange, k)
	}
	s := uint64(k) & x.mask
	if s > MaxDenseKey {
		return fmt.Errorf("%w: key %d has slot %d, above %d", ErrKeyOutOfRange, k, s, MaxDenseKey)
	}
	x.n++
	if sl := x.slots.ref(s); sl.node == 0 {
		sl.key, sl.node = k, i+1
		return nil
	}
	if x.over == nil {
		x.over = make(map[K]int32)
	}
	x.over[k] = i
	return nil
}

func (x *TaggedIndex[K]) delete(k K) {
	if sl := x.slots.get(uint64(k) & x.mask); sl.node != 0 && sl.key == k {
		*x.slots.ref(uint64(k) & x.mask) = taggedSlot[K]{}
		x.n--
		return
	}
	if _, ok := x.over[k]; ok {
		delete(x.over, k)
		x.n--
	}
}

func (x *TaggedIndex[K]) len() int { return x.n }

func (x *TaggedIndex[K]) claim() error {
	switch {
	case x == nil:
		return fmt.Errorf("%w: nil TaggedIndex", ErrInvalidConfig)
	case x.claimed:
		return fmt.Errorf("%w: the TaggedIndex already belongs to a policy", ErrInvalidConfig)
	}
	x.claimed = true
	return nil
}
