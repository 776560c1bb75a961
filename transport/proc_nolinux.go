//go:build !linux

package transport

import "os/exec"

// setParentDeathSignal does nothing: only Linux can kill a child when its
// parent dies.
func setParentDeathSignal(*exec.Cmd) {}
