package tierstore

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/kvtier/kvtier/kvcache"
)

// MemStore is a Store in process memory, keyed like the others and
// checking values with Decode: a reference for tests of code written
// against Store, and a shared store between caches of one process. Fail,
// when set, is called before every operation and fails it with the error
// it returns (fault injection). Its zero value is not usable; see
// NewMemStore.
type MemStore struct {
	fp     uint64
	mu     sync.Mutex
	values map[string][]byte
	// Fail, when not nil, is called with the operation's name ("put",
	// "get", "contains") and its keys before it runs; a non-nil error
	// fails the operation (wrapped in ErrUnavailable unless it wraps
	// kvcache.ErrUnitMissing or kvcache.ErrUnitCorrupt already).
	Fail func(op string, keys []kvcache.UnitKey) error
}

// NewMemStore returns an empty MemStore for deployment fp (Fingerprint).
func NewMemStore(fp uint64) *MemStore {
	return &MemStore{fp: fp, values: make(map[string][]byte)}
}

func (m *MemStore) fail(op string, keys []kvcache.UnitKey) error {
	if m.Fail == nil {
		return nil
	}
	err := m.Fail(op, keys)
	if err == nil || errors.Is(err, kvcache.ErrUnitMissing) || errors.Is(err, kvcache.ErrUnitCorrupt) {
		return err
	}
	return fmt.Errorf("%w: %s of %d units: %w", ErrUnavailable, op, len(keys), err)
}

// Put implements Store.
func (m *MemStore) Put(ctx context.Context, keys []kvcache.UnitKey, values [][]byte) error {
	if err := m.fail("put", keys); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, k := range keys {
		m.values[Name(m.fp, k, ':')] = Encode(nil, m.fp, k, values[i])
	}
	return nil
}

// Get implements Store.
func (m *MemStore) Get(ctx context.Context, keys []kvcache.UnitKey, dst [][]byte) error {
	if err := m.fail("get", keys); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs kvcache.CopyErrors
	for i, k := range keys {
		v, ok := m.values[Name(m.fp, k, ':')]
		if !ok {
			errs = errs.Set(i, len(keys), fmt.Errorf("%w: block %016x slice %d", kvcache.ErrUnitMissing, k.Hash, k.Slice))
		} else if err := Decode(v, m.fp, k, dst[i]); err != nil {
			errs = errs.Set(i, len(keys), err)
		}
	}
	return errs.Err()
}

// Contains implements Store.
func (m *MemStore) Contains(ctx context.Context, keys []kvcache.UnitKey) ([]bool, error) {
	if err := m.fail("contains", keys); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	have := make([]bool, len(keys))
	for i, k := range keys {
		_, have[i] = m.values[Name(m.fp, k, ':')]
	}
	return have, nil
}

// Len returns how many units the store holds.
func (m *MemStore) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.values)
}

// Value returns the stored value of unit k (nil when none), and Set
// replaces it: for tests that damage or forge values.
func (m *MemStore) Value(k kvcache.UnitKey) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.values[Name(m.fp, k, ':')]
}

// Set stores v as the value of unit k, as is.
func (m *MemStore) Set(k kvcache.UnitKey, v []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.values[Name(m.fp, k, ':')] = v
}

// Delete removes unit k, as a store's own eviction does.
func (m *MemStore) Delete(k kvcache.UnitKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.values, Name(m.fp, k, ':'))
}
