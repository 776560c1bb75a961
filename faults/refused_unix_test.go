//go:build unix

package faults_test

import (
	"fmt"
	"syscall"
	"testing"
)

// refusedAddr returns a loopback address where a connection is refused, and stays
// refused for the test: a socket bound there that does not listen holds the port. (A
// port taken from a listener that is then closed may be handed to another test's
// server under load, and then it answers.)
func refusedAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}
