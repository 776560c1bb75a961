//go:build unix

package main

import (
	"context"
	"time"

	"golang.org/x/sys/unix"
)

// watchHangup closes the channel it returns once the writer of the pipe (or
// terminal, or socket: see pollRDHUP) on file descriptor fd is gone, as poll(2)
// tells it (POLLHUP, or an error), looking every interval until ctx ends; never for a file that cannot
// hang up (a regular file, /dev/null). It reads nothing: the data still in the
// pipe is the reader's.
func watchHangup(ctx context.Context, fd int, interval time.Duration) <-chan struct{} {
	return watchPoll(ctx, fd, unix.POLLIN|pollRDHUP, interval)
}

// watchReaderGone closes the channel it returns once the reader of the pipe (or
// socket, or terminal) on file descriptor fd is gone, as poll(2) tells its
// writer (a pipe without readers: POLLERR; a socket whose peer closed, or a
// terminal hung up: POLLHUP), looking every interval until ctx ends; never for a
// file (a regular file, /dev/null). It writes nothing: a host killed while the
// gateway has nothing to write is seen all the same.
func watchReaderGone(ctx context.Context, fd int, interval time.Duration) <-chan struct{} {
	return watchPoll(ctx, fd, 0, interval) // POLLERR and POLLHUP are told unasked
}

// watchPoll closes the channel it returns once poll(2) tells of fd, asked for
// events, a hang-up or an error.
func watchPoll(ctx context.Context, fd int, events int16, interval time.Duration) <-chan struct{} {
	gone := make(chan struct{})
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			fds := []unix.PollFd{{Fd: int32(fd), Events: events}}
			if n, err := unix.Poll(fds, 0); err == nil && n > 0 && fds[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL|pollRDHUP) != 0 {
				close(gone)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return gone
}
