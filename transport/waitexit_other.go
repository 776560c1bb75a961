//go:build !linux

package transport

import "errors"

// waitExited is not available here: the group is killed only after the child
// is reaped (a tiny window in which the process group ID could be reused).
func waitExited(int) error { return errors.ErrUnsupported }
