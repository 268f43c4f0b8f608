package eviction_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvtier/kvtier/eviction"
	"github.com/kvtier/kvtier/eviction/evictiontest"
)

func TestWTinyLFUConformance(t *testing.T) {
	evictiontest.Run(t, func(cfg evictiontest.Config) eviction.Policy[int] {
		p, err := eviction.NewWTinyLFU[int](eviction.WTinyLFUConfig{Capacity: cfg.Capacity})
		require.NoError(t, err)
		return p
	})
}
