// Package jsonlines writes values as JSON lines (one JSON object per line,
// https://jsonlines.org), the machine-readable output of kvtier's example
// programs: one line per result row, easy to load with jq or pandas.
//
// The package is internal: its API serves the examples and may change.
package jsonlines
