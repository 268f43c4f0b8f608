// Command prefixreplay measures production prefix reuse: it replays the
// Mooncake conversation trace (one sampled hour of a chat service, each
// prompt given as chained ids of 512-token blocks) through a kvcache.Cache
// for several GPU capacities and eviction policies, and reports how many
// blocks and tokens each request found already cached.
//
// Usage (from the repository's root):
//
//	go run ./examples/prefixreplay [flags]
//
// Requests run in file order, one at a time (batch size 1): Acquire matches
// the longest cached prefix and pins the request's blocks, then Release
// leaves them cached for the policy to evict. With -servers N it replays
// the trace through N servers behind a round-robin router instead, each
// with its own GPU and CPU tiers, then again with a Redis tier they share
// (fleet.go). See README.md.
package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
	"time"

	"github.com/kvtier/kvtier/internal/jsonlines"
	"github.com/kvtier/kvtier/internal/progress"
)

func main() {
	if err := runTo(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "prefixreplay:", err)
		os.Exit(1)
	}
}

// missingTraceHelp says, when the default trace is absent, that this
// program has no generated fallback and how to get the trace (TRACES.md).
const missingTraceHelp = "prefixreplay replays the Mooncake conversation trace and has no generated fallback; " +
	"from the repository's root, get the trace (see TRACES.md) with\n" +
	"  mkdir -p ../shared/traces && curl -fLo " + defaultTrace + " " + mooncakeTraceURL + "\n" +
	"or name another trace in Mooncake's format with -trace FILE"

// mooncakeTraceURL is where Mooncake publishes the trace of defaultTrace.
const mooncakeTraceURL = "https://raw.githubusercontent.com/kvcache-ai/Mooncake/main/FAST25-release/traces/conversation_trace.jsonl"

// run is runTo with notes to the process's standard error.
func run(args []string, stdout io.Writer) error { return runTo(args, stdout, os.Stderr) }

// runTo parses args, replays the trace for every (policy, capacity) pair,
// or with -servers through a fleet of servers (fleet.go), and writes the
// report to stdout; stderr gets notes (a missing trace, a skipped
// configuration) and a progress line per finished setting.
func runTo(args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args)
	if err != nil {
		return err
	}
	reqs, err := readTraceFile(o.trace)
	if errors.Is(err, fs.ErrNotExist) && o.trace == defaultTrace {
		return fmt.Errorf("%w\n%s", err, missingTraceHelp)
	}
	if err != nil {
		return err
	}
	total := len(reqs)
	if o.limit > 0 && o.limit < len(reqs) {
		reqs = reqs[:o.limit]
	}
	if o.servers > 0 {
		return runFleet(o, reqs, total, stdout, stderr)
	}
	b := unlimitedBound(reqs)
	var settings []setting
	for _, p := range o.policies {
		for _, c := range o.capacities {
			s := setting{policy: p, capacityTokens: c}
			if c == 0 { // unlimited: room for every block of the trace
				s = setting{policy: p, capacityTokens: int64(b.blocks) * traceBlockTokens, unlimited: true}
			}
			settings = append(settings, s)
		}
	}
	if o.parallel < 1 {
		o.parallel = runtime.GOMAXPROCS(0)
	}
	start := time.Now()
	rows, err := simulateAll(reqs, settings, simOptions{seed: o.seed, cost: retentionCost(o.alpha, o.beta), parallel: o.parallel,
		prog: progress.New(stderr, "prefixreplay", len(settings))})
	if err != nil {
		return err
	}
	maxRatio := ratio(int64(b.blockHits), int64(b.blocks))
	for i := range rows {
		rows[i].MaxBlockHitRatio = maxRatio
	}
	elapsed := time.Since(start)
	if o.svg != "" {
		if err := writeSVGFile(o.svg, rows, maxRatio); err != nil {
			return err
		}
	}
	if o.json {
		return jsonlines.Write(stdout, rows)
	}
	return writeText(stdout, o.trace, b, rows, min(o.parallel, len(settings)), elapsed)
}
