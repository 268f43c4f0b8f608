package jsonlines_test

import (
	"os"

	"github.com/kvtier/kvtier/internal/jsonlines"
)

func ExampleWrite() {
	type row struct {
		Policy  string  `json:"policy"`
		HitRate float64 `json:"hit_rate"`
	}
	_ = jsonlines.Write(os.Stdout, []row{{"lru", 0.854}, {"s3fifo", 0.738}})
	// Output:
	// {"policy":"lru","hit_rate":0.854}
	// {"policy":"s3fifo","hit_rate":0.738}
}
