package svgplot_test

import (
	"fmt"
	"os"
	"strings"

	"github.com/kvtier/kvtier/internal/svgplot"
)

// A hit-rate curve per policy, written as an SVG document.
func Example() {
	p := svgplot.Plot{
		Title:  "GPU hit rate",
		XLabel: "GPU GiB",
		YLabel: "hit rate",
		Y:      svgplot.Range{Min: 0, Max: 1},
		Series: []svgplot.Series{
			{Name: "LRU", Points: []svgplot.Point{{X: 1, Y: 0.01}, {X: 3, Y: 0.05}, {X: 4, Y: 1}}},
			{Name: "S3-FIFO", Points: []svgplot.Point{{X: 1, Y: 0.2}, {X: 3, Y: 0.6}, {X: 4, Y: 1}}},
		},
	}
	var b strings.Builder
	if err := p.Render(&b); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	svg := b.String()
	fmt.Println(strings.HasPrefix(svg, "<svg "), strings.Count(svg, "<polyline"), strings.Count(svg, "<circle"))
	// Output: true 2 6
}

// Grouped bars: one group per X value, one bar per series.
func Example_bar() {
	p := svgplot.Plot{
		Kind:        svgplot.Bar,
		Title:       "MiB read per decode step",
		XTickLabels: []string{"worst case", "measured"},
		Series: []svgplot.Series{
			{Name: "paged", Points: []svgplot.Point{{X: 0, Y: 3584}, {X: 1, Y: 3500}}},
			{Name: "BSA", Points: []svgplot.Point{{X: 0, Y: 2240}, {X: 1, Y: 1700}}},
		},
	}
	var b strings.Builder
	if err := p.Render(&b); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	fmt.Println(strings.Count(b.String(), `class="bar"`))
	// Output: 4
}
