//go:build race

package kvcache_test

// oracleRace shortens the oracle's runs under the race detector, which
// makes them about ten times slower; the race detector needs interleavings,
// not length.
const oracleRace = true
