package kvcache

import (
	"fmt"

	"github.com/kvtier/kvtier/layout"
)

// MemoryStore is tier memory over Go byte slices: one arena per tier and
// pool of slots × unit bytes, addressed by slot. It is a Mover (Copy uses
// the built-in copy), so tests, examples and pure-Go servers move real
// bytes.
//
// Build one with NewMemoryStore for the same layout and tiers as the Cache
// (the zero MemoryStore has no slots: Bytes returns nil and Copy refuses
// every copy). Copy is all or nothing: it validates the whole batch before
// copying anything. A MemoryStore does no locking: the cache calls Copy
// under its lock, and the server must not write a slot while an operation
// that may move it runs (in practice: read and write the slots of pinned
// units only).
type MemoryStore struct {
	unitBytes []int64
	mem       [][][]byte // [tier-1][pool]
	slots     [][]int    // [tier-1][pool]
}

// NewMemoryStore allocates the slots of every tier of tiers (their
// capacities; the other fields are ignored) for layout l, split across
// pools as the Cache splits them. It returns an error wrapping
// ErrInvalidConfig for the same bad input New rejects, or when a pool's
// memory does not fit in an int.
func NewMemoryStore(l *layout.Layout, tiers []TierConfig) (*MemoryStore, error) {
	if l == nil || l.UnitsPerBlock() == 0 {
		return nil, fmt.Errorf("%w: Layout is nil or not built by layout.New", ErrInvalidConfig)
	}
	if len(tiers) == 0 || len(tiers) > MaxTiers {
		return nil, fmt.Errorf("%w: %d tiers, want 1 to %d", ErrInvalidConfig, len(tiers), MaxTiers)
	}
	pools := l.Pools()
	m := &MemoryStore{unitBytes: make([]int64, len(pools))}
	for i, p := range pools {
		m.unitBytes[i] = p.UnitBytes
	}
	for ti, tc := range tiers {
		name := tierName(tc, ti)
		slots, err := splitCapacity(name, tc.Capacity, pools)
		if err != nil {
			return nil, err
		}
		mem := make([][]byte, len(pools))
		for p, n := range slots {
			size := int64(n) * pools[p].UnitBytes
			if pools[p].UnitBytes != 0 && size/pools[p].UnitBytes != int64(n) || int64(int(size)) != size {
				return nil, fmt.Errorf("%w: %s pool %d needs %d × %d bytes", ErrInvalidConfig, name, p, n, pools[p].UnitBytes)
			}
			mem[p] = make([]byte, size)
		}
		m.slots = append(m.slots, slots)
		m.mem = append(m.mem, mem)
	}
	return m, nil
}

// Tiers returns how many tiers the store holds: tiers GPU to Tier(n).
func (m *MemoryStore) Tiers() int { return len(m.mem) }

// Bytes returns the memory of one slot, or nil for a bad tier, pool or
// slot. The slice aliases the store: writing it writes the slot.
func (m *MemoryStore) Bytes(t Tier, pool int, slot int32) []byte {
	if !m.valid(t, pool, slot) {
		return nil
	}
	ub := m.unitBytes[pool]
	off := int64(slot) * ub
	return m.mem[t-1][pool][off : off+ub : off+ub]
}

func (m *MemoryStore) valid(t Tier, pool int, slot int32) bool {
	if t < GPU || int(t) > len(m.mem) || pool < 0 || pool >= len(m.unitBytes) {
		return false
	}
	return slot >= 0 && int(slot) < m.slots[t-1][pool]
}

// Copy performs the batch in order. It returns an error wrapping
// ErrInvalidCopy, having copied nothing, when any copy names a bad tier,
// pool or slot.
func (m *MemoryStore) Copy(batch []Copy) error {
	for i, cp := range batch {
		if !m.valid(cp.From, cp.Pool, cp.FromSlot) || !m.valid(cp.To, cp.Pool, cp.ToSlot) {
			return fmt.Errorf("%w: copy %d of batch: pool %d %s slot %d -> %s slot %d", ErrInvalidCopy, i, cp.Pool, cp.From, cp.FromSlot, cp.To, cp.ToSlot)
		}
	}
	for _, cp := range batch {
		copy(m.Bytes(cp.To, cp.Pool, cp.ToSlot), m.Bytes(cp.From, cp.Pool, cp.FromSlot))
	}
	return nil
}
