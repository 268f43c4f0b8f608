// Command multiturn simulates multi-turn chat sessions on a two-tier KV cache
// (GPU and CPU, with dropped units recomputed) and compares eviction
// policies by the tokens they make the server recompute, the bytes they move
// and the time to first token (TTFT) of every turn.
//
// Usage:
//
//	multiturn [flags]
//
// Sessions arrive as a Poisson process; each runs several turns separated by
// think time. A turn's prompt is the whole conversation so far plus a new
// user message, so it reuses the previous turn's KV if the cache still holds
// it; the answer is then decoded (Append) and the sequence released. The
// cache is kvcache in metadata-only mode (no Mover) on virtual time (an
// eviction.ManualClock); TTFT is computed from a cost model, never measured.
// Every policy sees the same workload (same seed). See README.md for the
// flags, the assumptions behind the cost coefficients and how to read the
// output.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/kvtier/kvtier/internal/jsonlines"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return // -h: the flag package printed the usage
		}
		fmt.Fprintln(os.Stderr, "multiturn:", err)
		os.Exit(1)
	}
}

// run parses args, simulates every policy and writes the report to stdout;
// usage, flag errors and a progress line per simulated run go to stderr.
func run(args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	rep, err := simulateAll(cfg, stderr)
	if err != nil {
		return err
	}
	if cfg.SVG != "" {
		if err := writeSVGFile(cfg.SVG, rep); err != nil {
			return err
		}
	}
	if cfg.JSON {
		return jsonlines.Write(stdout, rep.rows)
	}
	return writeText(stdout, rep)
}
