//go:build unix

package transport

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// stopChild sends SIGSTOP to pid and, where /proc shows it, waits until the process
// has stopped: the signal is delivered asynchronously, and a child still running when
// a test goes on may read its stdin's EOF and exit first (an exit overrides a group
// stop that has not completed), which once made a "stopped" server close cleanly.
func stopChild(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		return // no /proc here: the signal has to do
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			t.Fatalf("process %d is gone before it stopped: %v", pid, err)
		}
		// The state follows the command, which is in parentheses.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't') {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d did not stop within 10s of SIGSTOP", pid)
		}
	}
}
