//go:build unix

package transport

import (
	"os/exec"
	"syscall"
)

// setProcessGroup makes the child the leader of a new process group, so that
// killTree reaches everything it starts (unless a descendant leaves the group).
func setProcessGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
}

// killTree sends SIGKILL to the child's process group.
func killTree(cmd *exec.Cmd) {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}

// termTree sends SIGTERM to the child's process group and to the child (in
// case it left its group).
func termTree(cmd *exec.Cmd) {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	_ = cmd.Process.Signal(syscall.SIGTERM)
}
