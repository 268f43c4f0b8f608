package parallel

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMapKeepsJobOrder: whatever the number of workers and however long
// each call takes, result i is f(jobs[i]), as a sequential loop gives.
func TestMapKeepsJobOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, workers := range []int{-1, 0, 1, 2, 3, 8, 100} {
		for _, n := range []int{0, 1, 2, 7, 50} {
			jobs := make([]int, n)
			want := make([]string, n)
			for i := range jobs {
				jobs[i] = rng.IntN(1000)
				want[i] = fmt.Sprint(jobs[i] * jobs[i])
			}
			var calls atomic.Int32
			got, err := Map(jobs, workers, func(j int) (string, error) {
				calls.Add(1)
				// Later jobs often finish first.
				time.Sleep(time.Duration(j%200) * time.Microsecond)
				return fmt.Sprint(j * j), nil
			})
			require.NoError(t, err)
			require.NotNil(t, got)
			require.Equal(t, want, got, "workers %d, %d jobs", workers, n)
			require.Equal(t, int32(n), calls.Load(), "every job once")
		}
	}
}

// TestMapBoundsConcurrency: no more than workers calls run at once, and
// with enough jobs all workers are used.
func TestMapBoundsConcurrency(t *testing.T) {
	for _, workers := range []int{1, 2, 5} {
		var running, peak atomic.Int32
		jobs := make([]int, 40)
		_, err := Map(jobs, workers, func(int) (int, error) {
			r := running.Add(1)
			for {
				p := peak.Load()
				if r <= p || peak.CompareAndSwap(p, r) {
					break
				}
			}
			time.Sleep(200 * time.Microsecond)
			running.Add(-1)
			return 0, nil
		})
		require.NoError(t, err)
		require.LessOrEqual(t, peak.Load(), int32(workers))
		require.Positive(t, peak.Load())
	}
}

// TestMapReturnsFirstErrorInJobOrder: job 7 fails at once, job 3 fails
// later in time; Map reports job 3's error, as a sequential loop would.
func TestMapReturnsFirstErrorInJobOrder(t *testing.T) {
	errJob := errors.New("job failed")
	jobs := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	release := make(chan struct{})
	got, err := Map(jobs, len(jobs), func(j int) (int, error) {
		switch j {
		case 3:
			<-release // fails only after job 7 has failed
			return 0, fmt.Errorf("%w: %d", errJob, j)
		case 7:
			defer close(release)
			return 0, fmt.Errorf("%w: %d", errJob, j)
		}
		return j, nil
	})
	require.ErrorIs(t, err, errJob)
	require.EqualError(t, err, "job failed: 3")
	require.Nil(t, got)
}

// TestMapStopsAfterFailure: with one worker, a failing first job is the
// only call made.
func TestMapStopsAfterFailure(t *testing.T) {
	calls := 0
	_, err := Map([]int{0, 1, 2, 3}, 1, func(j int) (int, error) {
		calls++
		return 0, errors.New("no")
	})
	require.EqualError(t, err, "no")
	require.Equal(t, 1, calls)
}
