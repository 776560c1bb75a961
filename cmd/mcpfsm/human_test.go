package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpfsm/mcpfsm/transport/testserver"
)

func TestPrintable(t *testing.T) {
	for _, c := range []struct {
		in   string
		max  int
		want string
	}{
		{"plain → text, with spaces", 100, "plain → text, with spaces"},
		{"\x1b[31mred\x1b[0m", 100, `\x1b[31mred\x1b[0m`},
		{"one\nready → closed\r\n", 100, `one\nready → closed\r\n`},
		{"tab\there\x7f", 100, `tab\there\x7f`},
		{"bidi \u202egnp.exe", 100, `bidi \u202egnp.exe`},
		{"c1 \u009b31m", 100, `c1 \u009b31m`},
		{"bad \xff utf-8", 100, `bad \xff utf-8`},
		{strings.Repeat("é", 12), 10, strings.Repeat("é", 10) + "…"},
		{strings.Repeat("é", 10), 10, strings.Repeat("é", 10)},
	} {
		if got := printable(c.in, c.max); got != c.want {
			t.Errorf("printable(%q, %d) = %q, want %q", c.in, c.max, got, c.want)
		}
	}
}

// injection is a server's error text that would colour the terminal and forge a
// transition line if printed raw.
const injection = "\x1b[31mEVIL\nready → closed"

// rpcErrorServer is an MCP endpoint that answers every request with a JSON-RPC error
// whose message is msg.
func rpcErrorServer(t *testing.T, msg string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ID json.RawMessage `json:"id"`
		}
		_ = json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req)
		if req.ID == nil { // a notification, or not a POST
			w.WriteHeader(http.StatusAccepted)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"jsonrpc": "2.0", "id": req.ID,
			"error": map[string]any{"code": -32603, "message": msg},
		})
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp"
}

// writeConfig writes a servers config into a new temp dir and returns its path.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "servers.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// checkEscaped: out shows the injection escaped, never raw.
func checkEscaped(t *testing.T, what, out string) {
	t.Helper()
	if strings.Contains(out, "\x1b") || strings.Contains(out, "\nready → closed") {
		t.Errorf("%s printed a server's text raw:\n%s", what, out)
	}
	if !strings.Contains(out, `\x1b[31mEVIL\nready → closed`) {
		t.Errorf("%s does not show the server's text, escaped:\n%s", what, out)
	}
}

// TestServerTextIsEscaped: a server's error text reaches the human output of run and
// call with its control characters escaped: no escape sequence reaches the terminal, no
// newline forges a transition line. The reason of a failure is shown once.
func TestServerTextIsEscaped(t *testing.T) {
	url := rpcErrorServer(t, injection)
	cfg := writeConfig(t, fmt.Sprintf("version: 1\npolicies: {backoff_base: 20ms, backoff_max: 50ms}\nservers:\n  s:\n    url: %s\n", url))

	b := startCLI(t, "run", cfg)
	b.waitFor(t, "a failed connect", func(out string) bool { return strings.Contains(out, "connect_failed") })
	b.stop(t)
	checkEscaped(t, "run", b.stdout.String()+b.stderr.String())

	out, errOut, code := runCLI(t, "call", "--timeout", "1s", cfg, "s", "echo")
	if code != 1 {
		t.Errorf("call: exit %d", code)
	}
	checkEscaped(t, "call", out+errOut)
	if n := strings.Count(errOut, "EVIL"); n != 1 {
		t.Errorf("call: the reason is shown %d times, want once:\n%s", n, errOut)
	}

	// A healthy server echoing a tool name in its error.
	h := testserver.StartHTTP(t, testserver.Options{})
	cfg = writeConfig(t, fmt.Sprintf("version: 1\nservers:\n  s:\n    url: %s\n", h.URL()))
	out, errOut, code = runCLI(t, "call", "--timeout", "5s", cfg, "s", injection)
	if code != 1 {
		t.Errorf("call of an unknown tool: exit %d", code)
	}
	checkEscaped(t, "call of an unknown tool", out+errOut)
}

// TestValidateNotYAML: a file that is not a spec at all is not dumped whole into the
// message.
func TestValidateNotYAML(t *testing.T) {
	file := filepath.Join(t.TempDir(), "README")
	text := strings.Repeat("This is prose and not a lifecycle, written at length. ", 200)
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := runCLI(t, "validate", file)
	want := file + `:1:1: expected a mapping at the top of the file, found "This is prose and not a lifecycle, written at length. This i…"` + "\n"
	if code != 1 || errOut != want {
		t.Errorf("validate: exit %d, stderr %q, want %q", code, errOut, want)
	}
}
