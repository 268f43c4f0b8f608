// Command cachesim replays a cache trace through kvtier's eviction policies
// and prints miss ratios, following the conventions of libCacheSim's
// cachesim:
//
//	cachesim [flags] TRACE TYPE POLICIES SIZES [flags]
//
// For example:
//
//	go run ./examples/cachesim ../shared/traces/cloudPhysicsIO.oracleGeneral.bin oracleGeneral lru,fifo,s3fifo 128MiB,256MiB
//
// TRACE is a trace file. TYPE is its format: oracleGeneral (libCacheSim's
// binary format), txt (one object id per line) or csv (columns chosen with
// -csv-time-col, -csv-id-col, -csv-size-col, -csv-header, -csv-delimiter).
// POLICIES is a comma-separated list of lru, fifo, s3fifo, s3fifov0, arc,
// wtinylfu, plru and retention. SIZES is a comma-separated list of cache sizes: plain numbers,
// or numbers with a unit, B, KiB/MiB/GiB/TiB (powers of 1024) or KB/MB/GB/TB
// (powers of 1000), case-insensitive, from 1 byte to 4 EiB.
//
// Flags may come before or after the positional arguments (a plain "--"
// is not special). --ignore-obj-size counts every object as size 1, so
// that SIZES are numbers of objects; txt traces have no sizes, so every
// request of one already has size 1.
//
// The output is one line per policy and size, in the order given:
//
//	<trace> <policy> cache size <size>, <n> req, <m> miss, miss ratio <r>, byte miss ratio <b>
//
// and with -json one JSON object per line with the fields trace, policy,
// cache_size, requests, misses, miss_ratio, byte_misses, byte_miss_ratio
// and seconds.
//
// The policies:
//
//   - lru, fifo: eviction.NewLRU, eviction.NewFIFO.
//   - s3fifo: eviction.NewS3FIFO with libCacheSim's defaults (small queue
//     10%, ghost 90%, move-to-main threshold 2), changed with
//     -s3fifo-small-ratio, -s3fifo-ghost-ratio and -s3fifo-threshold; this
//     is libCacheSim's S3FIFO (December 2024 version).
//   - s3fifov0: the same with S3FIFOConfig.Original, libCacheSim's
//     S3FIFOv0 (the original S3-FIFO).
//   - arc: eviction.NewARC (Megiddo and Modha's ARC), libCacheSim's ARC.
//   - wtinylfu: eviction.NewWTinyLFU (Caffeine's W-TinyLFU), its sketch
//     sized for -wtinylfu-keys objects (default: the cache size with
//     --ignore-obj-size, else the cache size over 4 KiB).
//   - plru: eviction.NewPrioritizedLRU. A trace carries no priorities, so
//     every object has the default priority and plru behaves as LRU.
//   - retention: eviction.NewRetention, Pensieve's cost / time-inactive,
//     with the same recompute cost for every object (Alpha 0, Beta 1, flat
//     weights; a block-I/O trace has no context lengths or layers). With
//     equal costs the lowest value is the longest inactive object and ties
//     go to the older use, so on these traces retention IS LRU (the tests
//     check that the counts are equal); it shows the cost-aware policy's
//     overhead, not a different miss ratio.
//
// The clock of plru and retention moves one tick per request (virtual
// time), or follows the trace's timestamps with -time trace (-time-unit
// sets their unit, default 1s).
//
// By default the trace is decoded into memory once (replay.Prepare, ids
// renumbered densely) and replayed for every policy and size, -parallel at
// a time; lru, fifo, s3fifo, s3fifov0, arc, wtinylfu and plru then index those ids with a
// slice (replay.Prepared.NewIndex, an eviction.DenseIndex) instead of a
// map, which gives the same results about twice as fast. -stream re-reads
// the file for each replay instead, in constant memory, with map indexes.
// wtinylfu's sketch hashes the ids it sees, so its counts with the dense
// ids can differ slightly from -stream's with the trace's ids (other ids,
// other collisions in the sketch); the other policies' cannot.
package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "cachesim:", err)
		os.Exit(2)
	}
}

// run parses args, runs every replay and writes one line per result to
// stdout. Usage and flag errors go to stderr. A trace missing from the
// shared traces folder gets a pointer to TRACES.md.
func run(args []string, stdout, stderr io.Writer) error {
	opts, err := parseArgs(args, stderr)
	if err != nil {
		return err
	}
	results, err := simulate(opts)
	if errors.Is(err, fs.ErrNotExist) && strings.Contains(filepath.ToSlash(opts.tracePath), "shared/traces/") {
		return fmt.Errorf("%w (the public traces are not in the repository: TRACES.md at its root says where to get them)", err)
	}
	if err != nil {
		return err
	}
	return writeResults(stdout, opts, results)
}
