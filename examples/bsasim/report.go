package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/kvtier/kvtier/layout"
)

// writeTable prints one row per configuration, a blank line between
// policies, then the claim block. It fits in 80 columns.
func writeTable(w io.Writer, cfg *config, rs []result) error {
	var b strings.Builder
	fmt.Fprintf(&b, "bsasim: seed model, context %d, MoBA block %d, top-%d, %s selection,\n",
		cfg.context, cfg.blockTokens, cfg.topK, selectorDesc(cfg))
	fmt.Fprintf(&b, "%d sequences x %d decode steps; hit = unit already on the GPU at a decode step\n\n",
		cfg.sequences, cfg.steps)
	fmt.Fprintf(&b, "%-6s  %-10s  %4s  %8s  %11s  %18s\n", "layout", "policy", "GiB", "hit rate", "misses/step", "MiB onboarded/step")
	for i, r := range rs {
		if i > 0 && (r.Layout != rs[i-1].Layout || r.Policy != rs[i-1].Policy) {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "%-6s  %-10s  %4g  %7.1f%%  %11.0f  %18.0f\n", r.Layout, r.Policy, r.GPUGiB,
			100*r.HitRate, r.MissesPerStep, r.MiBOnboardPerStep)
	}
	b.WriteString("\n")
	b.WriteString(claims(cfg, rs))
	_, err := io.WriteString(w, b.String())
	return err
}

func selectorDesc(cfg *config) string {
	switch cfg.selector {
	case "sticky":
		return fmt.Sprintf("sticky (p=%g)", cfg.stickyP)
	case "sink":
		return fmt.Sprintf("sink (p=%g)", cfg.sinkP)
	}
	return cfg.selector
}

// contextGiB is the KV of the whole context, in GiB: 3.5 for the seed.
func contextGiB(cfg *config) float64 {
	perToken, err := layout.SeedModel().BytesPerToken()
	if err != nil {
		return 0 // the seed model is valid; unreachable
	}
	return float64(perToken) * float64(cfg.context) / gib
}

// find returns the result of a configuration, if it was run.
func find(rs []result, lay, pol string, gib float64) (result, bool) {
	for _, r := range rs {
		if r.Layout == lay && r.Policy == pol && r.GPUGiB == gib {
			return r, true
		}
	}
	return result{}, false
}

func missPct(r result) float64 { return 100 * (1 - r.HitRate) }

// Thresholds that turn the seed's words into checks: "almost every
// access" is a miss rate of at least 90%, "about 35%" one within 10 points
// of it.
const (
	almostAll    = 90.0
	aboutS3FIFO  = 35.0
	aboutPlusMin = 10.0
)

func verdict(ok bool) string {
	if ok {
		return "holds"
	}
	return "does not hold"
}

// claims compares the seed document's claims with what this run measured.
// Every number comes from rs; a claim whose configurations were not run is
// left out.
func claims(cfg *config, rs []result) string {
	var b strings.Builder
	b.WriteString("claim vs measured (the seed's GB read as GiB; miss rate = 1 - hit rate)\n")
	if cfg.context != 4096 || cfg.blockTokens != 512 || cfg.topK != 3 || cfg.pageTokens != 32 {
		b.WriteString("  (the seed's claims are for context 4096, MoBA 512, top-3, 32-token pages)\n")
	}
	ctx := contextGiB(cfg)
	var below []string
	all := true
	for _, g := range cfg.sizesGiB {
		if g >= ctx {
			continue
		}
		if r, ok := find(rs, "paged", "lru", g); ok {
			below = append(below, fmt.Sprintf("%.1f%% at %g GiB", missPct(r), g))
			all = all && missPct(r) >= almostAll
		}
	}
	if len(below) > 0 {
		fmt.Fprintf(&b, "  \"paged, under %.4g GB, LRU misses almost every access\" (>= %.0f%%): %s\n", ctx, almostAll, verdict(all))
		fmt.Fprintf(&b, "    paged LRU misses %s\n", strings.Join(below, ", "))
	}
	if r, ok := find(rs, "paged", "s3fifo", 3); ok {
		m := missPct(r)
		fmt.Fprintf(&b, "  \"S3-FIFO misses about %.0f%% at 3 GB\" (+-%.0f points): %s\n", aboutS3FIFO, aboutPlusMin,
			verdict(m >= aboutS3FIFO-aboutPlusMin && m <= aboutS3FIFO+aboutPlusMin))
		fmt.Fprintf(&b, "    paged S3-FIFO misses %.1f%% at 3 GiB", m)
		if l, ok := find(rs, "paged", "lru", 3); ok {
			fmt.Fprintf(&b, " (LRU %.1f%%)", missPct(l))
		}
		if bs, ok := find(rs, "bsa", "s3fifo", 3); ok {
			fmt.Fprintf(&b, "; bsa %.1f%%", missPct(bs))
		}
		b.WriteString("\n")
	}
	b.WriteString(bytesBlock(cfg, rs))
	return b.String()
}

// bytesBlock shows what BSA buys: per layout, the MiB onboarded from the
// CPU per decode step by the best policy at each size, the MiB attention
// reads per step, and the worst case top-k allows.
func bytesBlock(cfg *config, rs []result) string {
	var b strings.Builder
	b.WriteString("MiB onboarded per decode step (best policy at each GPU size):\n")
	fmt.Fprintf(&b, "  %-6s", "GiB")
	for _, g := range cfg.sizesGiB {
		fmt.Fprintf(&b, " %6g", g)
	}
	fmt.Fprintf(&b, "  %6s %6s\n", "read", "worst")
	for _, lay := range cfg.layouts {
		fmt.Fprintf(&b, "  %-6s", lay)
		var any result
		for _, g := range cfg.sizesGiB {
			best, ok := result{}, false
			for _, r := range rs {
				if r.Layout == lay && r.GPUGiB == g && (!ok || r.MiBOnboardPerStep < best.MiBOnboardPerStep) {
					best, ok = r, true
				}
			}
			if !ok {
				fmt.Fprintf(&b, " %6s", "-")
				continue
			}
			any = best
			fmt.Fprintf(&b, " %6.0f", best.MiBOnboardPerStep)
		}
		fmt.Fprintf(&b, "  %6.0f %6.0f\n", any.MiBReadPerStep, float64(any.WorstUnitsPerStep)*any.UnitMiB)
	}
	return b.String()
}
