package trace

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// OracleGeneralRecordSize is the size in bytes of one oracleGeneral record.
const OracleGeneralRecordSize = 24

// OracleGeneralReader reads libCacheSim's oracleGeneral binary format: a
// sequence of 24-byte little-endian records
//
//	uint32 time, uint64 obj_id, uint32 obj_size, int64 next_access_vtime
//
// with no header. A next_access_vtime of -1 or math.MaxInt64 (both used by
// libCacheSim's tools for "never again") becomes -1. Records are returned as
// they are, including those of size 0. Create it with
// [NewOracleGeneralReader]; it is not safe for concurrent use.
type OracleGeneralReader struct {
	r      *bufio.Reader
	offset int64
	rec    [OracleGeneralRecordSize]byte
	err    error // sticky error, io.EOF included
}

// NewOracleGeneralReader returns a reader of the oracleGeneral records of r.
// It buffers r, so r need not be buffered.
func NewOracleGeneralReader(r io.Reader) *OracleGeneralReader {
	return &OracleGeneralReader{r: bufio.NewReaderSize(r, 64<<10)}
}

// Next decodes the next record into *q. It returns io.EOF at a record
// boundary at the end of the input, and an error wrapping [ErrTruncated]
// naming the byte offset when the input ends inside a record. Errors of the
// underlying reader are returned wrapped. Errors are sticky: once Next fails
// (io.EOF included) it keeps returning the same error, so a trace cut
// inside a record never reads as complete on the next call.
func (o *OracleGeneralReader) Next(q *Request) error {
	if o.err != nil {
		return o.err
	}
	n, err := io.ReadFull(o.r, o.rec[:])
	switch {
	case err == io.EOF:
		o.err = io.EOF
		return o.err
	case err == io.ErrUnexpectedEOF:
		o.err = fmt.Errorf("%w: record at byte offset %d has %d of %d bytes", ErrTruncated, o.offset, n, OracleGeneralRecordSize)
		return o.err
	case err != nil:
		o.err = fmt.Errorf("trace: reading record at byte offset %d: %w", o.offset, err)
		return o.err
	}
	o.offset += OracleGeneralRecordSize
	decodeOracleGeneral(&o.rec, q)
	return nil
}

// Offset returns the byte offset of the next record to read.
func (o *OracleGeneralReader) Offset() int64 { return o.offset }

func decodeOracleGeneral(rec *[OracleGeneralRecordSize]byte, q *Request) {
	q.Time = int64(binary.LittleEndian.Uint32(rec[0:4]))
	q.ID = binary.LittleEndian.Uint64(rec[4:12])
	q.Size = int64(binary.LittleEndian.Uint32(rec[12:16]))
	q.NextAccess = int64(binary.LittleEndian.Uint64(rec[16:24]))
	if q.NextAccess == math.MaxInt64 {
		q.NextAccess = -1
	}
}

// OracleGeneralWriter writes requests in the oracleGeneral binary format.
// Create it with [NewOracleGeneralWriter] and call Flush when done; it is not
// safe for concurrent use.
type OracleGeneralWriter struct {
	w   *bufio.Writer
	n   int64
	rec [OracleGeneralRecordSize]byte
}

// NewOracleGeneralWriter returns a writer of oracleGeneral records to w.
func NewOracleGeneralWriter(w io.Writer) *OracleGeneralWriter {
	return &OracleGeneralWriter{w: bufio.NewWriterSize(w, 64<<10)}
}

// Write encodes one request. It returns an error wrapping [ErrMalformed]
// when a field does not fit the format: Time outside [0, 2^32), Size outside
// [0, 2^32), or NextAccess below -1.
func (o *OracleGeneralWriter) Write(q Request) error {
	switch {
	case q.Time < 0 || q.Time > math.MaxUint32:
		return fmt.Errorf("%w: request %d: Time %d does not fit a uint32", ErrMalformed, o.n, q.Time)
	case q.Size < 0 || q.Size > math.MaxUint32:
		return fmt.Errorf("%w: request %d: Size %d does not fit a uint32", ErrMalformed, o.n, q.Size)
	case q.NextAccess < -1:
		return fmt.Errorf("%w: request %d: NextAccess %d is below -1", ErrMalformed, o.n, q.NextAccess)
	}
	binary.LittleEndian.PutUint32(o.rec[0:4], uint32(q.Time))
	binary.LittleEndian.PutUint64(o.rec[4:12], q.ID)
	binary.LittleEndian.PutUint32(o.rec[12:16], uint32(q.Size))
	binary.LittleEndian.PutUint64(o.rec[16:24], uint64(q.NextAccess))
	if _, err := o.w.Write(o.rec[:]); err != nil {
		return fmt.Errorf("trace: writing request %d: %w", o.n, err)
	}
	o.n++
	return nil
}

// Flush writes any buffered records to the underlying writer.
func (o *OracleGeneralWriter) Flush() error {
	if err := o.w.Flush(); err != nil {
		return fmt.Errorf("trace: flushing: %w", err)
	}
	return nil
}
