//go:build race

package kvcache

// raceEnabled shortens the randomized tests under the race detector, which
// slows them about tenfold.
const raceEnabled = true
