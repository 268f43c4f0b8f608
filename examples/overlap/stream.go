package main

import "github.com/kvtier/kvtier/kvcache"

// stream is a simulated copy engine: one stream that runs the transfers
// the cache starts one after the other, each taking perUnit per copy, on
// a virtual clock (microseconds). It is a kvcache.TransferEngine whose
// transfers complete when the server's clock passes their end (advance).
type stream struct {
	now     float64 // the server's clock
	free    float64 // when the stream is idle
	perUnit float64
	queue   []job
	// busy is the stream's total copy time.
	busy float64
}

type job struct {
	end  float64
	done func(error)
}

// Start queues the transfer behind those running.
func (s *stream) Start(copies []kvcache.Copy, done func(error)) {
	start := max(s.now, s.free)
	s.free = start + float64(len(copies))*s.perUnit
	s.busy += s.free - start
	s.queue = append(s.queue, job{end: s.free, done: done})
}

// reportDue reports done every transfer that ended by now.
func (s *stream) reportDue() {
	for len(s.queue) > 0 && s.queue[0].end <= s.now {
		j := s.queue[0]
		s.queue = s.queue[1:]
		j.done(nil)
	}
}

// next moves the clock to the end of the next transfer and reports it; it
// returns false when none is running.
func (s *stream) next() bool {
	if len(s.queue) == 0 {
		return false
	}
	s.now = max(s.now, s.queue[0].end)
	s.reportDue()
	return true
}
