// Command custompolicy shows how to write an eviction policy for kvtier and
// measure it: package lfu implements eviction.Policy (least frequently used,
// O(1) with frequency buckets), its tests pass the evictiontest conformance
// suite, and this program replays a cache trace through it and through the
// shipped LRU, FIFO and S3-FIFO with package eviction/replay, printing a
// miss-ratio table (or JSON rows) and optionally an SVG plot.
//
// Usage (from the repository's root):
//
//	go run ./examples/custompolicy [flags]
//
// The trace is the cloudPhysicsIO block-I/O trace of libCacheSim when
// ../shared/traces holds it, else a generated Zipf trace. See README.md.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/kvtier/kvtier/internal/jsonlines"
)

func main() {
	if err := runTo(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "custompolicy:", err)
		os.Exit(1)
	}
}

// run is runTo with notes to the process's standard error.
func run(args []string, stdout io.Writer) error { return runTo(args, stdout, os.Stderr) }

// runTo parses args, loads the trace, replays it through every (policy,
// cache size) pair and writes the report to stdout; stderr gets a note
// when the default trace is absent and a generated one replaces it.
func runTo(args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args)
	if err != nil {
		return err
	}
	src, err := loadSource(o, stderr)
	if err != nil {
		return err
	}
	sizes, err := o.sizes.resolve(src.workingSet)
	if err != nil {
		return err
	}
	if o.parallel < 1 {
		o.parallel = runtime.GOMAXPROCS(0)
	}
	start := time.Now()
	rows, err := compare(src, o.policies, sizes, o.parallel)
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	if o.svg != "" {
		if err := writeSVGFile(o.svg, src, rows); err != nil {
			return err
		}
	}
	if o.json {
		return jsonlines.Write(stdout, rows)
	}
	return writeText(stdout, src, o.policies, rows, elapsed)
}
