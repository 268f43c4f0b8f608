package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/kvtier/kvtier/eviction/replay"
	"github.com/kvtier/kvtier/eviction/trace"
	"github.com/kvtier/kvtier/internal/flagparse"
)

// errUsage reports command-line arguments that cannot be run.
var errUsage = errors.New("usage")

// options is everything the command line says.
type options struct {
	tracePath string
	format    trace.Format
	traceOpts trace.Options
	policies  []string
	sizes     []int64

	ignoreObjSize bool
	asJSON        bool
	stream        bool
	parallel      int

	s3SmallRatio, s3GhostRatio float64
	s3Threshold                int
	tinyLFUKeys                int

	timeSource replay.TimeSource
	timeUnit   time.Duration
}

// policyNames lists the POLICIES cachesim knows.
var policyNames = []string{"lru", "fifo", "s3fifo", "s3fifov0", "arc", "wtinylfu", "plru", "retention"}

// parseArgs parses the flags, which may come before, between or after the
// four positional arguments.
func parseArgs(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("cachesim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: cachesim [flags] TRACE TYPE POLICIES SIZES [flags]")
		fmt.Fprintln(stderr, "  TYPE: oracleGeneral, txt or csv; POLICIES: "+strings.Join(policyNames, ",")+"; SIZES: e.g. 128MiB,1GiB or 1000 with --ignore-obj-size")
		fs.PrintDefaults()
	}
	fs.BoolVar(&o.ignoreObjSize, "ignore-obj-size", false, "count every object as size 1: SIZES are numbers of objects")
	fs.BoolVar(&o.asJSON, "json", false, "print one JSON object per line")
	fs.BoolVar(&o.stream, "stream", false, "re-read the trace file for every replay instead of decoding it into memory once")
	fs.IntVar(&o.parallel, "parallel", 1, "replays to run at once (in-memory mode)")
	fs.IntVar(&o.traceOpts.CSV.TimeColumn, "csv-time-col", 0, "csv: 1-based column of the timestamp (0: none)")
	fs.IntVar(&o.traceOpts.CSV.IDColumn, "csv-id-col", 1, "csv: 1-based column of the object id")
	fs.IntVar(&o.traceOpts.CSV.SizeColumn, "csv-size-col", 0, "csv: 1-based column of the object size (0: every size is 1)")
	fs.BoolVar(&o.traceOpts.CSV.HasHeader, "csv-header", false, "csv: the first line is a header")
	delim := fs.String("csv-delimiter", ",", "csv: field delimiter, one character (\\t for a tab)")
	hashIDs := fs.Bool("hash-ids", false, "txt/csv: object ids are names, hashed to 64 bits (default: decimal numbers)")
	fs.Float64Var(&o.s3SmallRatio, "s3fifo-small-ratio", 0.10, "s3fifo: share of the cache given to the small queue")
	fs.Float64Var(&o.s3GhostRatio, "s3fifo-ghost-ratio", 0.90, "s3fifo: size of the ghost queue, as a share of the cache")
	fs.IntVar(&o.s3Threshold, "s3fifo-threshold", 2, "s3fifo: hits in the small queue that move an object to main (libCacheSim: 2; S3-FIFO paper: 1)")
	fs.IntVar(&o.tinyLFUKeys, "wtinylfu-keys", 0, "wtinylfu: objects the cache holds, which size its frequency sketch (0: the cache size with --ignore-obj-size, else the cache size over 4 KiB)")
	timeSrc := fs.String("time", "virtual", "clock of plru and retention: virtual (one tick per request) or trace (the trace's timestamps)")
	fs.DurationVar(&o.timeUnit, "time-unit", time.Second, "with -time trace: the duration of one unit of the trace's timestamps")

	var pos []string
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			return o, err
		}
		rest = fs.Args()
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		rest = rest[1:]
	}
	if len(pos) != 4 {
		fs.Usage()
		return o, fmt.Errorf("%w: want 4 arguments (TRACE TYPE POLICIES SIZES), got %d: %q", errUsage, len(pos), pos)
	}

	o.tracePath = pos[0]
	var err error
	if o.format, err = trace.ParseFormat(pos[1]); err != nil {
		return o, fmt.Errorf("%w: %w", errUsage, err)
	}
	if o.policies, err = parsePolicies(pos[2]); err != nil {
		return o, err
	}
	if o.sizes, err = parseSizes(pos[3]); err != nil {
		return o, err
	}
	o.traceOpts.HashIDs = *hashIDs
	o.traceOpts.CSV.HashIDs = *hashIDs
	if o.traceOpts.CSV.Delimiter, err = parseDelimiter(*delim); err != nil {
		return o, err
	}
	switch *timeSrc {
	case "virtual":
		o.timeSource = replay.VirtualTime
	case "trace":
		o.timeSource = replay.TraceTime
	default:
		return o, fmt.Errorf("%w: -time %q: want virtual or trace", errUsage, *timeSrc)
	}
	if o.parallel < 1 {
		return o, fmt.Errorf("%w: -parallel %d must be at least 1", errUsage, o.parallel)
	}
	return o, nil
}

// parsePolicies parses POLICIES: names of policyNames in any case, or the
// aliases s3-fifo, s3-fifov0 and s3fifo-v0. It is not flagparse.Names: a
// policy named twice is replayed twice, and an empty item is an error.
func parsePolicies(s string) ([]string, error) {
	var out []string
	for _, name := range strings.Split(s, ",") {
		name = strings.ToLower(strings.TrimSpace(name))
		switch name {
		case "s3-fifo":
			name = "s3fifo"
		case "s3-fifov0", "s3fifo-v0":
			name = "s3fifov0"
		}
		if !slices.Contains(policyNames, name) {
			return nil, fmt.Errorf("%w: unknown policy %q (want %s)", errUsage, name, strings.Join(policyNames, ", "))
		}
		out = append(out, name)
	}
	return out, nil
}

func parseDelimiter(s string) (rune, error) {
	if s == `\t` {
		return '\t', nil
	}
	r, n := utf8.DecodeRuneInString(s)
	if n == 0 || n != len(s) || r == utf8.RuneError {
		return 0, fmt.Errorf("%w: -csv-delimiter %q must be one character", errUsage, s)
	}
	return r, nil
}

// parseSize parses one cache size as flagparse.Bytes reads it: a number,
// possibly fractional, with an optional unit; at least 1 after truncation.
func parseSize(s string) (int64, error) {
	n, err := flagparse.Bytes(s)
	if err != nil {
		return 0, fmt.Errorf("%w: cache size: %w", errUsage, err)
	}
	return n, nil
}

// parseSizes parses SIZES, a positional argument: every comma-separated
// item must be a size, so an empty one ("1MiB,") is an error, where the
// other examples' -sizes flags skip it.
func parseSizes(s string) ([]int64, error) {
	var out []int64
	for _, f := range strings.Split(s, ",") {
		n, err := parseSize(f)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// formatSize prints a size the way the user most likely wrote it: with the
// largest binary unit that divides it exactly, else as a plain number.
func formatSize(n int64, objects bool) string {
	if objects {
		return strconv.FormatInt(n, 10)
	}
	for _, u := range []struct {
		name string
		mult int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.mult && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}
