package eviction

import (
	"fmt"
	"time"

	"github.com/kvtier/kvtier/costmodel"
)

// Priority bounds, as in TensorRT-LLM's KV-cache retention config.
const (
	// MinPriority is the lowest priority: such keys are evicted first.
	MinPriority = 0
	// MaxPriority is the highest priority.
	MaxPriority = 100
	// DefaultPriority is the priority of a key that was given none, and the
	// one a prioritized key falls back to when its duration runs out.
	DefaultPriority = 35
)

// Entry is what a policy may know about a key when it is inserted. Policies
// read the fields they need and ignore the rest; none keeps the Entry itself.
//
// The zero Entry is invalid (its Size is 0). Note that its Priority is 0,
// the lowest, not [DefaultPriority]: callers that do not care about
// priorities should start from [NewEntry].
type Entry struct {
	// Size is the key's size in the owner's unit of capacity: bytes, or 1
	// when the owner counts objects. It must be at least 1.
	Size int64
	// Priority orders keys in the prioritized LRU: lower levels are emptied
	// first. It must be in [MinPriority, MaxPriority].
	Priority int
	// PriorityDuration, when positive, limits how long Priority holds: once
	// the key has been evictable this long, it falls back to
	// DefaultPriority. Zero means forever. It must not be negative.
	PriorityDuration time.Duration
	// Unit places the key for cost-aware policies: layer and layer count,
	// chunk (position) and chunk count, and the context tokens the chunk
	// attends to.
	costmodel.Unit
}

// NewEntry returns a valid Entry of the given size and the default priority,
// with no layer or position.
func NewEntry(size int64) Entry {
	return Entry{Size: size, Priority: DefaultPriority}
}

// Validate reports whether e is well formed. The error wraps
// [ErrInvalidEntry] and names the bad field.
func (e Entry) Validate() error {
	switch {
	case e.Size < 1:
		return fmt.Errorf("%w: Size %d must be at least 1", ErrInvalidEntry, e.Size)
	case e.Priority < MinPriority || e.Priority > MaxPriority:
		return fmt.Errorf("%w: Priority %d is outside [%d, %d]", ErrInvalidEntry, e.Priority, MinPriority, MaxPriority)
	case e.PriorityDuration < 0:
		return fmt.Errorf("%w: PriorityDuration %v is negative", ErrInvalidEntry, e.PriorityDuration)
	}
	if err := e.Unit.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidEntry, err)
	}
	return nil
}
