//go:build linux

package testutil

import (
	"syscall"
	"time"
)

// rusageThread is Linux's RUSAGE_THREAD (the syscall package does not name it).
const rusageThread = 1

// WorkClock returns a clock of the work the calling goroutine does: the CPU time
// of its thread, which the caller must have locked (runtime.LockOSThread). Unlike
// the wall clock, it does not run while other processes hold the CPUs, so a test
// can bound what its code costs on a machine under any load.
func WorkClock() func() time.Duration {
	used := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(rusageThread, &ru); err != nil {
			panic(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	begin := used()
	return func() time.Duration { return used() - begin }
}
