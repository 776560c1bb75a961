//go:build unix

package transport

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/oauth2"
)

// TestFileStoreSaveLockHeld: a save whose lock another process holds (a stopped
// mcpfsm auth login, a stray flock) fails at its context's end. It waited for the
// lock for ever, and with it the request whose token refresh saved: the call, its
// deadline past, never returned.
func TestFileStoreSaveLockHeld(t *testing.T) {
	dir := t.TempDir()
	// Another open of the lock file: flock locks belong to an open file, so this
	// one holds out the store's as another process's would.
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	s := &FileStore{Dir: dir}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- s.Save(ctx, "files", &Credentials{Token: &oauth2.Token{AccessToken: "a", RefreshToken: "r"}})
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Error("saved with the lock held elsewhere")
		}
	case <-time.After(5 * time.Second):
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) // lets the save end
		<-done
		t.Fatal("the save waited past its context's end for a lock held elsewhere")
	}
	// The lock given back, a save goes through.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(context.Background(), "files", &Credentials{Token: &oauth2.Token{AccessToken: "a", RefreshToken: "r"}}); err != nil {
		t.Errorf("save: %v", err)
	}
}
