package evictiontest_test

import (
	"testing"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/eviction/evictiontest"
)

// This is how a policy's own tests run the suite: one call in a test
// function, with a factory that builds a fresh, empty policy from the
// suite's Config. A policy that reads time must take cfg.Clock; a
// capacity-aware one takes cfg.Capacity.
func ExampleRun() {
	// In a _test.go file next to the policy, as a func TestXxx(t *testing.T):
	testPrioritizedLRU := func(t *testing.T) {
		evictiontest.Run(t, func(cfg evictiontest.Config) eviction.Policy[int] {
			return eviction.NewPrioritizedLRU[int](cfg.Clock)
		})
	}
	testS3FIFO := func(t *testing.T) {
		evictiontest.Run(t, func(cfg evictiontest.Config) eviction.Policy[int] {
			p, err := eviction.NewS3FIFO[int](eviction.S3FIFOConfig{Capacity: cfg.Capacity})
			if err != nil {
				t.Fatal(err)
			}
			return p
		})
	}
	_, _ = testPrioritizedLRU, testS3FIFO
}
