package mcpfsm_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/transport"
)

// TestParseConfigAuth: each kind of auth block becomes its transport.Auth; secrets
// come from the environment; the token store is relative to the config's directory.
func TestParseConfigAuth(t *testing.T) {
	text := `version: 1
servers:
  bearer:
    url: https://example.com/mcp
    auth: {token: "${TOKEN}"}
  code:
    url: https://example.com/mcp
    transport: sse
    auth:
      client_id: app
      client_secret: ${SECRET}
      client_metadata_url: https://example.com/client.json
      register: false
      redirect_url: http://127.0.0.1:9000/cb
      scopes: [read, write]
      store: tokens
      timeout: 3s
  service:
    url: https://example.com/mcp
    auth: {grant: client_credentials, client_id: svc, client_secret: "${SECRET}", store: memory}
`
	cfg, err := mcpfsm.ParseConfig("/etc/mcp/servers.yaml", []byte(text), env(map[string]string{"TOKEN": "tok-value", "SECRET": "secret-value"}))
	if err != nil {
		t.Fatal(err)
	}
	bearer, _ := cfg.Server("bearer")
	tok, err := bearer.Transport.HTTP.Auth.Token.Token()
	if err != nil || tok.AccessToken != "tok-value" {
		t.Errorf("bearer token %v, %v", tok, err)
	}
	code, _ := cfg.Server("code")
	a := code.Transport.SSE.Auth
	if a.ClientID != "app" || a.ClientSecret != "secret-value" || a.ClientIDMetadataURL != "https://example.com/client.json" ||
		!a.NoRegistration || a.RedirectURL != "http://127.0.0.1:9000/cb" || strings.Join(a.Scopes, " ") != "read write" ||
		a.Timeout != 3*time.Second || a.LoginHint != "mcpfsm auth login /etc/mcp/servers.yaml code" {
		t.Errorf("code auth %+v", a)
	}
	if fs, ok := a.Store.(*transport.FileStore); !ok || fs.Dir != filepath.Clean("/etc/mcp/tokens") {
		t.Errorf("store %+v", a.Store)
	}
	service, _ := cfg.Server("service")
	if a := service.Transport.HTTP.Auth; a.Grant != transport.GrantClientCredentials || a.Store != nil {
		t.Errorf("service auth %+v", a)
	}
	for _, s := range cfg.Servers {
		if strings.Contains(s.Transport.String(), "secret-value") || strings.Contains(s.Transport.String(), "tok-value") {
			t.Errorf("String shows a secret: %s", s.Transport)
		}
	}
}

// FuzzParseConfigAuth: no auth block makes the loader panic or hang, an accepted one
// gives a transport that validates, and no error quotes a secret from the
// environment.
func FuzzParseConfigAuth(f *testing.F) {
	for _, seed := range []string{
		`{token: "${T}"}`, `{client_id: a, client_secret: "${T}", grant: client_credentials}`,
		`{client_metadata_url: "https://h/c.json", register: false}`, `{scopes: [a, "${T}"], store: memory}`,
		`{redirect_url: "${T}"}`, `{timeout: -1s}`, `{{},<<}`, `[token]`, `{token: {a: b}}`, `{store: "${T}"}`,
	} {
		f.Add(seed)
	}
	const secret = "FUZZ-SECRET-41"
	lookup := env(map[string]string{"T": secret})
	f.Fuzz(func(t *testing.T, block string) {
		text := "version: 1\nservers:\n  s:\n    url: https://example.com/mcp\n    auth: " + block + "\n"
		cfg, err := mcpfsm.ParseConfig("fuzz.yaml", []byte(text), lookup)
		if err != nil {
			if strings.Contains(err.Error(), secret) && !strings.Contains(block, secret) {
				t.Fatalf("the error quotes the secret: %v", err)
			}
			return
		}
		for _, s := range cfg.Servers {
			if err := s.Transport.Validate(); err != nil {
				t.Fatalf("accepted an auth block whose transport does not validate: %v", err)
			}
		}
	})
}

// TestLoginHintQuoted: the login command an error tells a user to run names the
// config file and the server as a POSIX shell reads them back, whatever the file's
// path holds (a space, a quote, "$(...)"): it was printed as it was, and pasted it
// ran something else. A plain path stays as it is.
func TestLoginHintQuoted(t *testing.T) {
	text := "version: 1\nservers:\n  code:\n    url: https://example.com/mcp\n    auth: {client_id: app}\n"
	for _, file := range []string{"/etc/mcp/servers.yaml", "/tmp/my servers.yaml", "/tmp/it's $(exit 7) `true`;.yaml"} {
		cfg, err := mcpfsm.ParseConfig(file, []byte(text), env(nil))
		if err != nil {
			t.Fatal(err)
		}
		code, _ := cfg.Server("code")
		hint := code.Transport.HTTP.Auth.LoginHint
		args, ok := strings.CutPrefix(hint, "mcpfsm auth login ")
		if !ok {
			t.Fatalf("hint %q", hint)
		}
		out, err := exec.Command("sh", "-c", `printf '%s\n' `+args).Output()
		if err != nil {
			t.Fatalf("sh: %v (hint %q)", err, hint)
		}
		if diff := cmp.Diff([]string{file, "code"}, strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")); diff != "" {
			t.Errorf("the shell reads %q back otherwise (-want +got):\n%s", hint, diff)
		}
		if file == "/etc/mcp/servers.yaml" && hint != "mcpfsm auth login /etc/mcp/servers.yaml code" {
			t.Errorf("a plain path is quoted: %q", hint)
		}
		scope := code.Transport.HTTP.Auth.LoginScopeHint
		if scope[1] != " "+args {
			t.Errorf("the scope hint's tail %q, want %q", scope[1], " "+args)
		}
	}
}
