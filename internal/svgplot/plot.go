package svgplot

import (
	"fmt"
	"io"
	"math"
	"os"
	"strings"
)

// Kind selects how a Plot draws its series.
type Kind int

const (
	// Line draws each series as a polyline with a marker at every point,
	// points joined in the order given (sort them by X for a curve).
	Line Kind = iota
	// Bar draws grouped bars: the distinct X values of all series, sorted,
	// are the groups, and each series has one bar per group where it has a
	// point. The Y axis always includes 0, where bars start.
	Bar
)

// Point is one (X, Y) data point.
type Point struct {
	X, Y float64
}

// Series is one named set of points, drawn in one colour and listed in the
// legend.
type Series struct {
	// Name is the series' legend entry.
	Name string
	// Points are the data. A line joins them in this order.
	Points []Point
	// Color is any SVG colour ("#1f77b4", "red"); empty means the next
	// colour of the default palette, by series index.
	Color string
	// Dashed draws a line series dashed (for example to tell two groups of
	// series apart while colours tell the members apart). Bars ignore it.
	Dashed bool
}

// Range fixes an axis to [Min, Max]. The zero Range means automatic: the
// axis spans the data, widened to round tick values.
type Range struct {
	Min, Max float64
}

func (r Range) auto() bool { return r.Min == 0 && r.Max == 0 }

// Plot is a chart to render. The zero value has no series and is invalid;
// fill at least one Series with at least one Point. A Plot is only read by
// Render, so one value may be rendered from several goroutines.
type Plot struct {
	// Title is drawn above the chart; empty means none.
	Title string
	// XLabel and YLabel name the axes; empty means none.
	XLabel, YLabel string
	// Kind is Line (the zero value) or Bar.
	Kind Kind
	// Series are drawn in order; the legend lists them in the same order.
	Series []Series
	// X and Y fix the axis ranges; zero means automatic. Points outside a
	// fixed range are clipped to the plot area's edge.
	X, Y Range
	// XTickLabels, for a Bar plot, names the groups (one label per
	// distinct X value, in ascending order of X); nil means the X values
	// themselves. Line plots ignore it.
	XTickLabels []string
	// Width and Height are the image size in pixels; 0 means 800 by 480.
	Width, Height int
}

// palette is the default series colours (Tableau 10), chosen because they
// stay distinguishable for most colour-blind readers.
var palette = [...]string{
	"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
	"#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
}

// Color returns the default colour of the series at index i: the palette
// repeats after ten series.
func Color(i int) string {
	// The remainder, not i, is negated: -math.MinInt is still negative.
	i %= len(palette)
	if i < 0 {
		i = -i
	}
	return palette[i]
}

// WriteFile renders p into the file at path, creating or truncating it.
// It returns an error wrapping ErrInvalidPlot for an invalid p (the file is
// then not touched), or the error of creating or writing the file.
func (p *Plot) WriteFile(path string) error {
	var b strings.Builder
	if err := p.render(&b); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// Render writes p as a standalone SVG document to w. It returns an error
// wrapping ErrInvalidPlot for an invalid p, having written nothing, or the
// error of w.
func (p *Plot) Render(w io.Writer) error {
	var b strings.Builder
	if err := p.render(&b); err != nil {
		return err
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// validate checks p and returns the data bounds.
func (p *Plot) validate() (xmin, xmax, ymin, ymax float64, err error) {
	if p.Width < 0 || p.Height < 0 {
		return 0, 0, 0, 0, fmt.Errorf("%w: size %dx%d is negative", ErrInvalidPlot, p.Width, p.Height)
	}
	if p.Kind != Line && p.Kind != Bar {
		return 0, 0, 0, 0, fmt.Errorf("%w: unknown kind %d", ErrInvalidPlot, p.Kind)
	}
	if len(p.Series) == 0 {
		return 0, 0, 0, 0, fmt.Errorf("%w: no series", ErrInvalidPlot)
	}
	for _, r := range []struct {
		name string
		r    Range
	}{{"X", p.X}, {"Y", p.Y}} {
		if !finite(r.r.Min) || !finite(r.r.Max) || (!r.r.auto() && r.r.Min >= r.r.Max) {
			return 0, 0, 0, 0, fmt.Errorf("%w: %s range [%g, %g] is not an increasing finite interval", ErrInvalidPlot, r.name, r.r.Min, r.r.Max)
		}
	}
	xmin, ymin = math.Inf(1), math.Inf(1)
	xmax, ymax = math.Inf(-1), math.Inf(-1)
	n := 0
	for i, s := range p.Series {
		for j, pt := range s.Points {
			if !finite(pt.X) || !finite(pt.Y) {
				return 0, 0, 0, 0, fmt.Errorf("%w: series %d (%q) point %d is (%g, %g)", ErrInvalidPlot, i, s.Name, j, pt.X, pt.Y)
			}
			xmin, xmax = math.Min(xmin, pt.X), math.Max(xmax, pt.X)
			ymin, ymax = math.Min(ymin, pt.Y), math.Max(ymax, pt.Y)
			n++
		}
	}
	if n == 0 {
		return 0, 0, 0, 0, fmt.Errorf("%w: no points in any of %d series", ErrInvalidPlot, len(p.Series))
	}
	if !finite(xmax-xmin) || !finite(ymax-ymin) || !finite(p.X.Max-p.X.Min) || !finite(p.Y.Max-p.Y.Min) {
		return 0, 0, 0, 0, fmt.Errorf("%w: axis span overflows float64 (x [%g, %g], y [%g, %g])", ErrInvalidPlot, xmin, xmax, ymin, ymax)
	}
	return xmin, xmax, ymin, ymax, nil
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
