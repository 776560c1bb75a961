//go:build unix

package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// cuttableStdout returns stdout (file descriptor 1) as a file whose write under way
// a write deadline can cut short, where stdout is a pipe or a socket that neither
// stdin nor stderr shares: its descriptor is made non-blocking, so that Go's poller
// serves its writes (a blocking write to a pipe nobody reads cannot be interrupted:
// it held the gateway's close for all its 15 s). restore makes it blocking again,
// for whoever writes to the pipe after the gateway. Otherwise (a terminal, a file, a
// pipe shared with stderr as 2>&1 makes it, whose blocking writes would fail instead
// of waiting) it returns nil.
func cuttableStdout() (f *os.File, restore func()) {
	var out unix.Stat_t
	if unix.Fstat(1, &out) != nil {
		return nil, nil
	}
	if kind := out.Mode & unix.S_IFMT; kind != unix.S_IFIFO && kind != unix.S_IFSOCK {
		return nil, nil
	}
	for _, fd := range []int{0, 2} {
		var other unix.Stat_t
		if unix.Fstat(fd, &other) == nil && other.Dev == out.Dev && other.Ino == out.Ino {
			return nil, nil
		}
	}
	flags, err := unix.FcntlInt(1, unix.F_GETFL, 0)
	if err != nil {
		return nil, nil
	}
	if flags&unix.O_NONBLOCK == 0 {
		if unix.SetNonblock(1, true) != nil {
			return nil, nil
		}
		restore = func() { _ = unix.SetNonblock(1, false) }
	} else {
		restore = func() {}
	}
	// A descriptor found non-blocking is served by the poller (os.NewFile).
	pinnedStdout = os.NewFile(1, "/dev/stdout")
	return pinnedStdout, restore
}

// pinnedStdout keeps cuttableStdout's file reachable: collected, it would close
// stdout (os.NewFile's finalizer).
var pinnedStdout *os.File
