package svgplot

import "errors"

// ErrInvalidPlot reports a Plot that cannot be drawn: no series, no points,
// a NaN or infinite coordinate, a negative size, or an inverted axis range.
// Errors returned by Render and WriteFile wrap it and name the bad value.
var ErrInvalidPlot = errors.New("svgplot: invalid plot")
