package tierstore_test

import (
	"context"
	"testing"

	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/tierstore"
	"github.com/kvtier/kvtier/tierstore/storetest"
	"github.com/stretchr/testify/require"
)

// TestLookupOntoAMemoryTierIsRefused: the CPU, which the Engine keeps in
// its MemoryStore and reads by slot with no check, is no tier to adopt a
// store's blocks onto: the adopted units would be served as whatever their
// slots hold. (A review found Adopt accepting it.)
func TestLookupOntoAMemoryTierIsRefused(t *testing.T) {
	fp := storetest.Fingerprint(t)
	store := tierstore.NewMemStore(fp)
	a := storetest.NewServer(t, storetest.Config{Store: store, GPU: 8, CPU: 8, Shared: 64})
	prompt := kvcache.Request{Tokens: storetest.Tokens(16, 1)}
	a.Serve(t, prompt)
	a.PushDown(t, 2, 100000) // the prompt is in the store

	b := storetest.NewServer(t, storetest.Config{Store: store, GPU: 8, CPU: 16, Shared: 64, NoLookup: true})
	b.PushDown(t, 2, 200000) // b's CPU slots hold other blocks' bytes
	b.Drain(t)
	_, err := tierstore.Lookup(context.Background(), store, b.Cache, prompt, kvcache.CPU)
	require.ErrorIs(t, err, kvcache.ErrInvalidRequest)
	require.Zero(t, b.Cache.Stats().Tier(kvcache.CPU).Adopted)
	b.Serve(t, prompt) // checks every byte it is served
}
