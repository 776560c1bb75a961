//go:build !unix

package transport

import "context"

// lockDir is a no-op where flock is not to be had: saves within one process
// are still atomic renames.
func lockDir(context.Context, string) (func(), error) { return func() {}, nil }
