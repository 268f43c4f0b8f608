package kvcache

import (
	"fmt"
	"testing"

	"github.com/kvtier/kvtier/eviction"
)

// BenchmarkMissResident acquires, commits and releases a new 2k-token
// prompt per iteration (seed model, paged per layer: 128 blocks, 3,584
// units) on a GPU full of cached units, resident of them, so that every
// unit of the prompt takes a victim's slot (dropped: no CPU tier), under
// each default policy. A policy whose miss path grows with what it holds
// shows as a cost per unit that grows from 10k to 1M resident units. One
// iteration is one prompt; ns/unit is the cost per unit of the prompt.
func BenchmarkMissResident(b *testing.B) {
	policies := []struct {
		name string
		f    PolicyFactory
	}{{"lru", LRUPolicy()}, {"fifo", FIFOPolicy()}, {"s3fifo", S3FIFOPolicy(eviction.S3FIFOConfig{})}}
	for _, p := range policies {
		for _, resident := range []int{10_000, 100_000, 1_000_000} {
			b.Run(fmt.Sprintf("%s/resident=%dk", p.name, resident/1000), func(b *testing.B) {
				missResident(b, p.f, resident)
			})
		}
	}
}

func missResident(b *testing.B, policy PolicyFactory, resident int) {
	const tokens = 2 << 10
	l := seedPaged(b, 16)
	units := tokens / 16 * l.UnitsPerBlock()
	tiers := []TierConfig{{Name: "gpu", Capacity: Capacity{Units: int64(resident)}, Policy: policy}}
	c, err := New(Config{Layout: l, Tiers: tiers})
	if err != nil {
		b.Fatal(err)
	}
	seed := 0
	prompt := make([]uint32, tokens)
	run := func() {
		seed++
		for i := range prompt {
			prompt[i] = uint32(seed*tokens + i) // distinct from every earlier prompt
		}
		p, err := c.Acquire(Request{Tokens: prompt})
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Commit(p.Seq, tokens); err != nil {
			b.Fatal(err)
		}
		if err := c.Release(p.Seq); err != nil {
			b.Fatal(err)
		}
	}
	// Fill the GPU, then turn it over once more so that every policy is
	// in its steady state (S3-FIFO's ghost queue full).
	for range 2 * resident / units {
		run()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		run()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(units), "ns/unit")
	if st := c.Stats(); st.Tiers[0].Hits != 0 {
		b.Fatalf("%d hits: the prompts were to miss", st.Tiers[0].Hits)
	}
}
