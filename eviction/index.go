package eviction

import "fmt"

// Index is where a slab-backed policy (LRU, FIFO, PrioritizedLRU, S3FIFO,
// ARC, WTinyLFU) looks up the node it keeps for a key: a map from each key
// it holds (tracked keys, and S3FIFO's and ARC's ghost keys) to an int32
// node number in its slab. Every Access, Pin, Unpin and Remove is one
// lookup, every Insert a lookup and a store, every eviction a delete, so at
// a million keys the index's cache misses are most of a policy's cost.
//
// By default a policy indexes its keys with a Go map, which takes any
// comparable key. The constructors named ...WithIndex (such as
// [NewLRUWithIndex]) take an Index instead; the only one besides the map
// is [DenseIndex], a slice indexed by the key itself, for keys that are
// small non-negative integers (dense ids, slot numbers). A policy makes
// the same choices whichever index it uses; only its speed, its memory
// and the keys it accepts differ.
//
// An Index holds the state of the one policy it is given to: it cannot be
// shared, reused, or read and changed by anyone else. Its methods are
// unexported, so it cannot be implemented outside this package: a policy
// trusts its index to return the node numbers it stored, and a faulty
// index would corrupt the policy's lists.
type Index[K comparable] interface {
	// lookup returns the node stored for k and true, or false when k has
	// none.
	lookup(k K) (int32, bool)
	// store records node i (0 <= i < math.MaxInt32) for k, which has no
	// node. It returns an error wrapping ErrKeyOutOfRange, and changes
	// nothing, when the index cannot hold k.
	store(k K, i int32) error
	// delete forgets k's node; it does nothing when k has none.
	delete(k K)
	// len returns the number of keys with a node.
	len() int
	// claim makes the index its caller's, once: it returns an error
	// wrapping ErrInvalidConfig for a nil index or one already claimed.
	claim() error
}

// keyIndex is a policy's index: its own Go map, or, when other is set, the
// Index its constructor was given. Two other designs were measured and
// rejected (BENCHMARKS.md, eviction cross-policy section): the map behind the
// Index interface, where the default path pays a dynamic call per index
// operation, and the index as a type parameter of the policies, where Go
// compiles a generic type's methods once per GC shape and calls the type
// parameter's methods through its dictionary, not inlined either. Here the
// map path pays one well-predicted branch.
type keyIndex[K comparable] struct {
	m     map[K]int32 // nil when other is set
	other Index[K]
	// tx journals the bindings written while a transaction runs.
	tx keyJournal[K]
}

// newKeyIndex returns the map index when idx is nil, else claims idx.
func newKeyIndex[K comparable](idx Index[K]) (keyIndex[K], error) {
	if idx == nil {
		return keyIndex[K]{m: make(map[K]int32)}, nil
	}
	if err := idx.claim(); err != nil {
		return keyIndex[K]{}, err
	}
	return keyIndex[K]{other: idx}, nil
}

// lookup reads the map before looking at other, even when the map is nil
// (then it answers false, for the price of a runtime call): written with an
// if-else, the method exceeds the inliner's budget and every policy
// operation pays a call on the map path too.
func (x *keyIndex[K]) lookup(k K) (i int32, ok bool) {
	i, ok = x.m[k]
	if x.other != nil {
		i, ok = x.other.lookup(k)
	}
	return i, ok
}

// store binds k, which has no node, to node i (see Index.store).
func (x *keyIndex[K]) store(k K, i int32) error {
	x.record(k, noLink)
	if x.other != nil {
		return x.other.store(k, i)
	}
	x.m[k] = i
	return nil
}

// delete forgets k, whose node is i: the caller has it at hand, so a
// transaction records the binding without a lookup.
func (x *keyIndex[K]) delete(k K, i int32) {
	x.record(k, i)
	if x.other != nil {
		x.other.delete(k)
		return
	}
	delete(x.m, k)
}

func (x *keyIndex[K]) len() int {
	if x.other != nil {
		return x.other.len()
	}
	return len(x.m)
}

// DenseKey is the type set of the keys a [DenseIndex] takes: the integer
// types, and types defined from them (like an id type of a cache).
type DenseKey interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 |
		~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~uintptr
}

// MaxDenseKey is the largest maximum key a [DenseIndex] accepts: at 4
// bytes per possible key, an index over all of them takes 8 GiB, and a
// policy cannot track more than about 2^31 keys anyway.
const MaxDenseKey = 1<<31 - 1

// minDenseSlots is the fewest slots a DenseIndex allocates, so that a small
// index does not grow in tiny steps.
const minDenseSlots = 256

// DenseIndex is an [Index] for integer keys from 0 to a maximum fixed at
// construction: a slice with one 4-byte slot per possible key, read and
// written at the key's position. A lookup is one memory access instead of
// a hash and a probe of a Go map's control words and slots, which at a
// million keys saves about one cache miss per operation.
//
// It suits keys that are dense: ids numbered from 0 (like replay.Prepared's),
// slot or block numbers. It takes 4 bytes per possible key up to the
// largest key stored so far, whatever the number of keys it holds, so a few
// large keys among small ones waste memory. The slice grows on demand,
// doubling (amortized O(1) per Insert); once it covers the largest key
// stored, nothing allocates.
//
// An Insert of a negative key or of a key above the maximum returns an
// error wrapping [ErrKeyOutOfRange] that names the key, and leaves the
// policy unchanged. Access, Pin, Unpin and Remove of such a key do nothing,
// as for any unknown key.
//
// Create one with [NewDenseIndex] and give it to one policy constructor
// (such as [NewLRUWithIndex]); a second constructor refuses it. The zero
// DenseIndex accepts the key 0 only. It is not safe for concurrent use (nor
// is the policy that holds it).
type DenseIndex[K DenseKey] struct {
	// slots[k] is k's node plus 1; 0 means k has no node, so that growing
	// the slice with zeros needs no fill.
	slots   []int32
	maxKey  uint64
	n       int
	claimed bool
}

var _ Index[int] = (*DenseIndex[int])(nil)

// NewDenseIndex returns an empty dense index for keys 0 to maxKey. It
// allocates nothing yet: the slots are allocated as keys are stored. It
// returns an error wrapping [ErrInvalidConfig] when maxKey is negative or
// above [MaxDenseKey].
func NewDenseIndex[K DenseKey](maxKey K) (*DenseIndex[K], error) {
	if maxKey < 0 || uint64(maxKey) > MaxDenseKey {
		return nil, fmt.Errorf("%w: DenseIndex maximum key %d is outside [0, %d]", ErrInvalidConfig, maxKey, MaxDenseKey)
	}
	return &DenseIndex[K]{maxKey: uint64(maxKey)}, nil
}

// MaxKey returns the largest key the index accepts.
func (x *DenseIndex[K]) MaxKey() K { return K(x.maxKey) }

// Len returns the number of keys the index holds: the policy's tracked
// keys, and for S3FIFO and ARC their ghost keys too.
func (x *DenseIndex[K]) Len() int { return x.n }

func (x *DenseIndex[K]) lookup(k K) (int32, bool) {
	// A negative key converts to a value of at least 2^63, above any length.
	u := uint64(k)
	if u >= uint64(len(x.slots)) {
		return 0, false
	}
	s := x.slots[u]
	return s - 1, s != 0
}

func (x *DenseIndex[K]) store(k K, i int32) error {
	u := uint64(k)
	if u >= uint64(len(x.slots)) {
		if err := x.grow(k); err != nil {
			return err
		}
	}
	if x.slots[u] == 0 {
		x.n++
	}
	x.slots[u] = i + 1
	return nil
}

// grow extends the slots to cover k, at least doubling them, or returns an
// error wrapping ErrKeyOutOfRange when k is outside [0, maxKey].
func (x *DenseIndex[K]) grow(k K) error {
	if k < 0 || uint64(k) > x.maxKey {
		return fmt.Errorf("%w: key %d is outside the DenseIndex's [0, %d]", ErrKeyOutOfRange, k, x.maxKey)
	}
	n := max(uint64(k)+1, 2*uint64(len(x.slots)), minDenseSlots)
	n = min(n, x.maxKey+1)
	x.slots = append(x.slots, make([]int32, n-uint64(len(x.slots)))...)
	return nil
}

func (x *DenseIndex[K]) delete(k K) {
	u := uint64(k)
	if u >= uint64(len(x.slots)) || x.slots[u] == 0 {
		return
	}
	x.slots[u] = 0
	x.n--
}

func (x *DenseIndex[K]) len() int { return x.n }

func (x *DenseIndex[K]) claim() error {
	switch {
	case x == nil:
		return fmt.Errorf("%w: nil DenseIndex", ErrInvalidConfig)
	case x.claimed:
		return fmt.Errorf("%w: the DenseIndex already belongs to a policy", ErrInvalidConfig)
	}
	x.claimed = true
	return nil
}
