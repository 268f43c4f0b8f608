package main

import (
	"math"

	"github.com/kvtier/kvtier/internal/svgplot"
)

// hitRatioPlot draws the block hit ratio (percent) against the GPU capacity
// per policy, with the unlimited cache's ratio as a dashed line. Capacities
// span orders of magnitude, so X is log10 of the tokens (svgplot has no log
// axis).
func hitRatioPlot(rows []result, maxRatio float64) svgplot.Plot {
	var series []svgplot.Series
	byPolicy := map[string]int{}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, r := range rows {
		i, ok := byPolicy[r.Policy]
		if !ok {
			i = len(series)
			byPolicy[r.Policy] = i
			series = append(series, svgplot.Series{Name: r.Policy})
		}
		x := math.Log10(float64(r.CapacityTokens))
		lo, hi = min(lo, x), max(hi, x)
		series[i].Points = append(series[i].Points, svgplot.Point{X: x, Y: 100 * r.BlockHitRatio})
	}
	series = append(series, svgplot.Series{
		Name:   "unlimited cache",
		Points: []svgplot.Point{{X: lo, Y: 100 * maxRatio}, {X: hi, Y: 100 * maxRatio}},
		Color:  "#555555",
		Dashed: true,
	})
	return svgplot.Plot{
		Title:  "Mooncake conversation trace: prefix reuse vs GPU capacity",
		XLabel: "GPU capacity, log10 tokens (6 = 1M, 7 = 10M)",
		YLabel: "block hit ratio, %",
		Y:      svgplot.Range{Min: 0, Max: 10 * math.Ceil(10*maxRatio+0.5)},
		Series: series,
	}
}

// writeSVGFile writes hitRatioPlot to path.
func writeSVGFile(path string, rows []result, maxRatio float64) error {
	p := hitRatioPlot(rows, maxRatio)
	return p.WriteFile(path)
}
