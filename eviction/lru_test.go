package eviction_test

import (
	"testing"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/eviction/evictiontest"
)

func TestLRUConformance(t *testing.T) {
	evictiontest.Run(t, func(evictiontest.Config) eviction.Policy[int] { return eviction.NewLRU[int]() })
}
