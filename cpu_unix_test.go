//go:build unix

package mcpfsm

import (
	"syscall"
	"time"
)

// cpuTime returns the CPU time the process has used, user and system, as the OS
// counts it: unlike the wall clock, it does not grow while other processes hold the
// CPUs.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
