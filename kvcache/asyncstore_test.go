package kvcache

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/kvtier/kvtier/layout"
	"github.com/stretchr/testify/require"
)

// TestAsyncJitterSpreadsTransfers: with Jitter, transfers that start
// together on as many workers take different times: each waits Latency
// and a random share of Jitter, so eight of them spread over more than a
// tenth of Jitter (eight uniform draws fall within a tenth of their range
// with a probability below 1e-6; without Jitter they finish together).
func TestAsyncJitterSpreadsTransfers(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	store, err := NewMemoryStore(l, GPUAndCPU(Capacity{Units: 4}, Capacity{Units: 4}))
	require.NoError(t, err)
	const n, latency, jitter = 8, time.Millisecond, 50 * time.Millisecond
	a, err := NewAsyncMemoryStore(store, AsyncOptions{Workers: n, Latency: latency, Jitter: jitter})
	require.NoError(t, err)
	took := make(chan time.Duration, n)
	errs := make(chan error, n)
	for range n {
		start := time.Now()
		a.Start(nil, func(err error) {
			errs <- err
			took <- time.Since(start)
		})
	}
	a.Close()
	close(took)
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	var all []time.Duration
	for d := range took {
		all = append(all, d)
	}
	require.Len(t, all, n)
	lo, hi := slices.Min(all), slices.Max(all)
	require.GreaterOrEqual(t, lo, latency, "a transfer did not wait its Latency")
	require.Greater(t, hi-lo, jitter/10, "%d transfers with %v of jitter took %v", n, jitter, all)
}

// TestAsyncOptionsRejectNegativeDurations: a negative Latency, CopyTime or
// Jitter is an ErrInvalidConfig that names it.
func TestAsyncOptionsRejectNegativeDurations(t *testing.T) {
	l := tinyLayout(t, layout.PagedLayer, nil)
	store, err := NewMemoryStore(l, GPUAndCPU(Capacity{Units: 4}, Capacity{Units: 4}))
	require.NoError(t, err)
	for _, o := range []AsyncOptions{{Latency: -1}, {CopyTime: -1}, {Jitter: -time.Millisecond}} {
		_, err := NewAsyncMemoryStore(store, o)
		require.True(t, errors.Is(err, ErrInvalidConfig), "%+v: %v", o, err)
		require.ErrorContains(t, err, "-1")
	}
}
