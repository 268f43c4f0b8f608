// Package flagparse parses the values of kvtier's example programs'
// command-line flags that are more than one number: comma-separated lists of
// names or numbers, and sizes in bytes with units (128MiB, 1.5GB).
//
// Lists skip empty items and trim spaces, so "lru, fifo," is two names.
// Every error wraps one of the package's sentinels and quotes the bad
// item; the programs wrap it again in their own usage error.
//
// The package is internal: its API serves the examples and may change.
package flagparse
