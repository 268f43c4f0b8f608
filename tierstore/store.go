package tierstore

import (
	"context"

	"github.com/kvtier/kvtier/kvcache"
)

// Store holds the bytes of units below the CPU, named by their identity.
// Implementations are safe for concurrent use; every method may block on
// I/O (Engine calls them off the cache's lock) and honours ctx.
//
// Contract:
//   - Put stores values[i] (a unit's bytes) under keys[i], whole or not at
//     all per unit: a reader never sees part of a value. Storing a unit
//     that is stored already overwrites it with equal bytes.
//   - Get reads keys[i] into dst[i], whose length is the unit's size. It
//     returns an error wrapping kvcache.ErrUnitMissing when a unit is not
//     stored, kvcache.ErrUnitCorrupt when its stored value fails the check
//     of Decode (another unit's, damaged, or of another size), and
//     ErrUnavailable when the store failed; after an error any dst may
//     have been written. When units of a batch of several are missing or
//     corrupt, the error is a kvcache.CopyErrors as long as keys (element
//     i for keys[i], nil when dst[i] holds its unit), so that the other
//     units are used, not recomputed; ErrUnavailable may fail the whole
//     batch.
//   - Contains reports which keys are stored, without reading them: a
//     later Get may still miss (the store evicted the unit meanwhile).
//   - The slices (keys, their Tokens and Extra, values, dst) are the
//     caller's again when the call returns.
type Store interface {
	Put(ctx context.Context, keys []kvcache.UnitKey, values [][]byte) error
	Get(ctx context.Context, keys []kvcache.UnitKey, dst [][]byte) error
	Contains(ctx context.Context, keys []kvcache.UnitKey) ([]bool, error)
}
