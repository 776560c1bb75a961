package main

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcpfsm/mcpfsm/internal/testutil"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
)

// TestLookAround: ls, read and prompt against a real server, in text and JSON; a
// server that cannot start says why.
func TestLookAround(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{Name: "looked-at"})
	cfg := writeConfig(t, fmt.Sprintf("version: 1\nservers:\n  s:\n    url: %s\n  gone:\n    command: /nonexistent/server\n", h.URL()))

	out, errOut, code := runCLI(t, "ls", cfg, "s")
	for _, want := range []string{"server     looked-at", "offers     tools (list changes), resources (subscribe, list changes), prompts (list changes), logging, completions", "session    ", "tools (", "  echo  Returns its text.", "prompts (1)", "  greet(name*, greeting)", "test://static/a", "resource templates (1)", "test://items/{id}"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("ls: exit %d, stdout lacks %q:\n%s\nstderr: %s", code, want, out, errOut)
		}
	}
	out, _, code = runCLI(t, "ls", "--json", cfg, "s")
	var l listing
	if err := json.Unmarshal([]byte(out), &l); code != 0 || err != nil || l.Server.Implementation.Name != "looked-at" || len(l.Tools) == 0 || len(l.Prompts) != 1 || len(l.ResourceTemplates) != 1 {
		t.Errorf("ls --json: exit %d, %v: %s", code, err, out)
	}

	if out, errOut, code := runCLI(t, "read", cfg, "s", "test://items/7"); code != 0 || strings.TrimSpace(out) != "item 7 v0" {
		t.Errorf("read: exit %d, %q, %q", code, out, errOut)
	}
	if out, errOut, code := runCLI(t, "prompt", cfg, "s", "greet", `{"name": "bob"}`); code != 0 || strings.TrimSpace(out) != "user: Hello, bob!" {
		t.Errorf("prompt: exit %d, %q, %q", code, out, errOut)
	}
	if _, errOut, code := runCLI(t, "prompt", cfg, "s", "greet"); code != 1 || !strings.Contains(errOut, "prompts/get") {
		t.Errorf("prompt without its required argument: exit %d, %q", code, errOut)
	}
	if _, errOut, code := runCLI(t, "ls", cfg, "gone"); code != 1 || !strings.Contains(errOut, "no such file or directory") || !strings.Contains(errOut, "parked") {
		t.Errorf("ls of a server that cannot start: exit %d, %q", code, errOut)
	}
	if _, errOut, code := runCLI(t, "read", cfg, "nowhere", "x"); code != 1 || !strings.Contains(errOut, "has no server") {
		t.Errorf("read of an unknown server: exit %d, %q", code, errOut)
	}
}

// TestLsAServerWithoutTemplates: ls of a server that declares resources and answers
// resources/templates/list with method-not-found (as many do) shows its resources and
// no templates; it failed, and before that the connection never came up.
func TestLsAServerWithoutTemplates(t *testing.T) {
	srv := httptest.NewServer(testutil.RawHTTPServer(false, func(method string) any {
		switch method {
		case "initialize":
			return map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{"resources": map[string]any{}},
				"serverInfo": map[string]any{"name": "templateless", "version": "0"}}
		case "resources/list":
			return map[string]any{"resources": []any{map[string]any{"name": "r", "uri": "test://r"}}}
		case "ping":
			return map[string]any{}
		}
		return nil
	}))
	t.Cleanup(srv.Close)
	cfg := writeConfig(t, fmt.Sprintf("version: 1\nservers:\n  s:\n    url: %s\n", srv.URL))
	out, errOut, code := runCLI(t, "ls", cfg, "s")
	for _, want := range []string{"server     templateless", "resources (1)", "test://r", "resource templates (0)"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("ls: exit %d, stdout lacks %q:\n%s\nstderr: %s", code, want, out, errOut)
		}
	}
}
