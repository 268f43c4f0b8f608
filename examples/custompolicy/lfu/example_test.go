package lfu_test

import (
	"fmt"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/examples/custompolicy/lfu"
)

// The key used least often goes first; among equals, the least recently
// used. A pinned key is never a victim.
func Example() {
	p := lfu.New[string]()
	for _, k := range []string{"system", "doc", "chat"} {
		_ = p.Insert(k, eviction.NewEntry(1))
	}
	p.Access("system")
	p.Access("system")
	p.Access("doc")
	p.Pin("chat") // in use by a running request
	for {
		k, ok := p.Evict()
		if !ok {
			break
		}
		fmt.Println("evict", k)
	}
	fmt.Println("left", p.Len())
	// Output:
	// evict doc
	// evict system
	// left 1
}
