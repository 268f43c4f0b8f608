package parallel_test

import (
	"fmt"
	"strings"

	"github.com/kvtier/kvtier/internal/parallel"
)

func ExampleMap() {
	words := []string{"lru", "fifo", "s3fifo", "retention"}
	upper, err := parallel.Map(words, 2, func(w string) (string, error) {
		return strings.ToUpper(w), nil
	})
	fmt.Println(upper, err)
	// Output: [LRU FIFO S3FIFO RETENTION] <nil>
}
