package transport

import (
	"os/exec"
	"syscall"
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
