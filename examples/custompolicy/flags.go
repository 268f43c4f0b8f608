package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// errUsage reports a bad flag value.
var errUsage = errors.New("custompolicy: bad usage")

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
	if o.policies, err = parsePolicies(*pols); err != nil {
		return o, err
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

// parseSizes parses "5%,128MiB,4096".
func parseSizes(s string) (sizeList, error) {
	var out sizeList
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if pct, ok := strings.CutSuffix(f, "%"); ok {
			v, err := strconv.ParseFloat(pct, 64)
			if err != nil || !(v > 0 && v <= 100) {
				return nil, fmt.Errorf("%w: size %q: a share must be in (0%%, 100%%]", errUsage, f)
			}
			out = append(out, size{share: v / 100, label: f})
			continue
		}
		n, err := parseBytes(f)
		if err != nil {
			return nil, err
		}
		out = append(out, size{absolute: n, label: f})
	}
	return out, nil
}

// units are the suffixes parseBytes knows, longest first.
var units = []struct {
	suffix string
	mult   float64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
}

// parseBytes parses a size with an optional binary (KiB) or decimal (KB)
// suffix; it must be at least 1.
func parseBytes(s string) (int64, error) {
	num, mult := s, 1.0
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, mult = n, u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(v) || v*mult < 1 || v*mult > 1<<62 {
		return 0, fmt.Errorf("%w: size %q is not a size of at least 1", errUsage, s)
	}
	return int64(v * mult), nil
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

// parsePolicies parses a comma list of policy names, in the order given,
// dropping repeats.
func parsePolicies(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		name := strings.ToLower(strings.TrimSpace(f))
		if !slices.Contains(policyNames, name) {
			return nil, fmt.Errorf("%w: unknown policy %q (want one of %s)", errUsage, name, strings.Join(policyNames, ", "))
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out, nil
}
