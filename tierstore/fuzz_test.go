package tierstore_test

import (
	"bytes"
	"testing"

	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/radix"
	"github.com/kvtier/kvtier/tierstore"
)

// FuzzDecode: whatever bytes a store hands back, Decode accepts them only
// when they are exactly what Encode wrote for the unit asked for, and
// never panics.
func FuzzDecode(f *testing.F) {
	k := kvcache.UnitKey{Shared: true, Hash: 42, Parent: 41, HasParent: true, Depth: 2, Slice: 1,
		Keys: radix.Keys{Namespace: "ns"}, Tokens: []uint32{1, 2, 3, 4}}
	good := tierstore.Encode(nil, 7, k, []byte("payload!"))
	f.Add(good, uint8(8))
	f.Add(good[:len(good)-1], uint8(8))
	f.Add([]byte{}, uint8(0))
	f.Fuzz(func(t *testing.T, value []byte, n uint8) {
		dst := make([]byte, n)
		if err := tierstore.Decode(value, 7, k, dst); err != nil {
			return
		}
		if want := tierstore.Encode(nil, 7, k, dst); !bytes.Equal(value, want) {
			t.Fatalf("Decode accepted %x, which Encode does not write for the unit (%x)", value, want)
		}
	})
}
