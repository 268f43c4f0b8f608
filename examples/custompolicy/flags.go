package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/kvtier/kvtier/internal/flagparse"
)

// errUsage reports a bad flag value.
var errUsage = errors.New("bad usage") // main prefixes "custompolicy: "

// options is the parsed command line.
type options struct {
	trace         string
	traceSet      bool // -trace was given: it must exist
	format        string
	zipf          bool
	zipfRequests  int
	zipfObjects   int
	zipfAlpha     float64
	seed          uint64
	sizes         sizeList
	ignoreObjSize bool
	policies      []string
	parallel      int
	json          bool
	svg           string
}

// defaultSizes are shares of the trace's working set, so they fit any trace.
const defaultSizes = "1%,2%,5%,10%,20%,40%"

func parseFlags(args []string) (options, error) {
	fs := flag.NewFlagSet("custompolicy", flag.ContinueOnError)
	var o options
	fs.StringVar(&o.trace, "trace", defaultTrace, "cache trace (oracleGeneral .bin or one id per line .txt); when the default is absent, a Zipf trace is generated")
	fs.StringVar(&o.format, "format", "", "trace format: oracleGeneral or txt (default: from the file extension)")
	fs.BoolVar(&o.zipf, "zipf", false, "replay a generated Zipf trace instead of a file")
	fs.IntVar(&o.zipfRequests, "zipf-requests", 500_000, "Zipf trace: requests")
	fs.IntVar(&o.zipfObjects, "zipf-objects", 50_000, "Zipf trace: distinct objects")
	fs.Float64Var(&o.zipfAlpha, "zipf-alpha", 0.9, "Zipf trace: skew (popularity of rank r is 1/r^alpha)")
	fs.Uint64Var(&o.seed, "seed", 1, "Zipf trace: random seed")
	sizes := fs.String("sizes", defaultSizes, "cache sizes, comma-separated: a share of the working set (5%) or an absolute size (128MiB, 1GiB, 4096; objects with -ignore-obj-size)")
	fs.BoolVar(&o.ignoreObjSize, "ignore-obj-size", false, "count every object as size 1 (libCacheSim's --ignore-obj-size)")
	pols := fs.String("policy", strings.Join(policyNames, ","), "policies, comma-separated: "+strings.Join(policyNames, ", "))
	fs.IntVar(&o.parallel, "parallel", 0, "replays run at once (0 = GOMAXPROCS)")
	fs.BoolVar(&o.json, "json", false, "print one JSON object per (policy, size) instead of a table")
	fs.StringVar(&o.svg, "svg", "", "write a plot of miss ratio vs cache size to this file")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	fs.Visit(func(f *flag.Flag) { o.traceSet = o.traceSet || f.Name == "trace" })
	var err error
	if o.sizes, err = parseSizes(*sizes); err != nil {
		return o, err
	}
	// A policy named twice is replayed once.
	if o.policies, err = flagparse.NameSet(*pols, policyNames); err != nil {
		return o, fmt.Errorf("%w: -policy: %w", errUsage, err)
	}
	return o, nil
}

// size is one -sizes entry: a share of the working set or an absolute size.
type size struct {
	share    float64 // in (0, 1] when relative
	absolute int64
	label    string
}

type sizeList []size

// parseSizes parses "5%,128MiB,4096": shares of the working set, or sizes
// in bytes (objects with -ignore-obj-size) as flagparse.Bytes reads them.
func parseSizes(s string) (sizeList, error) {
	var out sizeList
	for _, f := range flagparse.Split(s) {
		if pct, ok := strings.CutSuffix(f, "%"); ok {
			v, err := strconv.ParseFloat(pct, 64)
			if err != nil || !(v > 0 && v <= 100) {
				return nil, fmt.Errorf("%w: size %q: a share must be in (0%%, 100%%]", errUsage, f)
			}
			out = append(out, size{share: v / 100, label: f})
			continue
		}
		n, err := flagparse.Bytes(f)
		if err != nil {
			return nil, fmt.Errorf("%w: -sizes: %w", errUsage, err)
		}
		out = append(out, size{absolute: n, label: f})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: -sizes %q lists no size", errUsage, s)
	}
	return out, nil
}

// resolve turns shares into sizes for a working set of ws (at least 1 each).
func (l sizeList) resolve(ws int64) ([]cacheSize, error) {
	out := make([]cacheSize, 0, len(l))
	for _, s := range l {
		n := s.absolute
		if s.share > 0 {
			n = max(1, int64(s.share*float64(ws)))
		}
		out = append(out, cacheSize{bytes: n, label: s.label})
	}
	return out, nil
}
