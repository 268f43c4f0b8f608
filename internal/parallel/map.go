package parallel

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Map calls f on every element of jobs, on at most workers goroutines at
// once (workers < 1 means runtime.GOMAXPROCS(0)), and returns the results in
// the order of jobs. Jobs are handed out in order.
//
// If a call fails, Map returns a nil slice and the error of the first
// failed job in the order of jobs, not the first to fail in time. Once job k
// has failed, no job after k starts (the running ones finish), but every job
// before k still runs, since one of them may fail too and come first in
// order. Jobs are handed out in order, so when k fails every job before it
// has been handed out already.
//
// f may be called from several goroutines at once: it must be safe for
// that (jobs typically share read-only input). With no jobs Map returns an
// empty slice and calls nothing.
func Map[J, R any](jobs []J, workers int, f func(J) (R, error)) ([]R, error) {
	if workers < 1 {
		workers = runtime.GOMAXPROCS(0)
	}
	results := make([]R, len(jobs))
	errs := make([]error, len(jobs))
	// firstFailed is the lowest index of a failed job so far, len(jobs)
	// while none has failed. Only jobs after it may be skipped: skipping
	// one before it could hide the error that comes first in order.
	var firstFailed atomic.Int64
	firstFailed.Store(int64(len(jobs)))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if int64(i) > firstFailed.Load() {
					continue // a job before it failed: its result cannot matter
				}
				results[i], errs[i] = f(jobs[i])
				if errs[i] != nil {
					for cur := firstFailed.Load(); int64(i) < cur && !firstFailed.CompareAndSwap(cur, int64(i)); cur = firstFailed.Load() {
					}
				}
			}
		}()
	}
	for i := range jobs {
		if int64(i) > firstFailed.Load() {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return results, nil
}
