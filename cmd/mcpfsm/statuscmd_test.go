package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/transport/testserver"
)

// TestStatusCommand: mcpfsm status prints every server's status and exits 0 only when
// every server is ready; a server parked by a missing command is reported at once
// (no wait for the timeout) with the action it needs; --json prints the statuses.
func TestStatusCommand(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{})
	good := fmt.Sprintf("  good:\n    url: %s\n", h.URL())

	out, errOut, code := runCLI(t, "status", writeConfig(t, "version: 1\nservers:\n"+good))
	if code != 0 || !strings.Contains(out, "SERVER") || !matches(t, `(?m)^good\s+ready\s`, out) || errOut != "" {
		t.Errorf("one healthy server: exit %d\n%s\nstderr: %s", code, out, errOut)
	}

	start := time.Now()
	cfg := writeConfig(t, "version: 1\nservers:\n"+good+"  missing:\n    command: ./no-such-server\n")
	out, _, code = runCLI(t, "status", "--timeout", "30s", cfg)
	if code != 1 || !matches(t, `(?m)^missing\s+parked\s.*config .*no such file or directory`, out) || !strings.Contains(out, "Action needed:\n  missing: fix the server's config") {
		t.Errorf("a missing command: exit %d\n%s", code, out)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("status waited %v for a server that needs a person", d)
	}

	out, _, code = runCLI(t, "status", "--json", cfg)
	var sts []jsonStatus
	if err := json.Unmarshal([]byte(out), &sts); err != nil || code != 1 || len(sts) != 2 ||
		sts[0].State != "ready" || sts[0].Calls != "serve" || sts[1].State != "parked" || !sts[1].ActionNeeded || sts[1].LastFailure.Cause != "config" {
		t.Errorf("--json: exit %d, %v\n%s", code, err, out)
	}

	// A dead server is waited for until the timeout, then shown not ready.
	dead := testserver.StartHTTP(t, testserver.Options{})
	dead.Stop()
	start = time.Now()
	out, _, code = runCLI(t, "status", "--timeout", "300ms", writeConfig(t, fmt.Sprintf("version: 1\npolicies: {backoff_base: 50ms}\nservers:\n  dead:\n    url: %s\n", dead.URL())))
	if code != 1 || !matches(t, `(?m)^dead\s+(connecting|backing-off|breaker-open|half-open|tearing-down)\s.*lost`, out) {
		t.Errorf("a dead server: exit %d\n%s", code, out)
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > 20*time.Second {
		t.Errorf("status returned after %v with --timeout 300ms", d)
	}

	if _, errOut, code := runCLI(t, "status"); code != 2 || !strings.Contains(errOut, "want exactly one CONFIG") {
		t.Errorf("no config: exit %d, %q", code, errOut)
	}
	if _, _, code := runCLI(t, "status", "--timeout", "0s", cfg); code != 2 {
		t.Errorf("--timeout 0: exit %d, want 2", code)
	}
}

// jsonStatus is an mcpfsm.Status as its JSON reads (machine.CallMode and states.Cause
// encode as text but do not decode).
type jsonStatus struct {
	Server, Transport, State, Calls string
	ActionNeeded                    bool
	LastFailure                     struct{ Cause, Message string }
	Session                         *struct{ ID string }
}

func matches(t *testing.T, pattern, s string) bool {
	t.Helper()
	return regexp.MustCompile(pattern).MatchString(s)
}
