package flagparse_test

import (
	"fmt"

	"github.com/kvtier/kvtier/internal/flagparse"
)

func Example() {
	names, err := flagparse.Names("LRU, s3fifo", []string{"lru", "fifo", "s3fifo"})
	fmt.Println(names, err)
	sizes, err := flagparse.Floats("1,3.5")
	fmt.Println(sizes, err)
	n, err := flagparse.Bytes("128MiB")
	fmt.Println(n, err)
	_, err = flagparse.Names("lru,opt", []string{"lru", "fifo"})
	fmt.Println(err)
	// Output:
	// [lru s3fifo] <nil>
	// [1 3.5] <nil>
	// 134217728 <nil>
	// flagparse: unknown name "opt" (want one of lru, fifo)
}
