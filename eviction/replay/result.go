package replay

import "time"

// Result counts what a replay saw. With Config.IgnoreObjectSize every size
// is 1, so the byte fields count requests.
type Result struct {
	// Requests is the number of requests replayed (skipped ones excluded).
	Requests int64
	// Misses is the number of requests that were not hits, cached
	// afterwards or not.
	Misses int64
	// RequestBytes is the sum of the sizes of the requests replayed.
	RequestBytes int64
	// MissBytes is the sum of the sizes of the missed requests.
	MissBytes int64
	// Uncached is the number of misses that were not cached: objects larger
	// than the cache, or refused by the policy's admission ([Admitter]).
	Uncached int64
	// Evictions is the number of victims the policy chose.
	Evictions int64
	// SkippedZeroSize is the number of requests of size 0, not replayed.
	SkippedZeroSize int64
	// Elapsed is the wall-clock time of the replay, reading included.
	Elapsed time.Duration
}

// MissRatio returns Misses/Requests, or 0 when there were no requests.
func (r Result) MissRatio() float64 {
	if r.Requests == 0 {
		return 0
	}
	return float64(r.Misses) / float64(r.Requests)
}

// ByteMissRatio returns MissBytes/RequestBytes, or 0 when no bytes were
// requested.
func (r Result) ByteMissRatio() float64 {
	if r.RequestBytes == 0 {
		return 0
	}
	return float64(r.MissBytes) / float64(r.RequestBytes)
}

// Seconds returns Elapsed in seconds.
func (r Result) Seconds() float64 { return r.Elapsed.Seconds() }

// Throughput returns the requests replayed per second of Elapsed, or 0 when
// no time was measured.
func (r Result) Throughput() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Elapsed.Seconds()
}
