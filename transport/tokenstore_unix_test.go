//go:build unix

package transport

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestFileStoreFIFO: a FIFO at a key's path (the token directory is the user's, but
// anything may be put there) held Load for ever: opened for reading, it waits for a
// writer, and Load runs before every refresh and on every 401. It is refused at once,
// as a file that is not credentials.
func TestFileStoreFIFO(t *testing.T) {
	store := &FileStore{Dir: t.TempDir()}
	if err := syscall.Mkfifo(store.Path("fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := store.Load(context.Background(), "fifo")
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("Load of a FIFO: %v, want an error saying it is not a regular file", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Load of a FIFO never returned")
	}
}
