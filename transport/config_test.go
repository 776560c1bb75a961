package transport

import (
	"errors"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestKind(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Stdio: &Stdio{}}, "stdio"},
		{Config{HTTP: &HTTP{}}, "http"},
		{Config{SSE: &HTTP{}}, "sse"},
		{Config{InMemory: &InMemory{}}, "memory"},
		{Config{}, ""},
		{Config{Stdio: &Stdio{}, HTTP: &HTTP{}}, ""},
	} {
		if got := tc.cfg.Kind(); got != tc.want {
			t.Errorf("%+v.Kind() = %q, want %q", tc.cfg, got, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "x", Version: "1"}, nil)
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // substring of the error; "" for valid
	}{
		{"stdio ok", Config{Name: "a", Stdio: &Stdio{Command: "x", Env: map[string]string{"K": "v"}}}, ""},
		{"http ok", Config{Name: "a", HTTP: &HTTP{URL: "https://h/mcp", Headers: map[string]string{"Authorization": "Bearer x"}}}, ""},
		{"sse ok", Config{Name: "a", SSE: &HTTP{URL: "http://h:1/sse"}}, ""},
		{"memory ok", Config{Name: "a", InMemory: &InMemory{Server: srv}}, ""},
		{"no name", Config{Stdio: &Stdio{Command: "x"}}, "no name"},
		{"none", Config{Name: "a"}, "no transport is set"},
		{"two", Config{Name: "a", Stdio: &Stdio{Command: "x"}, SSE: &HTTP{URL: "http://h"}}, "Stdio, SSE are all set"},
		{"no command", Config{Name: "a", Stdio: &Stdio{}}, "stdio: the command is empty"},
		{"bad env", Config{Name: "a", Stdio: &Stdio{Command: "x", Env: map[string]string{"A=B": "v"}}}, `environment variable name "A=B"`},
		{"nul env", Config{Name: "a", Stdio: &Stdio{Command: "x", Env: map[string]string{"A": "v\x00"}}}, "contains a NUL"},
		{"no url", Config{Name: "a", HTTP: &HTTP{}}, "http: the URL is empty"},
		{"bad url", Config{Name: "a", HTTP: &HTTP{URL: "http://[::1"}}, "http: the URL does not parse"},
		{"scheme", Config{Name: "a", SSE: &HTTP{URL: "ftp://h/x"}}, `sse: the URL's scheme is "ftp"`},
		{"no host", Config{Name: "a", HTTP: &HTTP{URL: "http:///x"}}, "no host"},
		{"bad header", Config{Name: "a", HTTP: &HTTP{URL: "http://h", Headers: map[string]string{"A B": "v"}}}, `header name "A B"`},
		{"header crlf", Config{Name: "a", HTTP: &HTTP{URL: "http://h", Headers: map[string]string{"A": "v\r\nB: c"}}}, "control character"},
		{"nil server", Config{Name: "a", InMemory: &InMemory{}}, "memory: the server is nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want it to contain %q", err, tc.want)
			}
			var e *Error
			if !errors.As(err, &e) || e.Op != OpConfig || e.Server != tc.cfg.Name {
				t.Fatalf("Validate = %#v, want an *Error with Op %q naming the server", err, OpConfig)
			}
			if !strings.HasPrefix(err.Error(), `mcp server "`+tc.cfg.Name+`": config: `) {
				t.Errorf("message %q does not name the server and the operation", err)
			}
		})
	}
}

func TestString(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{
			Config{Name: "fs", Stdio: &Stdio{Command: "/bin/srv", Args: []string{"--token", "s3cr3t"}, Env: map[string]string{"TOKEN": "s3cr3t", "A": "b"}, Dir: "/tmp"}},
			`stdio server "fs": command "/bin/srv" with 2 args, env A,TOKEN, dir "/tmp"`,
		},
		{
			Config{Name: "web", HTTP: &HTTP{URL: "https://user:pw@example.com:8443/mcp?key=s3cr3t&b=2#frag", Headers: map[string]string{"Authorization": "Bearer s3cr3t"}}},
			`http server "web": https://REDACTED@example.com:8443/mcp?b=REDACTED&key=REDACTED#REDACTED, headers Authorization`,
		},
		{
			Config{Name: "old", SSE: &HTTP{URL: "http://127.0.0.1:1/sse"}},
			`sse server "old": http://127.0.0.1:1/sse`,
		},
		{
			Config{Name: "mem", InMemory: &InMemory{}},
			`memory server "mem"`,
		},
		{
			Config{Name: "bad"},
			`invalid server "bad"`,
		},
		{
			Config{Name: "unparsable", HTTP: &HTTP{URL: "http://[::1"}},
			`http server "unparsable": (unparsable URL)`,
		},
	} {
		if got := tc.cfg.String(); got != tc.want {
			t.Errorf("String() =\n%s\nwant\n%s", got, tc.want)
		}
	}
}

func TestErrorMessage(t *testing.T) {
	cause := errors.New("boom")
	e := &Error{Server: "s", Op: OpCallTool, Tool: "echo", Err: cause}
	if got, want := e.Error(), `mcp server "s": call tool "echo": boom`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(e, cause) {
		t.Error("errors.Is does not see the cause")
	}
	e = &Error{Server: "s", Op: OpClose}
	if got, want := e.Error(), `mcp server "s": close`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestRedactorScrubs(t *testing.T) {
	cfg := Config{Name: "web", HTTP: &HTTP{
		URL:     "https://alice:pa55word@example.com/mcp?api_key=k3y+with/slash&x=1",
		Headers: map[string]string{"Authorization": "Bearer tok3n", "X-Short": "abc"},
	}}
	r := newRedactor(cfg)
	in := `Post "https://alice:***@example.com/mcp?api_key=k3y+with%2Fslash&x=1": said Bearer tok3n, ` +
		`raw https://alice:pa55word@example.com/mcp?api_key=k3y+with/slash&x=1, decoded "k3y with/slash", as written k3y+with/slash, abc`
	got := r.scrub(in)
	for _, secret := range []string{"alice", "pa55word", "k3y", "tok3n"} {
		if strings.Contains(got, secret) {
			t.Errorf("scrub left %q in %q", secret, got)
		}
	}
	// Secrets shorter than minSecret are not searched for in foreign text.
	if !strings.Contains(got, "abc") {
		t.Errorf("scrub removed a 3-byte value: %q", got)
	}
	if (*redactor)(nil).scrub("x") != "x" {
		t.Error("a nil redactor changed its input")
	}
}
