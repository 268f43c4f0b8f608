package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"

	"github.com/kvtier/kvtier/internal/flagparse"
)

// errUsage reports a bad command line.
var errUsage = errors.New("bad usage") // main prefixes "bsasim: "

// config is everything one run of the simulation is computed from.
type config struct {
	layouts  []string  // "paged", "bsa"
	policies []string  // see policyNames
	sizesGiB []float64 // GPU tier capacities

	sequences, steps int
	context          int // tokens when the last decode step runs
	blockTokens      int // MoBA selection block, also the BSA unit's tokens
	pageTokens       int // paged unit's tokens
	topK             int // blocks each query head selects, the current included

	selector     string
	stickyP      float64
	sinkP        float64
	sinkPriority int // prioritized LRU: priority of the first MoBA block
	seed         uint64
	parallel     int

	json   bool
	svg    string
	export string
}

// Defaults. sequences × steps were chosen so that the full default grid
// (2 layouts × 5 policies × 6 sizes) runs in well under a minute on two
// cores (see README.md for the measurement).
const (
	defaultSequences = 4
	defaultSteps     = 96
)

var (
	layoutNames   = []string{"paged", "bsa"}
	policyNames   = []string{"lru", "fifo", "s3fifo", "prio-lru", "retention"}
	selectorNames = []string{"uniform", "sticky", "sink"}
)

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("bsasim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	layouts := fs.String("layouts", strings.Join(layoutNames, ","), "layouts to compare: paged (per-layer 32-token pages) and/or bsa (per-layer per-KV-head 512-token blocks)")
	policies := fs.String("policies", strings.Join(policyNames, ","), "GPU eviction policies: lru, fifo, s3fifo, prio-lru, retention")
	sizes := fs.String("sizes", "1,2,3,3.5,4,6", "GPU tier capacities in GiB, comma separated")
	var c config
	fs.IntVar(&c.sequences, "sequences", defaultSequences, "sequences per configuration (batch size 1, cache reset for each)")
	fs.IntVar(&c.steps, "steps", defaultSteps, "decode steps per sequence; the prompt is context-steps tokens")
	fs.IntVar(&c.context, "context", 4096, "tokens in the sequence at its last decode step")
	fs.IntVar(&c.blockTokens, "block", 512, "MoBA block in tokens (also the BSA unit)")
	fs.IntVar(&c.pageTokens, "page", 32, "tokens per page of the paged layout")
	fs.IntVar(&c.topK, "topk", 3, "blocks each query head selects, the current block included")
	fs.StringVar(&c.selector, "selector", "uniform", "block selection: uniform, sticky or sink")
	fs.Float64Var(&c.stickyP, "sticky-p", 0.8, "sticky selector: probability that a head keeps each of its previous picks")
	fs.Float64Var(&c.sinkP, "sink-p", 0.9, "sink selector: probability that a head picks the first block (attention sink)")
	fs.IntVar(&c.sinkPriority, "sink-priority", 80, "prio-lru: retention priority (0-100) of the first MoBA block's units; 35 (the default priority) makes prio-lru plain LRU")
	fs.Uint64Var(&c.seed, "seed", 1, "random seed (the selections of sequence i depend only on seed and i)")
	fs.IntVar(&c.parallel, "parallel", runtime.GOMAXPROCS(0), "configurations simulated at once")
	fs.BoolVar(&c.json, "json", false, "print one JSON object per result row instead of the table")
	fs.StringVar(&c.svg, "svg", "", "write an SVG plot of hit rate vs GPU GiB to this file")
	fs.StringVar(&c.export, "export", "", "write the unit-access trace in libCacheSim's oracleGeneral format to this file (one file per layout: NAME.<layout>.EXT when several)")
	if err := fs.Parse(args); err != nil {
		return config{}, fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	var err error
	if c.layouts, err = parseNames("-layouts", *layouts, layoutNames); err != nil {
		return config{}, err
	}
	if c.policies, err = parseNames("-policies", *policies, policyNames); err != nil {
		return config{}, err
	}
	if c.sizesGiB, err = parseSizes(*sizes); err != nil {
		return config{}, err
	}
	return c, c.validate()
}

// parseNames parses the comma-separated names of flag flagName, each one
// of known. A name given twice is an error: it would print the same rows
// twice.
func parseNames(flagName, s string, known []string) ([]string, error) {
	out, err := flagparse.Names(s, known)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errUsage, flagName, err)
	}
	return out, nil
}

// parseSizes parses the GPU sizes of -sizes, in GiB: positive, at most
// 2^20, none twice; they are returned sorted.
func parseSizes(s string) ([]float64, error) {
	out, err := flagparse.Floats(s)
	if err != nil {
		return nil, fmt.Errorf("%w: -sizes: %w", errUsage, err)
	}
	for i, v := range out {
		if !(v > 0) || v > 1<<20 {
			return nil, fmt.Errorf("%w: -sizes: %g is not a positive number of GiB", errUsage, v)
		}
		if slices.Contains(out[:i], v) {
			return nil, fmt.Errorf("%w: -sizes: %g given twice", errUsage, v)
		}
	}
	slices.Sort(out)
	return out, nil
}

func (c *config) validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{errUsage}, a...)...)
	}
	switch {
	case c.sequences < 1:
		return bad("-sequences %d must be at least 1", c.sequences)
	case c.steps < 1:
		return bad("-steps %d must be at least 1", c.steps)
	case c.context <= c.steps || c.context > 1<<24:
		return bad("-context %d must exceed -steps %d (the prompt is context-steps tokens) and be at most 2^24", c.context, c.steps)
	case c.pageTokens < 2 || c.blockTokens < c.pageTokens || c.blockTokens%c.pageTokens != 0:
		return bad("-page %d must be at least 2 and divide -block %d", c.pageTokens, c.blockTokens)
	case c.topK < 1:
		return bad("-topk %d must be at least 1 (the current block)", c.topK)
	case !slices.Contains(selectorNames, c.selector):
		return bad("-selector %q: want one of %s", c.selector, strings.Join(selectorNames, ", "))
	case !(c.stickyP >= 0 && c.stickyP <= 1):
		return bad("-sticky-p %g must be in [0, 1]", c.stickyP)
	case !(c.sinkP >= 0 && c.sinkP <= 1):
		return bad("-sink-p %g must be in [0, 1]", c.sinkP)
	case c.sinkPriority < 0 || c.sinkPriority > 100:
		return bad("-sink-priority %d must be in [0, 100]", c.sinkPriority)
	case c.parallel < 1:
		return bad("-parallel %d must be at least 1", c.parallel)
	}
	// Block sizes must be powers of two (layout.New's rule for units).
	for _, v := range []struct {
		name string
		n    int
	}{{"-page", c.pageTokens}, {"-block", c.blockTokens}} {
		if v.n&(v.n-1) != 0 {
			return bad("%s %d must be a power of two", v.name, v.n)
		}
	}
	return nil
}

// prompt is the number of prompt tokens: the context reaches c.context at
// the last decode step.
func (c *config) prompt() int { return c.context - c.steps }
