//go:build !unix

package transport

// lockDir is a no-op where flock is not to be had: saves within one process
// are still atomic renames.
func lockDir(string) (func(), error) { return func() {}, nil }
