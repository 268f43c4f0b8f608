package costmodel_test

import (
	"fmt"
	"time"

	"github.com/kvtier/kvtier/costmodel"
)

// The seed design's worked example: 2 layers, 2 chunks of 32 tokens. The
// layer weight favours early layers and the position weight late chunks.
func ExampleRecompute_Cost() {
	r := costmodel.Recompute{Alpha: 0.001, Beta: 0.01, NonAttention: 0.005}
	for chunk := 0; chunk < 2; chunk++ {
		for layer := 0; layer < 2; layer++ {
			c, _ := r.Cost(costmodel.Unit{Layer: layer, Layers: 2, Chunk: chunk, Chunks: 2, ContextTokens: int64(32 * chunk)})
			fmt.Printf("chunk %d layer %d: %.5f s\n", chunk, layer, c)
		}
	}
	// Output:
	// chunk 0 layer 0: 0.00750 s
	// chunk 0 layer 1: 0.00375 s
	// chunk 1 layer 0: 0.04700 s
	// chunk 1 layer 1: 0.02350 s
}

// Plain Pensieve: no layer or position weights.
func ExampleFlat() {
	r := costmodel.Recompute{Alpha: 0.001, Beta: 0.01, NonAttention: 0.005,
		LayerWeight: costmodel.Flat, PositionWeight: costmodel.Flat}
	c, _ := r.Cost(costmodel.Unit{Layer: 1, Layers: 2, Chunk: 0, Chunks: 2, ContextTokens: 0})
	fmt.Printf("%.3f s\n", c)
	// Output: 0.015 s
}

func ExampleRetention() {
	v, _ := costmodel.Retention(0.047, 2*time.Second)
	fmt.Printf("%.4f\n", v)
	v, _ = costmodel.Retention(0.047, 0)
	fmt.Println(v)
	// Output:
	// 0.0235
	// +Inf
}

func ExampleModel_Decide() {
	m := costmodel.Model{
		Recompute: costmodel.Recompute{Alpha: 1e-6, Beta: 1e-3},
		Link:      costmodel.Link{BytesPerSecond: 25e9, Latency: 10 * time.Microsecond},
	}
	a, _ := m.Decide(costmodel.Unit{ContextTokens: 8192}, 1<<20)
	fmt.Println(a)
	// Output: offload
}

func ExampleFit() {
	r, _ := costmodel.Fit([]costmodel.Sample{
		{ContextTokens: 1024, Seconds: 0.012},
		{ContextTokens: 2048, Seconds: 0.014},
		{ContextTokens: 4096, Seconds: 0.018},
	})
	fmt.Printf("alpha %.2e s/token, beta %.3f s\n", r.Alpha, r.Beta)
	// Output: alpha 1.95e-06 s/token, beta 0.010 s
}
