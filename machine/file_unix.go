//go:build unix

package machine

import "syscall"

const openNonblock = syscall.O_NONBLOCK
