//go:build linux

package cputime

import (
	"syscall"
	"time"
	"unsafe"
)

// Process returns the CPU time (user and system) the process has used.
func Process() (time.Duration, bool) {
	return clockGettime(2) // CLOCK_PROCESS_CPUTIME_ID
}

// Thread returns the CPU time (user and system, page faults included)
// the calling thread has used. The caller must be locked to its thread
// (runtime.LockOSThread).
func Thread() (time.Duration, bool) {
	return clockGettime(3) // CLOCK_THREAD_CPUTIME_ID
}

func clockGettime(clock uintptr) (time.Duration, bool) {
	var ts syscall.Timespec
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clock, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
