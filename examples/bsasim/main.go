// Command bsasim simulates the GPU block cache of block-sparse attention
// (MoBA) decoding on kvtier's kvcache, and tests the seed document's claim
// that a paged KV cache smaller than the context thrashes while a BSA
// layout, which stores each KV head's block separately, reads fewer bytes.
//
// The model is the seed's: 28 layers, 16 query and 8 KV heads of dimension
// 1024, bf16. A sequence is prefilled to context-steps tokens, then decodes
// one token per step until the context is reached. At every step each query
// head of each layer selects top-k MoBA blocks of 512 tokens, the current
// block always among them; kvcache's SparseAccess brings the units those
// blocks touch to the GPU tier, layer by layer, onboarding misses from a CPU
// tier that holds the whole context. The GPU tier's hit rate, units and
// bytes per step are reported per layout (paged: one 1 MiB unit per layer
// and 32-token page; BSA: one 2 MiB unit per layer, KV head and 512-token
// block), GPU eviction policy and GPU capacity.
//
// Usage:
//
//	bsasim [flags]
//
// With no flags it runs 2 layouts × 5 policies × 6 GPU sizes and prints a
// table followed by a "claim vs measured" block. -json prints one JSON
// object per row instead, -svg FILE plots hit rate against GPU size, and
// -export FILE writes the unit-access trace in libCacheSim's oracleGeneral
// format. See README.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/kvtier/kvtier/internal/jsonlines"
	"github.com/kvtier/kvtier/internal/progress"
	"github.com/kvtier/kvtier/layout"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return // -h: the usage was printed
		}
		fmt.Fprintln(os.Stderr, "bsasim:", err)
		os.Exit(1)
	}
}

// run parses args, simulates every configuration and writes the report to
// stdout; flag usage, a progress line per configuration and export notices
// go to stderr.
func run(args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	m := layout.SeedModel()
	w, err := newWorkload(&cfg, m)
	if err != nil {
		return err
	}
	var jobs []job
	for _, ln := range cfg.layouts {
		lay, err := layoutFor(ln, m, &cfg)
		if err != nil {
			return err
		}
		for _, pn := range cfg.policies {
			pol, err := policyFor(pn, &cfg)
			if err != nil {
				return err
			}
			for _, g := range cfg.sizesGiB {
				jobs = append(jobs, job{layoutName: ln, lay: lay, pol: pol, sizeGiB: g})
			}
		}
	}
	results, err := runAll(jobs, w, &cfg, progress.New(stderr, "bsasim", len(jobs)))
	if err != nil {
		return err
	}
	if cfg.json {
		err = jsonlines.Write(stdout, results)
	} else {
		err = writeTable(stdout, &cfg, results)
	}
	if err != nil {
		return err
	}
	if cfg.svg != "" {
		if err := writePlot(cfg.svg, &cfg, results); err != nil {
			return err
		}
	}
	if cfg.export != "" {
		for _, ln := range cfg.layouts {
			lay, err := layoutFor(ln, m, &cfg)
			if err != nil {
				return err
			}
			path := exportPath(cfg.export, ln, len(cfg.layouts) > 1)
			n, err := exportFile(path, lay, w)
			if err != nil {
				return err
			}
			fmt.Fprintf(stderr, "bsasim: wrote %d requests (%s layout) to %s\n", n, ln, path)
		}
	}
	return nil
}
