package layout

import (
	"math/rand/v2"
	"testing"
)

// newRand returns a generator seeded from the test name, so randomized tests
// are reproducible run to run yet differ between tests. The seed is logged.
func newRand(t testing.TB) *rand.Rand {
	var seed uint64 = 14695981039346656037
	for _, c := range []byte(t.Name()) {
		seed = (seed ^ uint64(c)) * 1099511628211
	}
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, seed>>1))
}
