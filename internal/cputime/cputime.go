// Package cputime reads the CPU time a thread or the process has used, so
// that benchmarks on a shared machine can tell the time spent running
// from the time spent waiting for a core. It is implemented on Linux;
// elsewhere it reports that it cannot measure.
//
// The package is internal: it serves the benchmarks of this module.
package cputime
