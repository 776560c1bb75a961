//go:build !unix

package transport

import "os/exec"

// setProcessGroup does nothing where process groups do not exist.
func setProcessGroup(*exec.Cmd) {}

// killTree kills the child itself; its descendants are not reached.
func killTree(cmd *exec.Cmd) {
	_ = cmd.Process.Kill()
}

// termTree kills the child: there is no SIGTERM here.
func termTree(cmd *exec.Cmd) {
	_ = cmd.Process.Kill()
}
