package main

import (
	"fmt"
	"slices"

	"github.com/kvtier/kvtier/internal/svgplot"
)

// writePlot draws hit rate against GPU capacity, one series per layout and
// policy: a colour per policy, solid for paged and dashed for BSA.
func writePlot(path string, cfg *config, rs []result) error {
	p := svgplot.Plot{
		Title:  fmt.Sprintf("GPU hit rate, MoBA top-%d, %s selection, context %d", cfg.topK, selectorDesc(cfg), cfg.context),
		XLabel: "GPU tier capacity (GiB)",
		YLabel: "hit rate (decode steps)",
		Y:      svgplot.Range{Min: 0, Max: 1},
		Width:  880,
		Height: 520,
	}
	for _, lay := range cfg.layouts {
		for i, pol := range cfg.policies {
			s := svgplot.Series{Name: lay + " " + pol, Color: svgplot.Color(i), Dashed: lay == "bsa"}
			for _, r := range rs {
				if r.Layout == lay && r.Policy == pol {
					s.Points = append(s.Points, svgplot.Point{X: r.GPUGiB, Y: r.HitRate})
				}
			}
			slices.SortFunc(s.Points, func(a, b svgplot.Point) int {
				switch {
				case a.X < b.X:
					return -1
				case a.X > b.X:
					return 1
				}
				return 0
			})
			p.Series = append(p.Series, s)
		}
	}
	return p.WriteFile(path)
}
