//go:build unix

package transport

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// lockDir takes an exclusive lock on dir's lock file (flock), held until the
// returned function is called: saves from several processes do not interleave.
// It waits for a lock held elsewhere until ctx ends: another process may hold
// it for ever (a stopped mcpfsm auth login, a stray flock).
func lockDir(ctx context.Context, dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, err
		}
		t := time.NewTimer(lockPoll)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			f.Close()
			return nil, errors.Join(errors.New("the lock of the token store is held by another process"), ctx.Err())
		}
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// lockPoll is how often lockDir tries again for a lock held elsewhere.
const lockPoll = 10 * time.Millisecond

// readNoWait is how the token store opens a file to read it: without blocking, so
// that a FIFO (opened for reading, it would wait for a writer for ever) is refused
// by openRegular, not waited on.
const readNoWait = os.O_RDONLY | syscall.O_NONBLOCK
