//go:build !linux

package eviction

import "time"

// processCPUTime is only implemented on Linux.
func processCPUTime() (time.Duration, bool) { return 0, false }

// threadCPUTime is only implemented on Linux.
func threadCPUTime() (time.Duration, bool) { return 0, false }
