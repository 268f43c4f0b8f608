package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/radix"
	"github.com/kvtier/kvtier/tierstore"
)

// TestStore checks that the stores newStore returns keep the
// tierstore.Store contract: round trips of batches, membership, misses
// (of a whole batch, and of some units of one, per unit), isolation of
// namespaces, LoRAs and deployments, hash collisions and size mismatches
// reported as corrupt, cancelled contexts, concurrent use.
// newStore(fp) returns a store of deployment fp over the same storage on
// every call (so that two deployments share it); the keys TestStore
// writes have a namespace of their own, so a store holding other data
// can be tested.
func TestStore(t *testing.T, newStore func(t *testing.T, fp uint64) tierstore.Store) {
	ctx := context.Background()
	const fp = 0x5eed
	ns := fmt.Sprintf("storetest-%p", t)
	key := func(hash uint64, slice int, tokens ...uint32) kvcache.UnitKey {
		return kvcache.UnitKey{Shared: true, Hash: hash, Parent: hash - 1, HasParent: true, Depth: 2, Slice: slice,
			Keys: radix.Keys{Namespace: ns, LoRA: "lora"}, Tokens: tokens, Extra: []radix.ExtraKey{{Pos: 5, Value: hash}}}
	}
	payload := func(k kvcache.UnitKey, n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = Content(k.Hash, k.Slice, i)
		}
		return b
	}
	get := func(s tierstore.Store, k kvcache.UnitKey, n int) ([]byte, error) {
		dst := make([]byte, n)
		err := s.Get(ctx, []kvcache.UnitKey{k}, [][]byte{dst})
		return dst, err
	}

	t.Run("RoundTrip", func(t *testing.T) {
		s := newStore(t, fp)
		var keys []kvcache.UnitKey
		var values [][]byte
		for i := range 20 {
			k := key(uint64(1000+i), i%2, 1, 2, 3, uint32(i))
			keys = append(keys, k)
			values = append(values, payload(k, 512))
		}
		big := key(7777, 0, 9)
		keys, values = append(keys, big), append(values, payload(big, 1<<20))
		if err := s.Put(ctx, keys, values); err != nil {
			t.Fatal(err)
		}
		dst := make([][]byte, len(keys))
		for i := range dst {
			dst[i] = make([]byte, len(values[i]))
		}
		if err := s.Get(ctx, keys, dst); err != nil {
			t.Fatal(err)
		}
		for i := range dst {
			if !bytes.Equal(dst[i], values[i]) {
				t.Fatalf("unit %d read back differs", i)
			}
		}
		have, err := s.Contains(ctx, append(keys[:3:3], key(5, 0, 1)))
		if err != nil {
			t.Fatal(err)
		}
		if !have[0] || !have[1] || !have[2] || have[3] {
			t.Fatalf("Contains = %v, want [true true true false]", have)
		}
		// Storing again overwrites with equal bytes.
		if err := s.Put(ctx, keys[:1], values[:1]); err != nil {
			t.Fatal(err)
		}
		if b, err := get(s, keys[0], 512); err != nil || !bytes.Equal(b, values[0]) {
			t.Fatalf("after a second Put: %v", err)
		}
	})

	t.Run("Missing", func(t *testing.T) {
		s := newStore(t, fp)
		if _, err := get(s, key(424242, 0, 1), 16); !errors.Is(err, kvcache.ErrUnitMissing) {
			t.Fatalf("Get of a unit never stored: %v, want ErrUnitMissing", err)
		}
	})

	t.Run("PartlyMissing", func(t *testing.T) {
		// A batch with a missing and a corrupt unit among good ones
		// fails those two only, naming each.
		s := newStore(t, fp)
		good1, missing, good2, forged := key(2001, 0, 1), key(2002, 0, 2), key(2003, 1, 3), key(2004, 0, 4)
		other := forged
		other.Tokens = []uint32{5}
		if err := s.Put(ctx, []kvcache.UnitKey{good1, good2, other}, [][]byte{payload(good1, 64), payload(good2, 64), payload(other, 64)}); err != nil {
			t.Fatal(err)
		}
		keys := []kvcache.UnitKey{good1, missing, good2, forged}
		dst := [][]byte{make([]byte, 64), make([]byte, 64), make([]byte, 64), make([]byte, 64)}
		err := s.Get(ctx, keys, dst)
		var errs kvcache.CopyErrors
		if !errors.As(err, &errs) || len(errs) != len(keys) {
			t.Fatalf("Get of 2 good, a missing and a corrupt unit: %v, want a kvcache.CopyErrors of %d", err, len(keys))
		}
		if errs[0] != nil || errs[2] != nil {
			t.Fatalf("the good units failed: %v, %v", errs[0], errs[2])
		}
		if !bytes.Equal(dst[0], payload(good1, 64)) || !bytes.Equal(dst[2], payload(good2, 64)) {
			t.Fatal("a good unit of the batch read back differs")
		}
		if !errors.Is(errs[1], kvcache.ErrUnitMissing) || !errors.Is(errs[3], kvcache.ErrUnitCorrupt) {
			t.Fatalf("errors %v and %v, want ErrUnitMissing and ErrUnitCorrupt", errs[1], errs[3])
		}
	})

	t.Run("Isolation", func(t *testing.T) {
		s := newStore(t, fp)
		k := key(31337, 1, 4, 5)
		if err := s.Put(ctx, []kvcache.UnitKey{k}, [][]byte{payload(k, 64)}); err != nil {
			t.Fatal(err)
		}
		others := map[string]kvcache.UnitKey{}
		o := k
		o.Keys.Namespace = ns + "-other"
		others["namespace"] = o
		o = k
		o.Keys.LoRA = ""
		others["LoRA"] = o
		for name, o := range others {
			if b, err := get(s, o, 64); !errors.Is(err, kvcache.ErrUnitMissing) {
				t.Fatalf("another %s read %v (%v), want ErrUnitMissing", name, b[:4], err)
			}
			if have, err := s.Contains(ctx, []kvcache.UnitKey{o}); err != nil || have[0] {
				t.Fatalf("another %s: Contains = %v, %v", name, have, err)
			}
		}
		if b, err := get(newStore(t, fp+1), k, 64); !errors.Is(err, kvcache.ErrUnitMissing) && !errors.Is(err, kvcache.ErrUnitCorrupt) {
			t.Fatalf("another deployment read %v (%v)", b[:4], err)
		}
	})

	t.Run("CollisionAndSize", func(t *testing.T) {
		s := newStore(t, fp)
		k := key(99, 0, 1, 2, 3, 4)
		put := func() {
			// Again before each check: a store may forget a value
			// it found corrupt.
			if err := s.Put(ctx, []kvcache.UnitKey{k}, [][]byte{payload(k, 64)}); err != nil {
				t.Fatal(err)
			}
		}
		for name, o := range map[string]kvcache.UnitKey{
			"tokens": key(99, 0, 1, 2, 3, 5),
			"parent": func() kvcache.UnitKey { o := k; o.Parent++; return o }(),
			"extra":  func() kvcache.UnitKey { o := k; o.Extra = nil; return o }(),
		} {
			put()
			if _, err := get(s, o, 64); !errors.Is(err, kvcache.ErrUnitCorrupt) {
				t.Fatalf("a key with the same hash and other %s: %v, want ErrUnitCorrupt", name, err)
			}
		}
		put()
		if _, err := get(s, k, 63); !errors.Is(err, kvcache.ErrUnitCorrupt) {
			t.Fatalf("a unit of another size: %v, want ErrUnitCorrupt", err)
		}
	})

	t.Run("Cancelled", func(t *testing.T) {
		s := newStore(t, fp)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		k := key(123, 0, 1)
		if err := s.Put(cctx, []kvcache.UnitKey{k}, [][]byte{payload(k, 16)}); err == nil {
			t.Fatal("Put with a cancelled context succeeded")
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		s := newStore(t, fp)
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 20 {
					k := key(uint64(5000+(g*20+i)%40), 0, 7)
					want := payload(k, 256)
					if err := s.Put(ctx, []kvcache.UnitKey{k}, [][]byte{want}); err != nil {
						errs <- err
						return
					}
					if b, err := get(s, k, 256); err != nil || !bytes.Equal(b, want) {
						errs <- fmt.Errorf("read back %v: %v", k.Hash, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	})
}
