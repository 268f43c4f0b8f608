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
	// In a _test.go file next to the policy:
	testLRU := func(t *testing.T) {
		evictiontest.Run(t, func(cfg evictiontest.Config) eviction.Policy[int] {
			return eviction.NewLRU[int]()
		})
	}
	_ = testLRU // func TestLRU(t *testing.T) { evictiontest.Run(t, ...) }
}
