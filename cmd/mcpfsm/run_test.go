package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

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
	cfg := writeConfig(t, "version: 1\npolicies: {backoff_base: 20ms, backoff_max: 50ms}\nservers:\n  s:\n    command: ./no-such-server\n")
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
