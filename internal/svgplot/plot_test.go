package svgplot

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// element is one parsed SVG element: its name, attributes and text.
type element struct {
	name  string
	attrs map[string]string
	text  string
}

// parse decodes svg as XML and returns its elements in document order. It
// fails the test if the document is not well-formed.
func parse(t testing.TB, svg string) []element {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(svg))
	var out []element
	var open []int // indices of the elements not yet closed
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		switch v := tok.(type) {
		case xml.StartElement:
			e := element{name: v.Name.Local, attrs: map[string]string{}}
			for _, a := range v.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			out = append(out, e)
			open = append(open, len(out)-1)
		case xml.EndElement:
			open = open[:len(open)-1]
		case xml.CharData:
			if len(open) > 0 {
				out[open[len(open)-1]].text += string(v)
			}
		}
	}
	return out
}

func find(els []element, name, class string) []element {
	var out []element
	for _, e := range els {
		if e.name == name && (class == "" || e.attrs["class"] == class) {
			out = append(out, e)
		}
	}
	return out
}

func atof(t testing.TB, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	require.NoError(t, err)
	return v
}

// points parses a polyline's points attribute.
func points(t testing.TB, s string) [][2]float64 {
	t.Helper()
	var out [][2]float64
	for _, f := range strings.Fields(s) {
		x, y, ok := strings.Cut(f, ",")
		require.True(t, ok, f)
		out = append(out, [2]float64{atof(t, x), atof(t, y)})
	}
	return out
}

func render(t testing.TB, p *Plot) string {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, p.Render(&b))
	return b.String()
}

func linePlot() *Plot {
	return &Plot{
		Title:  "hit rate <vs> size & policy",
		XLabel: "GPU GiB", YLabel: "hit rate",
		Series: []Series{
			{Name: "paged LRU", Points: []Point{{1, 0.02}, {2, 0.05}, {3, 0.1}, {3.5, 1}, {6, 1}}},
			{Name: "bsa S3-FIFO", Points: []Point{{1, 0.3}, {2, 0.5}, {3, 0.8}}, Dashed: true},
			{Name: "empty"},
		},
	}
}

func TestLineRender(t *testing.T) {
	p := linePlot()
	svg := render(t, p)
	require.Equal(t, svg, render(t, p), "rendering is deterministic")
	els := parse(t, svg)
	require.Equal(t, "svg", els[0].name)
	w, h := atof(t, els[0].attrs["width"]), atof(t, els[0].attrs["height"])
	require.Equal(t, 800.0, w)
	require.Equal(t, 480.0, h)

	// Text survives escaping.
	var texts []string
	for _, e := range find(els, "text", "") {
		texts = append(texts, e.text)
	}
	require.Contains(t, texts, "hit rate <vs> size & policy")
	require.Contains(t, texts, "GPU GiB")
	require.Contains(t, texts, "hit rate")

	// One legend entry per series, in order; one polyline per non-empty one.
	legend := find(els, "text", "legend")
	require.Len(t, legend, 3)
	for i, e := range legend {
		require.Equal(t, p.Series[i].Name, e.text)
	}
	lines := find(els, "polyline", "series")
	require.Len(t, lines, 2)
	require.Equal(t, "6 4", lines[1].attrs["stroke-dasharray"])
	require.NotEqual(t, lines[0].attrs["stroke"], lines[1].attrs["stroke"])

	// Points map monotonically into the plot area: x grows with X, y
	// shrinks as Y grows (SVG's y points down).
	for i, l := range lines {
		pts := points(t, l.attrs["points"])
		require.Len(t, pts, len(p.Series[i].Points))
		for j, pt := range pts {
			require.True(t, pt[0] > 0 && pt[0] < w && pt[1] > 0 && pt[1] < h, "point %v inside image", pt)
			if j == 0 {
				continue
			}
			dx := p.Series[i].Points[j].X - p.Series[i].Points[j-1].X
			dy := p.Series[i].Points[j].Y - p.Series[i].Points[j-1].Y
			require.Equal(t, dx > 0, pt[0] > pts[j-1][0])
			if dy != 0 {
				require.Equal(t, dy > 0, pt[1] < pts[j-1][1])
			} else {
				require.Equal(t, pt[1], pts[j-1][1])
			}
		}
	}
	require.Len(t, find(els, "circle", ""), 8)
}

func TestFixedRangeMapsToFrame(t *testing.T) {
	p := &Plot{
		Series: []Series{{Name: "s", Points: []Point{{0, 0}, {10, 1}, {5, 2}}}},
		X:      Range{Min: 0, Max: 10},
		Y:      Range{Min: 0, Max: 1},
	}
	els := parse(t, render(t, p))
	var frame element
	for _, e := range find(els, "rect", "") {
		if e.attrs["fill"] == "none" {
			frame = e
		}
	}
	left, top := atof(t, frame.attrs["x"]), atof(t, frame.attrs["y"])
	right, bottom := left+atof(t, frame.attrs["width"]), top+atof(t, frame.attrs["height"])
	pts := points(t, find(els, "polyline", "series")[0].attrs["points"])
	require.Equal(t, [2]float64{left, bottom}, pts[0])
	require.Equal(t, [2]float64{right, top}, pts[1])
	// Y=2 lies above the fixed range: clipped to the top edge.
	require.Equal(t, top, pts[2][1])
	// Ticks of a fixed [0,1] range start and end on it.
	var ticks []string
	for _, e := range find(els, "text", "") {
		if e.attrs["text-anchor"] == "end" {
			ticks = append(ticks, e.text)
		}
	}
	require.Equal(t, []string{"0.0", "0.2", "0.4", "0.6", "0.8", "1.0"}, ticks)
}

func TestBarRender(t *testing.T) {
	p := &Plot{
		Kind:        Bar,
		Title:       "bytes per step",
		Series:      []Series{{Name: "paged", Points: []Point{{0, 3584}, {1, 100}}}, {Name: "bsa", Points: []Point{{0, 2240}}}},
		XTickLabels: []string{"worst", "typical"},
	}
	els := parse(t, render(t, p))
	bars := find(els, "rect", "bar")
	require.Len(t, bars, 3)
	// Heights are proportional to values (all bars start at 0).
	h := func(i int) float64 { return atof(t, bars[i].attrs["height"]) }
	require.InDelta(t, 3584.0/2240, h(0)/h(2), 0.01)
	require.InDelta(t, 3584.0/100, h(0)/h(1), 0.5)
	// All bars share the zero line as their bottom.
	bottom := func(i int) float64 { return atof(t, bars[i].attrs["y"]) + h(i) }
	require.InDelta(t, bottom(0), bottom(1), 0.11)
	require.InDelta(t, bottom(0), bottom(2), 0.11)
	// Series sit side by side in a group: paged left of bsa in group 0.
	require.Less(t, atof(t, bars[0].attrs["x"]), atof(t, bars[2].attrs["x"]))
	var texts []string
	for _, e := range find(els, "text", "") {
		texts = append(texts, e.text)
	}
	require.Contains(t, texts, "worst")
	require.Contains(t, texts, "typical")
}

func TestNegativeBars(t *testing.T) {
	p := &Plot{Kind: Bar, Series: []Series{{Name: "d", Points: []Point{{1, -2}, {2, 3}}}}}
	els := parse(t, render(t, p))
	bars := find(els, "rect", "bar")
	require.Len(t, bars, 2)
	// The negative bar hangs from the zero line the positive one stands on.
	zeroFromNeg := atof(t, bars[0].attrs["y"])
	zeroFromPos := atof(t, bars[1].attrs["y"]) + atof(t, bars[1].attrs["height"])
	require.InDelta(t, zeroFromNeg, zeroFromPos, 0.11)
}

func TestInvalidPlots(t *testing.T) {
	good := Series{Name: "s", Points: []Point{{1, 1}}}
	cases := map[string]Plot{
		"no series":      {},
		"no points":      {Series: []Series{{Name: "a"}, {Name: "b"}}},
		"NaN":            {Series: []Series{{Name: "s", Points: []Point{{1, math.NaN()}}}}},
		"Inf":            {Series: []Series{{Name: "s", Points: []Point{{math.Inf(1), 1}}}}},
		"negative size":  {Series: []Series{good}, Width: -1},
		"inverted range": {Series: []Series{good}, Y: Range{Min: 1, Max: 0}},
		"bad kind":       {Series: []Series{good}, Kind: 7},
		"tick labels":    {Series: []Series{good}, Kind: Bar, XTickLabels: []string{"a", "b"}},
	}
	for name, p := range cases {
		t.Run(name, func(t *testing.T) {
			var b bytes.Buffer
			err := p.Render(&b)
			require.ErrorIs(t, err, ErrInvalidPlot)
			require.Zero(t, b.Len(), "nothing written on error")
		})
	}
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.svg")
	p := linePlot()
	require.NoError(t, p.WriteFile(path))
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, render(t, p), string(got))

	bad := filepath.Join(dir, "bad.svg")
	require.ErrorIs(t, (&Plot{}).WriteFile(bad), ErrInvalidPlot)
	_, err = os.Stat(bad)
	require.True(t, os.IsNotExist(err), "an invalid plot creates no file")
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestRenderReturnsWriterError(t *testing.T) {
	require.EqualError(t, linePlot().Render(failWriter{}), "disk full")
}

func TestNiceStep(t *testing.T) {
	for _, c := range []struct {
		span   float64
		step   float64
		digits int
	}{{1, 0.2, 1}, {5, 1, 0}, {6, 2, 0}, {100, 20, 0}, {0.03, 0.01, 2}, {3584, 1000, 0}, {24, 5, 0}} {
		s, d := niceStep(c.span, 5)
		require.InDelta(t, c.step, s, c.step*1e-12, "span %g", c.span)
		require.Equal(t, c.digits, d, "span %g", c.span)
	}
}

func TestSingleValueAxis(t *testing.T) {
	// One point: the axis must still have a positive span.
	p := &Plot{Series: []Series{{Name: "one", Points: []Point{{3, 3}}}}}
	els := parse(t, render(t, p))
	c := find(els, "circle", "")
	require.Len(t, c, 1)
	require.False(t, math.IsNaN(atof(t, c[0].attrs["cx"])))
}

func TestColorCycles(t *testing.T) {
	require.Equal(t, Color(0), Color(10))
	require.NotEqual(t, Color(0), Color(1))
	require.Equal(t, Color(3), Color(-3), "a negative index counts from 0 too")
	require.NotPanics(t, func() { Color(math.MinInt) })
	p := &Plot{Series: []Series{{Name: "a", Points: []Point{{0, 0}}, Color: "red"}}}
	require.Equal(t, "red", find(parse(t, render(t, p)), "circle", "")[0].attrs["fill"])
}

func FuzzRender(f *testing.F) {
	f.Add(1.0, 2.0, 3.0, 4.0, "name", uint8(0))
	f.Add(-1e300, 1e300, 0.0, 0.0, "<&>", uint8(1))
	f.Add(0.0, 0.0, 0.0, 0.0, "", uint8(1))
	f.Fuzz(func(t *testing.T, x1, y1, x2, y2 float64, name string, kind uint8) {
		p := &Plot{Kind: Kind(kind % 2), Title: name, Series: []Series{{Name: name, Points: []Point{{x1, y1}, {x2, y2}}}}}
		var b bytes.Buffer
		err := p.Render(&b)
		if !finite(x1) || !finite(y1) || !finite(x2) || !finite(y2) {
			require.ErrorIs(t, err, ErrInvalidPlot)
			return
		}
		if err != nil {
			// Only spans that overflow float64 may fail, and they must say so.
			require.ErrorIs(t, err, ErrInvalidPlot)
			return
		}
		if !strings.ContainsRune(name, '\uFFFD') && isValidXMLText(name) {
			parse(t, b.String())
		}
	})
}

// isValidXMLText reports whether s holds only characters XML 1.0 allows,
// so that a parse failure means a bug in the writer, not in the input.
func isValidXMLText(s string) bool {
	for _, r := range s {
		if r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r == 0xFFFE || r == 0xFFFF {
			return false
		}
	}
	return strings.ToValidUTF8(s, "") == s
}

func TestOverflowingSpan(t *testing.T) {
	p := &Plot{Series: []Series{{Name: "s", Points: []Point{{-math.MaxFloat64, 0}, {math.MaxFloat64, 1}}}}}
	require.ErrorIs(t, p.Render(io.Discard), ErrInvalidPlot)
}
