//go:build unix

package testutil

import (
	"os"
	"syscall"
)

// lockDir takes an exclusive lock on dir (flock on the directory itself, which
// npm ci does not replace), waiting for it; unlock gives it back.
func lockDir(dir string) (unlock func(), err error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
