// Command layoutcalc prints the KV-cache unit sizes of a model under each
// unit kind of package layout, and the worst-case bytes one decode step of
// block-sparse attention (MoBA) reads with a per-layer paged cache versus a
// BSA cache.
//
// Usage:
//
//	layoutcalc [flags]
//
// With no flags it describes the seed model (28 layers, 16 query / 8 KV
// heads, head dim 1024, bf16) with 32-token pages, 512-token BSA blocks, a
// 4096-token context and top-3 selection. -preset picks another model; the
// geometry flags override single fields of it. -json prints the same
// report as JSON.
package main

import (
	"fmt"
	"io"
	"os"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "layoutcalc:", err)
		os.Exit(2)
	}
}

// run parses args, computes the report and writes it to stdout; usage and
// flag errors go to stderr.
func run(args []string, stdout, stderr io.Writer) error {
	cfg, asJSON, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	rep, err := buildReport(cfg)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(stdout, rep)
	}
	return writeText(stdout, rep)
}
