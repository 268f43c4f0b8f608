// Package trace reads cache request traces one request at a time, so that a
// policy can be replayed on real workloads (see package replay).
//
// Three formats are understood, with the conventions of the libCacheSim
// simulator:
//
//   - [OracleGeneral]: libCacheSim's oracleGeneral binary format, 24-byte
//     little-endian records (uint32 time, uint64 object id, uint32 object
//     size, int64 virtual time of the object's next request, -1 for never).
//     Read with [NewOracleGeneralReader], written with
//     [NewOracleGeneralWriter].
//   - [Text]: one object id per line, every request of size 1. Read with
//     [NewTextReader].
//   - [CSV]: delimited text with the time, id and size in chosen columns, an
//     optional header line. Read with [NewCSVReader].
//
// Every reader implements [Reader]: Next fills a caller-owned [Request] and
// returns io.EOF after the last one. Readers stream: they hold one buffer,
// never the whole file, and do not allocate per request (except the CSV
// reader, which goes through encoding/csv). A text line or CSV record longer
// than 64 KiB is an error, so a reader's memory stays bounded whatever the
// input. Malformed input returns an error wrapping [ErrMalformed] (a text
// line or CSV record that does not parse or is too long, naming the line) or
// [ErrTruncated] (a binary file that ends inside a record, naming the byte
// offset). Errors are sticky: once Next has returned an error, io.EOF
// included, every later call returns the same error, so a trace that is cut
// short or unreadable never looks complete.
//
// For benchmarks and repeated replays, [Load] decodes a whole trace into a
// []Request and [SliceReader] replays it from memory.
//
// Readers are not safe for concurrent use; a [SliceReader] may be shared only
// if nobody calls Next on it concurrently.
package trace
