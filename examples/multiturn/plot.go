package main

import (
	"fmt"

	"github.com/kvtier/kvtier/internal/svgplot"
)

// writeSVGFile writes the plot of rep to path: the TTFT CDF of each policy,
// or with a sweep the mean TTFT of each policy against the GPU size.
func writeSVGFile(path string, rep *report) error {
	p := plotOf(rep)
	return p.WriteFile(path)
}

// plotOf builds the plot of rep.
func plotOf(rep *report) *svgplot.Plot {
	if len(rep.sizes) > 1 {
		return sweepPlot(rep)
	}
	return cdfPlot(rep)
}

// cdfPlot is the CDF of per-turn TTFT, one line per policy, sampled at every
// percentile (the 0th is the minimum). The X axis stops at the largest p99
// so that the body of the distributions stays readable; the table gives
// the tails.
func cdfPlot(rep *report) *svgplot.Plot {
	p := &svgplot.Plot{
		Title:  fmt.Sprintf("Multi-turn chat: TTFT per turn (%s, GPU %.3g GiB, CPU %.3g GiB)", rep.modelName, rep.sizes[0], rep.cfg.CPUGiB),
		XLabel: "simulated time to first token (ms)",
		YLabel: "fraction of turns",
		Y:      svgplot.Range{Min: 0, Max: 1},
	}
	xMax := 0.0
	for _, r := range rep.rows {
		s := svgplot.Series{Name: r.Policy}
		for q := 0; q <= 100; q++ {
			s.Points = append(s.Points, svgplot.Point{X: 1e3 * percentile(r.ttft, float64(q)/100), Y: float64(q) / 100})
		}
		p.Series = append(p.Series, s)
		xMax = max(xMax, r.TTFTP99Ms)
	}
	if xMax > 0 {
		p.X = svgplot.Range{Min: 0, Max: xMax}
	}
	return p
}

// sweepPlot is the mean TTFT of each policy against the GPU size.
func sweepPlot(rep *report) *svgplot.Plot {
	p := &svgplot.Plot{
		Title:  fmt.Sprintf("Multi-turn chat: mean TTFT vs GPU size (%s, CPU %.3g GiB)", rep.modelName, rep.cfg.CPUGiB),
		XLabel: "GPU KV-cache capacity (GiB)",
		YLabel: "mean simulated TTFT (ms)",
	}
	for _, name := range rep.cfg.Policies {
		s := svgplot.Series{Name: name}
		for _, r := range rep.rows {
			if r.Policy == name {
				s.Points = append(s.Points, svgplot.Point{X: r.GPUGiB, Y: r.TTFTMeanMs})
			}
		}
		p.Series = append(p.Series, s)
	}
	return p
}
