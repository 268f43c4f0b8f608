package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kvtier/kvtier/internal/svgplot"
)

// formatSize prints a cache size in the trace's unit.
func formatSize(n int64, objectMode bool) string {
	switch {
	case objectMode:
		return fmt.Sprintf("%d objects", n)
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// writeText prints the miss-ratio matrix (one line per size, one column per
// policy, the best marked), how the first policy fares against each other
// one, and the wall time.
func writeText(w io.Writer, src source, policies []string, rows []row, elapsed time.Duration) error {
	nSizes := len(rows) / len(policies)
	fmt.Fprintf(w, "trace %s: %d requests, %d objects, working set %s\n",
		src.name, src.requests, src.objects, formatSize(src.workingSet, src.objectMode))
	fmt.Fprintln(w, "miss ratio by cache size (lower is better, * = best)")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "cache size\t\t%s\t\n", strings.Join(policies, "\t"))
	for s := range nSizes {
		best := rows[s].MissRatio
		for p := range policies {
			best = min(best, rows[p*nSizes+s].MissRatio)
		}
		first := rows[s]
		resolved := "" // an absolute size needs no second column
		if strings.HasSuffix(first.label, "%") {
			resolved = formatSize(first.CacheSize, src.objectMode)
		}
		fmt.Fprintf(tw, "%s\t%s\t", first.label, resolved)
		for p := range policies {
			r := rows[p*nSizes+s]
			mark := " "
			if r.MissRatio == best {
				mark = "*"
			}
			fmt.Fprintf(tw, "%.4f%s\t", r.MissRatio, mark)
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for p := 1; p < len(policies); p++ {
		wins, ties := 0, 0
		for s := range nSizes {
			a, b := rows[s].Misses, rows[p*nSizes+s].Misses
			if a < b {
				wins++
			} else if a == b {
				ties++
			}
		}
		fmt.Fprintf(w, "%s vs %s: fewer misses at %d of %d sizes, equal at %d\n", policies[0], policies[p], wins, nSizes, ties)
	}
	_, err := fmt.Fprintf(w, "time: %.1fs for %d replays\n", elapsed.Seconds(), len(rows))
	return err
}

// missRatioPlot draws miss ratio against cache size, one line per policy.
func missRatioPlot(src source, rows []row) svgplot.Plot {
	var series []svgplot.Series
	div, unit := float64(1<<20), "MiB"
	if src.objectMode {
		div, unit = 1, "objects"
	}
	for _, r := range rows {
		if len(series) == 0 || series[len(series)-1].Name != r.Policy {
			series = append(series, svgplot.Series{Name: r.Policy})
		}
		s := &series[len(series)-1]
		s.Points = append(s.Points, svgplot.Point{X: float64(r.CacheSize) / div, Y: r.MissRatio})
	}
	return svgplot.Plot{
		Title:  "miss ratio: " + src.name,
		XLabel: "cache size, " + unit,
		YLabel: "miss ratio",
		Series: series,
	}
}

// writeSVGFile writes missRatioPlot to path.
func writeSVGFile(path string, src source, rows []row) error {
	p := missRatioPlot(src, rows)
	return p.WriteFile(path)
}
