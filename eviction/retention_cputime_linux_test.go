//go:build linux

package eviction

import (
	"syscall"
	"time"
	"unsafe"
)

// processCPUTime returns the CPU time (user and system) the process has
// used, so that benchmarks on a shared machine can report the time spent
// running as well as wall time.
func processCPUTime() (time.Duration, bool) {
	return clockGettime(2) // CLOCK_PROCESS_CPUTIME_ID
}

// threadCPUTime returns the CPU time the calling thread has used. The
// caller must be locked to its thread.
func threadCPUTime() (time.Duration, bool) {
	return clockGettime(3) // CLOCK_THREAD_CPUTIME_ID
}

func clockGettime(clock uintptr) (time.Duration, bool) {
	var ts syscall.Timespec
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clock, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
