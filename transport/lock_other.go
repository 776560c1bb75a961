//go:build !unix

package transport

import (
	"context"
	"os"
)

// lockDir is a no-op where flock is not to be had: saves within one process
// are still atomic renames.
func lockDir(context.Context, string) (func(), error) { return func() {}, nil }

// readNoWait is how the token store opens a file to read it.
const readNoWait = os.O_RDONLY
