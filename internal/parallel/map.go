package parallel

import (
	"runtime"
	"sync"
)

// Map calls f on every element of jobs, on at most workers goroutines at
// once (workers < 1 means runtime.GOMAXPROCS(0)), and returns the results in
// the order of jobs. Jobs are handed out in order.
//
// If a call fails, Map returns a nil slice and the error of the first
// failed job in the order of jobs, not the first to fail in time. Once a
// call has failed no further call starts (the running ones finish). That
// does not change which error is returned: every job before a failed one
// was handed out before it, so the first failure in order is among the
// jobs that ran.
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
	next := make(chan int)
	failed := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for range min(workers, len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				select {
				case <-failed:
					continue // skip: the result is an error anyway
				default:
				}
				results[i], errs[i] = f(jobs[i])
				if errs[i] != nil {
					once.Do(func() { close(failed) })
				}
			}
		}()
	}
feed:
	for i := range jobs {
		select {
		case next <- i:
		case <-failed:
			break feed
		}
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
