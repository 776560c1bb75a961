package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/mcpfsm/mcpfsm/internal/authtest"
)

// TestAuthLoginAndStatus: auth status says there is no token and what to run; auth
// login prints the URL, takes the redirect on loopback and saves the token (0600);
// status then shows its state and never the token; a call works without a login;
// a second login finds the token good and does nothing.
func TestAuthLoginAndStatus(t *testing.T) {
	ms := authtest.MCPServer()
	t.Cleanup(func() { authtest.CloseSessions(ms) })
	srv := authtest.New(authtest.Options{Scopes: []string{"mcp"}}, authtest.Streamable(ms)).Start(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "servers.yaml")
	text := fmt.Sprintf("version: 1\nservers:\n  remote:\n    url: %s\n    auth:\n      store: tokens\n      redirect_url: http://127.0.0.1:0/callback\n  plain:\n    command: server\n", srv.MCPURL())
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runCLI(t, "auth", "status", cfg)
	if code != 0 || !strings.Contains(out, "none: run mcpfsm auth login") || !strings.Contains(out, "plain") {
		t.Fatalf("status before login: exit %d\n%s%s", code, out, errOut)
	}

	// A headless call says what to run.
	_, errOut, code = runCLI(t, "call", "--timeout", "10s", cfg, "remote", "echo", `{"text":"hi"}`)
	if code != 1 || !strings.Contains(errOut, "run mcpfsm auth login "+cfg+" remote") {
		t.Errorf("call before login: exit %d\n%s", code, errOut)
	}

	loginOut, loginErr, page := browserLogin(t, cfg, "remote") // the browser: the authorization server redirects to the loopback listener
	if !strings.Contains(page, "Logged in") {
		t.Errorf("the redirect page says %q", page)
	}
	info, err := os.Stat(filepath.Join(dir, "tokens", "remote.json"))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v, %v", info, err)
	}
	stored := readFile(t, filepath.Join(dir, "tokens", "remote.json"))
	token := regexp.MustCompile(`"access_token": "([^"]+)"`).FindStringSubmatch(stored)
	if token == nil {
		t.Fatalf("no access token stored")
	}

	out, errOut, code = runCLI(t, "auth", "status", cfg)
	if code != 0 || !strings.Contains(out, "valid until") || !strings.Contains(out, "refreshable") || !strings.Contains(out, "mcp") {
		t.Errorf("status after login: exit %d\n%s%s", code, out, errOut)
	}
	out2, _, _ := runCLI(t, "auth", "status", "--json", cfg)
	for _, o := range []string{out, out2, loginOut, loginErr} {
		if strings.Contains(o, token[1]) {
			t.Errorf("the token shows:\n%s", o)
		}
	}

	out, errOut, code = runCLI(t, "call", cfg, "remote", "echo", `{"text":"hi"}`)
	if code != 0 || strings.TrimSpace(out) != "hi" {
		t.Errorf("call after login: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = runCLI(t, "auth", "login", cfg, "remote")
	if code != 0 || !strings.Contains(out, "already logged in") {
		t.Errorf("second login: exit %d\n%s%s", code, out, errOut)
	}
	if n := srv.Authorizations.Load(); n != 1 {
		t.Errorf("%d authorizations, want 1", n)
	}
	_, errOut, code = runCLI(t, "auth", "login", cfg, "plain")
	if code != 1 || !strings.Contains(errOut, "nothing to log in to") {
		t.Errorf("login to a stdio server: exit %d\n%s", code, errOut)
	}
}

// TestAuthStatusClientCredentials: a server on the client credentials flow has no
// login to run (auth login refuses it) and nothing in the token store (its tokens are
// had again from the config's secret): auth status shows no token state and no store
// for it, and never tells to run auth login (docs/auth.md).
func TestAuthStatusClientCredentials(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "servers.yaml")
	text := "version: 1\nservers:\n  jobs:\n    url: https://jobs.example.com/mcp\n    auth:\n      grant: client_credentials\n      client_id: scheduler\n      client_secret: \"${MCPFSM_TEST_JOBS_SECRET}\"\n      store: tokens\n"
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("MCPFSM_TEST_JOBS_SECRET", "s3cret")
	out, errOut, code := runCLI(t, "auth", "status", cfg)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 {
		t.Fatalf("status: exit %d\n%s%s", code, out, errOut)
	}
	if f := strings.Fields(lines[1]); strings.Contains(out, "auth login") || len(f) != 6 || f[3] != "-" || f[5] != "-" {
		t.Errorf("status of a client credentials server, want no token state and no store:\n%s", out)
	}
	out, _, _ = runCLI(t, "auth", "status", "--json", cfg)
	if strings.Contains(out, `"token"`) || strings.Contains(out, `"store"`) {
		t.Errorf("status --json of a client credentials server, want no token and no store:\n%s", out)
	}
	_, errOut, code = runCLI(t, "auth", "login", cfg, "jobs")
	if code != 1 || !strings.Contains(errOut, "nothing to log in to") {
		t.Errorf("login to a client credentials server: exit %d\n%s", code, errOut)
	}
}

// browserLogin runs mcpfsm auth login with args and plays the browser: it opens the
// authorization URL printed, which redirects to the loopback listener. It returns
// the login's stdout and stderr, and the page the redirect showed.
func browserLogin(t *testing.T, args ...string) (stdout, stderr, page string) {
	t.Helper()
	login := startCLI(t, append([]string{"auth", "login"}, args...)...)
	var authURL string
	login.waitFor(t, "the authorization URL", func(stdout string) bool {
		m := regexp.MustCompile(`(?m)^  (http://\S+/authorize\S*)$`).FindStringSubmatch(stdout)
		if m != nil {
			authURL = m[1]
		}
		return m != nil
	})
	resp, err := http.Get(authURL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if code := <-login.code; code != 0 {
		t.Fatalf("login %v: exit %d\n%s\n%s", args, code, login.stdout.String(), login.stderr.String())
	}
	login.code <- 0
	return login.stdout.String(), login.stderr.String(), string(body)
}

// TestAuthLoginScope: a server that answers a call 403 insufficient_scope (it needs
// more than the login was granted) fails the call with the exact command to run,
// auth login --scope naming the scopes; that command logs in anew (the stored token,
// which works for what it was granted, is not taken for enough), asking for them;
// the stored credentials carry them; the call then works. No token shows anywhere.
func TestAuthLoginScope(t *testing.T) {
	ms := authtest.MCPServer()
	t.Cleanup(func() { authtest.CloseSessions(ms) })
	srv := authtest.New(authtest.Options{Scopes: []string{"mcp"}, CallScopes: []string{"write"}}, authtest.Streamable(ms)).Start(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "servers.yaml")
	text := fmt.Sprintf("version: 1\nservers:\n  remote:\n    url: %s\n    auth:\n      store: tokens\n      redirect_url: http://127.0.0.1:0/callback\n", srv.MCPURL())
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	var outputs []string
	o1, e1, _ := browserLogin(t, cfg, "remote")
	outputs = append(outputs, o1, e1)
	tokenFile := filepath.Join(dir, "tokens", "remote.json")
	first := regexp.MustCompile(`"access_token": "([^"]+)"`).FindStringSubmatch(readFile(t, tokenFile))
	if first == nil {
		t.Fatal("no access token stored")
	}

	_, errOut, code := runCLI(t, "call", "--timeout", "10s", cfg, "remote", "echo", `{"text":"hi"}`)
	outputs = append(outputs, errOut)
	want := "to log in, run: mcpfsm auth login --scope 'mcp write' " + cfg + " remote\n"
	if code != 1 || !strings.Contains(errOut, want) {
		t.Fatalf("call needing more scope: exit %d, want the error to say %q:\n%s", code, want, errOut)
	}

	_, errOut, code = runCLI(t, "auth", "login", "--scope", " ", cfg, "remote")
	if code != 2 || !strings.Contains(errOut, "--scope is empty") {
		t.Errorf("login --scope ' ': exit %d\n%s", code, errOut)
	}

	o2, e2, _ := browserLogin(t, "--scope", "mcp write", cfg, "remote")
	outputs = append(outputs, o2, e2)
	if !strings.Contains(o2, "logged in") || !strings.Contains(o2, "write") {
		t.Errorf("login --scope says:\n%s%s", o2, e2)
	}
	stored := readFile(t, tokenFile)
	var creds struct{ Scopes []string }
	if err := json.Unmarshal([]byte(stored), &creds); err != nil || !slices.Contains(creds.Scopes, "write") || !slices.Contains(creds.Scopes, "mcp") {
		t.Errorf("stored scopes %v (%v), want mcp and write", creds.Scopes, err)
	}
	second := regexp.MustCompile(`"access_token": "([^"]+)"`).FindStringSubmatch(stored)

	out, errOut, code := runCLI(t, "call", "--timeout", "10s", cfg, "remote", "echo", `{"text":"hi"}`)
	outputs = append(outputs, out, errOut)
	if code != 0 || strings.TrimSpace(out) != "hi" {
		t.Errorf("call after login --scope: exit %d\n%s%s", code, out, errOut)
	}
	if n := srv.Authorizations.Load(); n != 2 {
		t.Errorf("%d authorizations, want 2 (the first login, the one asking for more)", n)
	}
	// Logged in with the scope already: nothing more to do.
	out, errOut, code = runCLI(t, "auth", "login", "--scope", "write", cfg, "remote")
	outputs = append(outputs, out, errOut)
	if code != 0 || !strings.Contains(out, "already logged in") {
		t.Errorf("login --scope with the scope held: exit %d\n%s%s", code, out, errOut)
	}
	for _, o := range outputs {
		for _, tok := range [][]string{first, second} {
			if tok != nil && strings.Contains(o, tok[1]) {
				t.Errorf("a token shows:\n%s", o)
			}
		}
	}
}
