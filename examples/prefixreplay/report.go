package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// paperCapacity is the cache size of the Mooncake paper's claim.
const paperCapacity = 3_000_000

// writeText prints the table, the comparison with the paper's claim and the
// wall time.
func writeText(w io.Writer, trace string, b bound, rows []result, parallel int, elapsed time.Duration) error {
	maxRatio := ratio(int64(b.blockHits), int64(b.blocks))
	fmt.Fprintf(w, "trace %s: %d requests, %d blocks of %d tokens, %d input tokens\n",
		trace, b.requests, b.blocks, traceBlockTokens, b.tokens)
	fmt.Fprintf(w, "unlimited cache (direct count over the ids): %d block hits = %.2f%% of blocks, %.2f%% of tokens\n\n",
		b.blockHits, 100*maxRatio, 100*ratio(b.tokenHits, b.tokens))

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tcapacity\tGPU blocks\tblock hits\tblock hit\ttoken hit\tof max\tprefix hit\trecomputed\ttime\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.2f%%\t%.2f%%\t%.1f%%\t%.2f%%\t%d\t%.1fs\t\n",
			r.Policy, r.capacityLabel(), r.CapacityTokens/traceBlockTokens, r.BlockHits,
			100*r.BlockHitRatio, 100*r.TokenHitRatio, 100*ratio(int64(r.BlockHits), int64(b.blockHits)),
			100*ratio(int64(r.prefixHits), int64(r.Blocks)), r.recomputedBlocks, r.elapsed.Seconds())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rows {
		if r.tooLarge > 0 {
			fmt.Fprintf(w, "note: %s at %s: %d requests larger than the GPU counted as all miss\n",
				r.Policy, r.capacityLabel(), r.tooLarge)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Mooncake paper: about 40% of blocks reusable with an unlimited cache; a 3M-token cache reaches under half of that.")
	var at3M []string
	for _, r := range rows {
		if r.CapacityTokens == paperCapacity {
			at3M = append(at3M, fmt.Sprintf("%s %.2f%% (%.0f%% of unlimited)",
				r.Policy, 100*r.BlockHitRatio, 100*ratio(int64(r.BlockHits), int64(b.blockHits))))
		}
	}
	fmt.Fprintf(w, "here: %.2f%% with an unlimited cache", 100*maxRatio)
	if len(at3M) > 0 {
		fmt.Fprintf(w, "; at 3M tokens %s", strings.Join(at3M, ", "))
	} else {
		fmt.Fprint(w, "; 3M tokens not simulated")
	}
	fmt.Fprintln(w, ".")
	_, err := fmt.Fprintf(w, "time: %.1fs for %d settings, %d at a time\n", elapsed.Seconds(), len(rows), parallel)
	return err
}

// capacityLabel is the row's capacity as -capacity-tokens takes it.
func (r result) capacityLabel() string {
	if r.unlimited {
		return "unlimited"
	}
	return formatTokens(r.CapacityTokens)
}
