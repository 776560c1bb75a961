package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcpfsm/mcpfsm/internal/authtest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testServer serves the scenarios' tools over streamable HTTP. addNumbers is the
// add_numbers tool, or nil for a server without it.
func testServer(t *testing.T, addNumbers mcp.ToolHandler) (url string, open opener) {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "scenario-server", Version: "0"}, nil)
	empty := map[string]any{"type": "object"}
	if addNumbers != nil {
		s.AddTool(&mcp.Tool{Name: "add_numbers", InputSchema: empty}, addNumbers)
	}
	s.AddTool(&mcp.Tool{Name: "test_reconnection", InputSchema: empty},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text("reconnected"), nil
		})
	s.AddTool(&mcp.Tool{Name: "test_client_elicitation_defaults", InputSchema: empty},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{
				Message: "name?",
				RequestedSchema: map[string]any{
					"type":       "object",
					"properties": map[string]any{"name": map[string]any{"type": "string", "default": "Ada"}},
				},
			})
			if err != nil {
				return nil, err
			}
			if res.Action != "accept" {
				return &mcp.CallToolResult{IsError: true, Content: text("not accepted: " + res.Action).Content}, nil
			}
			return text(fmt.Sprint(res.Content["name"])), nil
		})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	tr := &http.Transport{}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv.URL, openConn(&http.Client{Transport: tr})
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func addNumbers(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	return text("8"), nil
}

func env(scenario, cc string) func(string) string {
	return func(k string) string {
		switch k {
		case "MCP_CONFORMANCE_SCENARIO":
			return scenario
		case "MCP_CONFORMANCE_CONTEXT":
			return cc
		}
		return ""
	}
}

// captureLog sends slog's default logger to a buffer for the test.
func captureLog(t *testing.T) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	return &buf
}

// The four scenarios run in CI pass against a server with their tools, through the
// session interface and the raw go-sdk adapter.
func TestCoreScenarios(t *testing.T) {
	url, open := testServer(t, addNumbers)
	for _, name := range []string{"initialize", "tools_call", "elicitation-sep1034-client-defaults", "sse-retry"} {
		t.Run(name, func(t *testing.T) {
			log := captureLog(t)
			if got := run(t.Context(), []string{url}, env(name, ""), open); got != 0 {
				t.Fatalf("run = %d, want 0; log:\n%s", got, log)
			}
		})
	}
}

// A scenario fails (status 1) when its tool is missing or its tool reports an error:
// the client does not claim to have run a scenario it did not.
func TestToolsCallFails(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler mcp.ToolHandler
		want    string
	}{
		{"missing", nil, "is not listed"},
		{"tool error", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{IsError: true, Content: text("overflow").Content}, nil
		}, "the tool failed: overflow"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, open := testServer(t, tc.handler)
			log := captureLog(t)
			if got := run(t.Context(), []string{url}, env("tools_call", ""), open); got != 1 {
				t.Fatalf("run = %d, want 1", got)
			}
			if !strings.Contains(log.String(), tc.want) {
				t.Errorf("log does not say %q:\n%s", tc.want, log)
			}
		})
	}
}

// Usage errors exit 2 without opening a session, and a context that cannot be parsed
// is not echoed (it carries client secrets).
func TestUsage(t *testing.T) {
	noOpen := func(context.Context, string, options) (session, error) {
		t.Error("a session was opened")
		return nil, fmt.Errorf("not here")
	}
	const secret = "s3cr3t-value"
	for _, tc := range []struct {
		name string
		args []string
		env  func(string) string
	}{
		{"no url", nil, env("initialize", "")},
		{"no scenario", []string{"http://127.0.0.1:1/"}, env("", "")},
		{"unknown scenario", []string{"http://127.0.0.1:1/"}, env("no-such-scenario", "")},
		{"bad context", []string{"http://127.0.0.1:1/"}, env("auth/pre-registration", `{"client_secret":"`+secret)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := captureLog(t)
			if got := run(t.Context(), tc.args, tc.env, noOpen); got != 2 {
				t.Fatalf("run = %d, want 2", got)
			}
			if strings.Contains(log.String(), secret) {
				t.Errorf("the log shows the context's secret:\n%s", log)
			}
		})
	}
}

// The auth scenarios configure every registration the go-sdk supports, and use
// pre-registered credentials exactly when the suite's context gives both parts.
func TestAuthOptions(t *testing.T) {
	for _, tc := range []struct {
		cc      string
		wantPre bool
	}{
		{``, false},
		{`{"name":"auth/pre-registration","client_id":"id","client_secret":"pw"}`, true},
		{`{"client_id":"id"}`, false},
	} {
		var got *oauthConfig
		capture := func(_ context.Context, _ string, opts options) (session, error) {
			got = opts.OAuth
			return nil, fmt.Errorf("stop here")
		}
		captureLog(t)
		if code := run(t.Context(), []string{"http://127.0.0.1:1/mcp"}, env("auth/metadata-default", tc.cc), capture); code != 1 {
			t.Fatalf("context %s: run = %d, want 1 (the opener fails)", tc.cc, code)
		}
		if got == nil {
			t.Fatalf("context %s: no OAuth configuration", tc.cc)
		}
		if got.ClientIDMetadataURL != clientIDMetadataURL || got.Registration == nil || got.Fetch == nil || got.RedirectURL == "" {
			t.Errorf("context %s: incomplete OAuth configuration %+v", tc.cc, got)
		}
		if (got.Preregistered != nil) != tc.wantPre {
			t.Errorf("context %s: pre-registered = %v, want %v", tc.cc, got.Preregistered != nil, tc.wantPre)
		}
		if tc.wantPre && (got.Preregistered.ClientID != "id" || got.Preregistered.ClientSecretAuth.ClientSecret != "pw") {
			t.Errorf("context %s: pre-registered credentials not taken from the context", tc.cc)
		}
	}
}

// An auth scenario runs through the connection against a protected server on
// loopback: discovery, dynamic registration, PKCE, the code read from the redirect,
// then the tools; and with the pre-registered client the context gives.
func TestAuthScenarioThroughConn(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts authtest.Options
		cc   string
	}{
		{"dynamic registration", authtest.Options{Scopes: []string{"mcp"}}, ""},
		{"pre-registration", authtest.Options{NoRegistration: true, ClientID: "pre-id", ClientSecret: "pre-secret"},
			`{"client_id":"pre-id","client_secret":"pre-secret"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms := mcp.NewServer(&mcp.Implementation{Name: "protected", Version: "0"}, nil)
			ms.AddTool(&mcp.Tool{Name: "test-tool", InputSchema: map[string]any{"type": "object"}},
				func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return text("ok"), nil })
			t.Cleanup(func() { authtest.CloseSessions(ms) })
			srv := authtest.New(tc.opts, authtest.Streamable(ms)).Start(t)
			log := captureLog(t)
			if got := run(t.Context(), []string{srv.MCPURL()}, env("auth/metadata-default", tc.cc), openConn(nil)); got != 0 {
				t.Fatalf("run = %d, want 0; log:\n%s", got, log)
			}
			if n := srv.Authorizations.Load(); n != 1 {
				t.Errorf("%d authorizations, want 1", n)
			}
			if strings.Contains(log.String(), "pre-secret") {
				t.Errorf("the log shows the client secret:\n%s", log)
			}
		})
	}
}
