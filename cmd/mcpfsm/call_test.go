package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestCallSendsEmptyArguments: call without ARGUMENTS (or with null) sends
// "arguments": {}, never null, which the TypeScript SDK's servers refuse.
func TestCallSendsEmptyArguments(t *testing.T) {
	var mu sync.Mutex
	var sent []string // the raw arguments of each tools/call
	server := testserver.New(testserver.Options{})
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var req struct {
			Method string `json:"method"`
			Params struct {
				Arguments json.RawMessage `json:"arguments"`
			} `json:"params"`
		}
		if json.Unmarshal(body, &req) == nil && req.Method == "tools/call" {
			mu.Lock()
			sent = append(sent, string(req.Params.Arguments))
			mu.Unlock()
		}
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	// Before srv.Close (cleanups run last first), which waits for the sessions' streams.
	t.Cleanup(func() {
		for ss := range server.Sessions() {
			ss.Close()
		}
	})
	cfg := writeConfig(t, fmt.Sprintf("version: 1\nservers:\n  s:\n    url: %s/mcp\n", srv.URL))
	for _, args := range [][]string{
		{"call", cfg, "s", "counter"},
		{"call", cfg, "s", "counter", "null"},
		{"call", cfg, "s", "echo", `{"text": "hi"}`},
	} {
		if out, errOut, code := runCLI(t, args...); code != 0 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{`{}`, `{}`, `{"text":"hi"}`}; strings.Join(sent, " ") != strings.Join(want, " ") {
		t.Errorf("arguments sent: %q, want %q", sent, want)
	}
}

// TestCallRelativeCommand: in a config loaded by a relative path from its own
// directory, command ./mcpfsm runs the file beside the config, not mcpfsm from PATH
// (here PATH holds none, so a lookup fails).
func TestCallRelativeCommand(t *testing.T) {
	dir := filepath.Dir(mcpfsmBin(t)) // holds mcpfsm
	if err := os.WriteFile(filepath.Join(dir, "servers.yaml"), []byte("version: 1\nservers:\n  s:\n    command: ./mcpfsm\n    args: [example-server]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	t.Setenv("PATH", t.TempDir())
	out, errOut, code := runCLI(t, "call", "--timeout", "20s", "servers.yaml", "s", "echo", `{"text": "beside the config"}`)
	if code != 0 || out != "beside the config\n" {
		t.Errorf("call: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
