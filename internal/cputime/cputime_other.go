//go:build !linux

package cputime

import "time"

// Process is only implemented on Linux.
func Process() (time.Duration, bool) { return 0, false }

// Thread is only implemented on Linux.
func Thread() (time.Duration, bool) { return 0, false }
