package trace

import (
	"errors"
	"io"
)

// Request is one request of a trace.
type Request struct {
	// Time is the request's timestamp in the trace's own unit (seconds for
	// oracleGeneral traces). Formats without timestamps use the request's
	// 0-based index.
	Time int64
	// ID names the requested object.
	ID uint64
	// Size is the object's size in bytes (1 for formats without sizes). It
	// may be 0 when the trace says so; package replay skips such requests,
	// as libCacheSim's readers do by default.
	Size int64
	// NextAccess is the virtual time of the next request for the same
	// object, as the trace records it, or -1 when there is none or the
	// format does not say. libCacheSim's oracleGeneral traces number
	// requests from 1, so the request at 0-based index i has virtual time
	// i+1 and NextAccess n points at index n-1.
	NextAccess int64
}

// Reader yields the requests of a trace in order.
type Reader interface {
	// Next overwrites *r with the next request. It returns io.EOF when the
	// trace has no more requests, and an error wrapping ErrMalformed or
	// ErrTruncated when the input is bad; *r is then unspecified.
	Next(r *Request) error
}

// Load reads every request of r into memory. It returns the requests read so
// far together with any error other than io.EOF.
func Load(r Reader) ([]Request, error) {
	var reqs []Request
	for {
		var q Request
		err := r.Next(&q)
		if errors.Is(err, io.EOF) {
			return reqs, nil
		}
		if err != nil {
			return reqs, err
		}
		reqs = append(reqs, q)
	}
}

// SliceReader replays requests held in memory. The zero SliceReader is an
// empty trace. It never copies or changes the slice it was given.
type SliceReader struct {
	reqs []Request
	pos  int
}

// NewSliceReader returns a reader over reqs, positioned at the first one.
func NewSliceReader(reqs []Request) *SliceReader {
	return &SliceReader{reqs: reqs}
}

// Next copies the next request into *r, or returns io.EOF.
func (s *SliceReader) Next(r *Request) error {
	if s.pos >= len(s.reqs) {
		return io.EOF
	}
	*r = s.reqs[s.pos]
	s.pos++
	return nil
}

// Rest returns the requests not yet read and marks them read, so that a
// replay loop can range over them directly instead of calling Next once per
// request. The returned slice aliases the reader's slice.
func (s *SliceReader) Rest() []Request {
	rest := s.reqs[s.pos:]
	s.pos = len(s.reqs)
	return rest
}

// Reset moves the reader back to the first request.
func (s *SliceReader) Reset() { s.pos = 0 }

// Len returns the number of requests not yet read.
func (s *SliceReader) Len() int { return len(s.reqs) - s.pos }
