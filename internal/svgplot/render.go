package svgplot

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

const (
	defaultWidth  = 800
	defaultHeight = 480
	fontSize      = 12
	charWidth     = 7 // rough width of one character at fontSize, for layout
)

var escaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&#39;")

func esc(s string) string { return escaper.Replace(s) }

// frame is the pixel geometry of one rendering.
type frame struct {
	w, h                     float64
	left, right, top, bottom float64 // the plot area
	legendX                  float64
}

func (p *Plot) frame() frame {
	w, h := p.Width, p.Height
	if w == 0 {
		w = defaultWidth
	}
	if h == 0 {
		h = defaultHeight
	}
	longest := 0
	for _, s := range p.Series {
		longest = max(longest, len([]rune(s.Name)))
	}
	legendW := min(max(30+charWidth*longest, 80), w/2)
	f := frame{w: float64(w), h: float64(h)}
	f.left = 70
	f.right = f.w - float64(legendW) - 20
	f.top = 40
	f.bottom = f.h - 55
	if f.right < f.left+10 {
		f.right = f.left + 10
	}
	if f.bottom < f.top+10 {
		f.bottom = f.top + 10
	}
	f.legendX = f.right + 15
	return f
}

func (p *Plot) render(b *strings.Builder) error {
	xmin, xmax, ymin, ymax, err := p.validate()
	if err != nil {
		return err
	}
	f := p.frame()
	var groups []float64
	if p.Kind == Bar {
		for _, s := range p.Series {
			for _, pt := range s.Points {
				groups = append(groups, pt.X)
			}
		}
		slices.Sort(groups)
		groups = slices.Compact(groups)
		if p.XTickLabels != nil && len(p.XTickLabels) != len(groups) {
			return fmt.Errorf("%w: %d x tick labels for %d bar groups", ErrInvalidPlot, len(p.XTickLabels), len(groups))
		}
		ymin, ymax = min(ymin, 0), max(ymax, 0)
	}
	ya := newAxis(ymin, ymax, p.Y, f.bottom, f.top)

	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="%d">`+"\n",
		int(f.w), int(f.h), int(f.w), int(f.h), fontSize)
	fmt.Fprintf(b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	if p.Title != "" {
		fmt.Fprintf(b, `<text x="%s" y="24" text-anchor="middle" font-size="15" font-weight="bold">%s</text>`+"\n",
			num((f.left+f.right)/2), esc(p.Title))
	}
	// Horizontal grid lines and Y tick labels.
	for _, t := range ya.ticks {
		y := num(ya.pos(t))
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#dddddd"/>`+"\n", num(f.left), y, num(f.right), y)
		fmt.Fprintf(b, `<text x="%s" y="%s" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", num(f.left-6), y, ya.label(t))
	}
	if p.Kind == Bar {
		p.renderBars(b, f, ya, groups)
	} else {
		p.renderLines(b, f, ya, xmin, xmax)
	}
	// The frame goes over the grid and the data edges.
	fmt.Fprintf(b, `<rect x="%s" y="%s" width="%s" height="%s" fill="none" stroke="black"/>`+"\n",
		num(f.left), num(f.top), num(f.right-f.left), num(f.bottom-f.top))
	if p.XLabel != "" {
		fmt.Fprintf(b, `<text x="%s" y="%s" text-anchor="middle">%s</text>`+"\n", num((f.left+f.right)/2), num(f.h-12), esc(p.XLabel))
	}
	if p.YLabel != "" {
		cy := (f.top + f.bottom) / 2
		fmt.Fprintf(b, `<text x="16" y="%s" text-anchor="middle" transform="rotate(-90 16 %s)">%s</text>`+"\n", num(cy), num(cy), esc(p.YLabel))
	}
	p.renderLegend(b, f)
	b.WriteString("</svg>\n")
	return nil
}

func (p *Plot) color(i int) string {
	if c := p.Series[i].Color; c != "" {
		return c
	}
	return Color(i)
}

func (p *Plot) renderLines(b *strings.Builder, f frame, ya axis, xmin, xmax float64) {
	xa := newAxis(xmin, xmax, p.X, f.left, f.right)
	for _, t := range xa.ticks {
		x := num(xa.pos(t))
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#eeeeee"/>`+"\n", x, num(f.top), x, num(f.bottom))
		fmt.Fprintf(b, `<text x="%s" y="%s" text-anchor="middle">%s</text>`+"\n", x, num(f.bottom+18), xa.label(t))
	}
	for i, s := range p.Series {
		if len(s.Points) == 0 {
			continue
		}
		c := p.color(i)
		var pts strings.Builder
		for j, pt := range s.Points {
			if j > 0 {
				pts.WriteByte(' ')
			}
			pts.WriteString(num(xa.pos(pt.X)) + "," + num(ya.pos(pt.Y)))
		}
		dash := ""
		if s.Dashed {
			dash = ` stroke-dasharray="6 4"`
		}
		fmt.Fprintf(b, `<polyline class="series" data-series="%d" fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n",
			i, esc(c), dash, pts.String())
		for _, pt := range s.Points {
			fmt.Fprintf(b, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`+"\n", num(xa.pos(pt.X)), num(ya.pos(pt.Y)), esc(c))
		}
	}
}

func (p *Plot) renderBars(b *strings.Builder, f frame, ya axis, groups []float64) {
	gw := (f.right - f.left) / float64(len(groups))
	bw := gw * 0.8 / float64(len(p.Series))
	zero := ya.pos(0)
	for g, x := range groups {
		label := strconv.FormatFloat(x, 'g', -1, 64)
		if p.XTickLabels != nil {
			label = p.XTickLabels[g]
		}
		fmt.Fprintf(b, `<text x="%s" y="%s" text-anchor="middle">%s</text>`+"\n", num(f.left+(float64(g)+0.5)*gw), num(f.bottom+18), esc(label))
	}
	for i, s := range p.Series {
		c := p.color(i)
		for _, pt := range s.Points {
			g, _ := slices.BinarySearch(groups, pt.X)
			x := f.left + float64(g)*gw + gw*0.1 + float64(i)*bw
			y := ya.pos(pt.Y)
			top, height := min(y, zero), max(y, zero)-min(y, zero)
			fmt.Fprintf(b, `<rect class="bar" data-series="%d" x="%s" y="%s" width="%s" height="%s" fill="%s"/>`+"\n",
				i, num(x), num(top), num(bw), num(height), esc(c))
		}
	}
}

func (p *Plot) renderLegend(b *strings.Builder, f frame) {
	for i, s := range p.Series {
		y := f.top + 10 + float64(i)*18
		c := esc(p.color(i))
		if p.Kind == Bar {
			fmt.Fprintf(b, `<rect x="%s" y="%s" width="18" height="10" fill="%s"/>`+"\n", num(f.legendX), num(y-5), c)
		} else {
			dash := ""
			if s.Dashed {
				dash = ` stroke-dasharray="6 4"`
			}
			fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="2"%s/>`+"\n",
				num(f.legendX), num(y), num(f.legendX+18), num(y), c, dash)
		}
		fmt.Fprintf(b, `<text class="legend" x="%s" y="%s" dominant-baseline="middle">%s</text>`+"\n", num(f.legendX+24), num(y), esc(s.Name))
	}
}
