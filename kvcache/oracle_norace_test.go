//go:build !race

package kvcache_test

// oracleRace shortens the oracle's runs under the race detector (see
// oracle_race_test.go).
const oracleRace = false
