package diskstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/radix"
	"github.com/kvtier/kvtier/tierstore/diskstore"
)

func Example() {
	dir, err := os.MkdirTemp("", "kvtier-disk")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	store, err := diskstore.Open(diskstore.Options{Dir: dir, Fingerprint: 0x1234, MaxBytes: 64 << 20})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()

	// A unit's identity; a cache hands these to its engine (see
	// kvcache.UnitKey and Cache.UnitKeys).
	key := kvcache.UnitKey{Shared: true, Hash: 0xabcdef, Depth: 1, Slice: 0,
		Keys: radix.Keys{Namespace: "tenant-a"}, Tokens: []uint32{1, 2, 3, 4}}
	ctx := context.Background()
	if err := store.Put(ctx, []kvcache.UnitKey{key}, [][]byte{[]byte("the unit's KV bytes")}); err != nil {
		fmt.Println(err)
		return
	}

	dst := make([]byte, len("the unit's KV bytes"))
	if err := store.Get(ctx, []kvcache.UnitKey{key}, [][]byte{dst}); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s\n", dst)

	// Another tenant's identical tokens are not there.
	other := key
	other.Keys.Namespace = "tenant-b"
	err = store.Get(ctx, []kvcache.UnitKey{other}, [][]byte{dst})
	fmt.Println(errors.Is(err, kvcache.ErrUnitMissing))

	files, bytes := store.Usage()
	fmt.Println(files, bytes > 0)
	// Output:
	// the unit's KV bytes
	// true
	// 1 true
}
