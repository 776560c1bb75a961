//go:build !unix

package transport

import (
	"context"
	"fmt"
	"os"
)

// lockDir is a no-op where flock is not to be had: saves within one process
// are still atomic renames.
func lockDir(context.Context, string) (func(), error) { return func() {}, nil }

// openRegular opens path for reading if it is a regular file.
func openRegular(path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = fmt.Errorf("%s is not a regular file", path)
		}
		return nil, err
	}
	return f, nil
}
