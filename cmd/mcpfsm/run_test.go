package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/internal/testutil"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
)

// TestRunHistoryEndsWithClose: the histories printed at exit are read after the
// connections closed, so that they end with the close.
func TestRunHistoryEndsWithClose(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{})
	cfg := writeConfig(t, fmt.Sprintf("version: 1\nservers:\n  s:\n    url: %s\n", h.URL()))

	b := startCLI(t, "run", "--history", cfg)
	b.waitFor(t, "ready", func(out string) bool { return strings.Contains(out, "→ ready") })
	if code := b.stop(t); code != 0 {
		t.Fatalf("exit %d: %s", code, b.stderr.String())
	}
	out := b.stdout.String()
	_, history, ok := strings.Cut(out, "History of s\n")
	if !ok || !strings.Contains(history, "tearing-down → closed") {
		t.Errorf("the history lacks the close:\n%s", out)
	}

	b = startCLI(t, "run", "--json", "--history", cfg)
	b.waitFor(t, "ready", func(out string) bool { return strings.Contains(out, `"to":"ready"`) })
	b.stop(t)
	var last map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.stdout.String()), "\n") {
		var obj map[string]any
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		if hist, ok := obj["history"].(map[string]any); ok {
			last = hist
		}
	}
	if last == nil || last["to"] != "closed" {
		t.Errorf("the JSON history does not end with the close: its last is %v", last)
	}
}

// TestRunPrintsFailureOnce: a failure is printed once, on its transition line with its
// reason, and not again as a log record.
func TestRunPrintsFailureOnce(t *testing.T) {
	cfg := writeConfig(t, "version: 1\npolicies: {backoff_base: 20ms, backoff_max: 50ms, park_interval: 20ms}\nservers:\n  s:\n    command: ./no-such-server\n")
	b := startCLI(t, "run", cfg)
	b.waitFor(t, "two failed connects", func(out string) bool { return strings.Count(out, "connect_failed") >= 2 })
	b.stop(t)
	out, errOut := b.stdout.String(), b.stderr.String()
	if errOut != "" {
		t.Errorf("stderr is not empty:\n%s", errOut)
	}
	failed := strings.Count(out, "connect_failed")
	if n := strings.Count(out+errOut, "no such file or directory"); n != failed {
		t.Errorf("%d failed connects, the reason printed %d times:\n%s", failed, n, out)
	}
}

// TestRunTracePolicies: run --json starts each server with the policies it runs with,
// and graph --trace labels the picture with them, not with the spec's defaults.
func TestRunTracePolicies(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{})
	cfg := writeConfig(t, fmt.Sprintf("version: 1\npolicies: {keepalive_interval: 7s}\nservers:\n  s:\n    url: %s\n    policies: {connect_timeout: 3s}\n", h.URL()))

	b := startCLI(t, "run", "--json", cfg)
	b.waitFor(t, "ready", func(out string) bool { return strings.Contains(out, `"to":"ready"`) })
	b.stop(t)
	trace := b.stdout.String()
	first, _, _ := strings.Cut(trace, "\n")
	var line serverLine
	if err := json.Unmarshal([]byte(first), &line); err != nil || line.Kind != "server" || line.Server != "s" ||
		line.Policies["connect_timeout"] != "3s" || line.Policies["keepalive_interval"] != "7s" || line.Policies["probe_timeout"] != "5s" {
		t.Errorf("the first line is not the server's with its policies: %s", first)
	}
	file := filepath.Join(t.TempDir(), "trace.jsonl")
	if err := os.WriteFile(file, []byte(trace), 0o600); err != nil {
		t.Fatal(err)
	}
	mmd, errOut, code := runCLI(t, "graph", "--format", "mermaid", "--trace", file)
	if code != 0 {
		t.Fatalf("graph --trace: exit %d: %s", code, errOut)
	}
	for _, want := range []string{"invoke connect ≤ connect_timeout 3s", "after keepalive (keepalive_interval 7s)", "probe_timeout 5s"} {
		if !strings.Contains(mmd, want) {
			t.Errorf("the graph lacks %q:\n%s", want, mmd)
		}
	}
	if strings.Contains(mmd, "connect_timeout 10s") || strings.Contains(mmd, "keepalive_interval 30s") {
		t.Errorf("the graph shows the spec's defaults:\n%s", mmd)
	}
}

// TestRunStderrToFile: a stdio server's stderr goes where the config says: here a file
// beside the config, appended to.
func TestRunStderrToFile(t *testing.T) {
	cfg := writeConfig(t, "version: 1\npolicies: {backoff_base: 20ms, backoff_max: 50ms}\nservers:\n  s:\n"+
		"    command: /bin/sh\n    args: [-c, 'echo complaint from the server >&2; exit 3']\n    stderr: s.err\n")
	b := startCLI(t, "run", cfg)
	file := filepath.Join(filepath.Dir(cfg), "s.err")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		data, _ := os.ReadFile(file)
		if strings.Count(string(data), "complaint from the server\n") >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %q after 30s; stdout:\n%s", file, data, b.stdout.String())
		}
	}
	b.stop(t)
	if info, err := os.Stat(file); err != nil {
		t.Error(err)
	} else if info.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600", file, info.Mode().Perm())
	}
}

// TestRunStdoutUnread: a run whose stdout nobody reads (a pipe the next command does
// not drain) still stops on SIGTERM, its connections closed: the transitions are
// written by the connections' owners, and once the pipe was full the owner's write
// blocked for ever, and with it the close.
func TestRunStdoutUnread(t *testing.T) {
	cfg := writeConfig(t, "version: 1\npolicies: {park_interval: 1ms}\nservers:\n  s:\n    command: ./no-such-server\n")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var stderr testutil.SyncBuffer
	cmd, _, stdout, _ := startPiped(ctx, t, &stderr, "run", cfg) // stdout never read
	defer stdout.Close()
	time.Sleep(3 * time.Second) // a transition every millisecond or so: the pipe's 64 KiB are full
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := exited(t, cmd, 60*time.Second, "after SIGTERM with its stdout unread", &stderr); err != nil {
		t.Errorf("run ended with %v; stderr:\n%s", err, stderr.String())
	}
}

// TestRunStdoutClosed: a run whose stdout's reader goes away (mcpfsm run ... | head)
// ends as on Ctrl-C, its connections closed, exit 0: Go killed it with SIGPIPE at its
// next write, closing nothing.
func TestRunStdoutClosed(t *testing.T) {
	cfg := serveConfig(t, t.TempDir(), "example")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stderr testutil.SyncBuffer
	cmd, _, stdout, _ := startPiped(ctx, t, &stderr, "run", cfg)
	lines := bufio.NewScanner(stdout)
	for lines.Scan() && !strings.Contains(lines.Text(), "→ ready") {
	}
	stdout.Close()                                             // as head does once it has its lines
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil { // a reload: a line more
		t.Fatal(err)
	}
	if err := exited(t, cmd, 40*time.Second, "after its stdout was gone", &stderr); err != nil {
		t.Errorf("run ended with %v once its stdout was gone, want exit 0; stderr:\n%s", err, stderr.String())
	}
}
