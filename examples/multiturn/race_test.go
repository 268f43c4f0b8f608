//go:build race

package main

// raceEnabled reports a build with the race detector, which makes the
// default runs too slow for the test that checks the published excerpts.
const raceEnabled = true
