package transport

import (
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// setParentDeathSignal makes the kernel SIGKILL the child when its parent
// dies, so that a stdio server never outlives a client that was killed (its
// process group of its own would otherwise keep it running, orphaned).
//
// The "parent" is the OS thread that forked the child, not the process: the
// signal also fires if that thread exits while the process lives on. The Go
// runtime ends a thread only when a goroutine that locked it
// (runtime.LockOSThread) returns without unlocking it; the fork happens on
// whatever thread runs cmd.Start, so a child dies early only if the program
// also runs such a goroutine on that thread later. Nothing in this module
// does. (exec's child sets the signal with prctl right after fork, and kills
// itself if its parent already died before that.) A set-user-ID command
// clears it.
func setParentDeathSignal(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}

// pipeBuffered returns how many bytes wait unread in the pipe f reads (TIOCINQ is
// Linux's FIONREAD), and whether it could tell.
func pipeBuffered(f *os.File) (int, bool) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, false
	}
	n, ierr := 0, error(nil)
	if err := rc.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.TIOCINQ) }); err != nil || ierr != nil {
		return 0, false
	}
	return n, true
}
