//go:build !linux

package testutil

import "time"

// WorkClock is the wall clock where a thread's CPU time is not read: it runs
// while other processes hold the CPUs (see the Linux one).
func WorkClock() func() time.Duration {
	begin := time.Now()
	return func() time.Duration { return time.Since(begin) }
}
