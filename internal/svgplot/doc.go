// Package svgplot writes small, deterministic SVG charts: a line chart of
// several named series of (x, y) points, or a grouped bar chart, with a
// title, axis labels, ticks and a legend. It exists so that kvtier's example
// programs can draw miss-ratio and hit-rate curves without a plotting
// dependency.
//
// Output is a pure function of the Plot value: the same Plot always renders
// to the same bytes (numbers are formatted with a fixed precision, series
// keep their order, no map is iterated), so rendered files can be committed
// and diffed. Text is XML-escaped.
//
// The package is internal: its API serves the examples and may change.
package svgplot
