// Package parallel runs independent jobs on a fixed number of goroutines
// and gives their results back in job order, so that a program's output
// does not depend on scheduling. kvtier's example programs use it to
// simulate one configuration (policy, cache size, layout) per job.
//
// The package is internal: its API serves the examples and may change.
package parallel
