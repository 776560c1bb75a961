package transport

import (
	"syscall"
	"unsafe"
)

// waitExited blocks until the process pid has exited, without reaping it: the
// zombie keeps its pid (and so its process group ID) reserved, so the group
// can still be signalled safely before os/exec reaps the child.
func waitExited(pid int) error {
	const (
		pPID    = 1          // P_PID
		wExited = 0x4        // WEXITED
		wNoWait = 0x01000000 // WNOWAIT
	)
	var info [128]byte // siginfo_t
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid),
			uintptr(unsafe.Pointer(&info[0])), wExited|wNoWait, 0, 0)
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 {
			return errno
		}
		return nil
	}
}
