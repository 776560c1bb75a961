//go:build unix

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestFilesNotRegular: a spec, scenario or config that is a device, a FIFO or a
// directory is refused at once by every command: /dev/zero is not read without end, a
// FIFO with no writer is not waited on.
func TestFilesNotRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Should a command be stuck opening the FIFO, a writer releases it.
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	for _, file := range []string{"/dev/zero", fifo, dir} {
		cfg := writeConfig(t, fmt.Sprintf("version: 1\nservers:\n  s:\n    command: server\n    spec: %q\n", file))
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"validate", file}, "not a regular file"},
			{[]string{"graph", file}, "not a regular file"},
			{[]string{"simulate", "--spec", file, "dead-hour"}, "not a regular file"},
			{[]string{"simulate", file}, "not a regular file"},
			{[]string{"run", file}, "not a regular file"},
			{[]string{"call", file, "s", "echo"}, "not a regular file"},
			{[]string{"simulate", "--config", file, "--server", "s", "dead-hour"}, "not a regular file"},
			{[]string{"run", cfg}, fmt.Sprintf("%s:5:11: spec %q: not a regular file", cfg, file)},
		} {
			type result struct {
				stderr string
				code   int
			}
			done := make(chan result, 1)
			go func() {
				_, errOut, code := runCLI(t, c.args...)
				done <- result{errOut, code}
			}()
			select {
			case r := <-done:
				if r.code != 1 || !strings.Contains(r.stderr, c.want) {
					t.Errorf("mcpfsm %v: exit %d, stderr %q, want %q", c.args, r.code, r.stderr, c.want)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("mcpfsm %v has not returned after 5s", c.args)
			}
		}
	}
}
