package eviction_test

import (
	"fmt"
	"math"
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

func TestWTinyLFUConfigInvalid(t *testing.T) {
	for _, cfg := range []eviction.WTinyLFUConfig{
		{Capacity: 0},
		{Capacity: -1},
		{Capacity: 10, Keys: -1},
		{Capacity: 10, Keys: 1<<30 + 1},
		{Capacity: 10, WindowRatio: 1},
		{Capacity: 10, WindowRatio: -0.1},
		{Capacity: 10, ProtectedRatio: 1.5},
		{Capacity: 10, ProtectedRatio: math.NaN()},
	} {
		_, err := eviction.NewWTinyLFU[int](cfg)
		require.ErrorIs(t, err, eviction.ErrInvalidConfig, "%+v", cfg)
		require.ErrorContains(t, err, "W-TinyLFU", "%+v", cfg)
	}
	// Keys the sketch cannot hash the same way in every process.
	_, err := eviction.NewWTinyLFU[float64](eviction.WTinyLFUConfig{Capacity: 10})
	require.ErrorIs(t, err, eviction.ErrInvalidConfig)
	require.ErrorContains(t, err, "float64")
	_, err = eviction.NewWTinyLFU[struct{ a, b int }](eviction.WTinyLFUConfig{Capacity: 10})
	require.ErrorIs(t, err, eviction.ErrInvalidConfig)
}

// TestWTinyLFUKeyTypes: integer and string keys of any size and type name
// are hashed, and two policies given the same calls choose the same
// victims.
func TestWTinyLFUKeyTypes(t *testing.T) {
	type name string
	type small uint8
	run := func(t *testing.T, insert func(i int) error, evict func() (any, bool)) []any {
		var victims []any
		for i := range 300 {
			require.NoError(t, insert(i))
			if i >= 40 {
				v, ok := evict()
				require.True(t, ok)
				victims = append(victims, v)
			}
		}
		return victims
	}
	check := func(t *testing.T, run func() []any) {
		require.Equal(t, run(), run())
	}
	t.Run("named string", func(t *testing.T) {
		check(t, func() []any {
			p, err := eviction.NewWTinyLFU[name](eviction.WTinyLFUConfig{Capacity: 40})
			require.NoError(t, err)
			return run(t, func(i int) error {
				p.Access(name(fmt.Sprint(i % 7)))
				return p.Insert(name(fmt.Sprint(i)), eviction.NewEntry(1))
			}, func() (any, bool) { return p.Evict() })
		})
	})
	t.Run("uint8", func(t *testing.T) {
		check(t, func() []any {
			p, err := eviction.NewWTinyLFU[small](eviction.WTinyLFUConfig{Capacity: 40})
			require.NoError(t, err)
			return run(t, func(i int) error {
				if err := p.Insert(small(i), eviction.NewEntry(1)); err != nil {
					p.Access(small(i)) // a key of 256 wrapped around
				}
				return nil
			}, func() (any, bool) { return p.Evict() })
		})
	})
	t.Run("int8 and uintptr", func(t *testing.T) {
		p, err := eviction.NewWTinyLFU[int8](eviction.WTinyLFUConfig{Capacity: 4})
		require.NoError(t, err)
		require.NoError(t, p.Insert(-5, eviction.NewEntry(1)))
		q, err := eviction.NewWTinyLFU[uintptr](eviction.WTinyLFUConfig{Capacity: 4})
		require.NoError(t, err)
		require.NoError(t, q.Insert(7, eviction.NewEntry(1)))
	})
}
