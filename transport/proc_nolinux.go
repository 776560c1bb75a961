//go:build !linux

package transport

import (
	"os"
	"os/exec"
)

// setParentDeathSignal does nothing: only Linux can kill a child when its
// parent dies.
func setParentDeathSignal(*exec.Cmd) {}

// pipeBuffered cannot tell how many bytes wait in a pipe here.
func pipeBuffered(*os.File) (int, bool) { return 0, false }
