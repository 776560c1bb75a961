package mcpfsm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mcpfsm/mcpfsm/internal/testutil"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Tests of the features of the whole-client issue that the scenario tests leave out:
// the with-tools sampling handler, elicitation-complete, the connection-wide progress
// handler, a Manager's per-server handlers and roots, unsubscribing, the Manager's
// server-qualified requests, the refusal of requests the client did not advertise,
// cancellation, and a restore that fails.

// serverTransports are the test server over stdio (protocol 2026-07-28 and
// 2025-11-25) and streamable HTTP.
func serverTransports(t *testing.T) map[string]transport.Config {
	h := testserver.StartHTTP(t, testserver.Options{})
	return map[string]transport.Config{
		"stdio":      stdioConfig(t, testserver.Options{}),
		"stdio-2025": stdioConfig(t, testserver.Options{ProtocolVersions: []string{"2025-11-25"}}),
		"http":       httpConfig(h),
	}
}

// TestCreateMessageWithToolsDuringCall: a tool that asks for sampling during a call
// gets the answer of the with-tools handler (CreateMessageWithTools), which sees the
// server's prompt.
func TestCreateMessageWithToolsDuringCall(t *testing.T) {
	for name, cfg := range serverTransports(t) {
		t.Run(name, func(t *testing.T) {
			prompts := newSeen[string]()
			c := open(t, cfg, nil, func(o *Options) {
				o.Handlers.CreateMessageWithTools = func(_ context.Context, p *mcp.CreateMessageWithToolsParams) (*mcp.CreateMessageWithToolsResult, error) {
					if len(p.Messages) == 1 && len(p.Messages[0].Content) == 1 {
						if tc, ok := p.Messages[0].Content[0].(*mcp.TextContent); ok {
							prompts.add(tc.Text)
						}
					}
					return &mcp.CreateMessageWithToolsResult{Model: "test", Role: "assistant",
						Content: []mcp.Content{&mcp.TextContent{Text: "with tools: hi"}}}, nil
				}
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			text, err := c.callText(ctx, "sample", map[string]any{"prompt": "hello-tools"})
			if err != nil || text != "with tools: hi" {
				t.Fatalf("sample = %q, %v: want the with-tools handler's answer", text, err)
			}
			if got := prompts.all(); !slices.Equal(got, []string{"hello-tools"}) {
				t.Errorf("the handler saw prompts %q, want [hello-tools]", got)
			}
		})
	}
}

// TestElicitationCompleteDelivered: notifications/elicitation/complete reaches
// Handlers.ElicitationComplete with its elicitation ID.
func TestElicitationCompleteDelivered(t *testing.T) {
	for name, cfg := range serverTransports(t) {
		t.Run(name, func(t *testing.T) {
			ids := newSeen[string]()
			c := open(t, cfg, nil, func(o *Options) {
				o.Handlers.ElicitationComplete = func(_ context.Context, p *mcp.ElicitationCompleteParams) { ids.add(p.ElicitationID) }
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if text, err := c.callText(ctx, "elicit_complete", map[string]any{"id": "el-42"}); err != nil || text != "sent" {
				t.Fatalf("elicit_complete = %q, %v", text, err)
			}
			got := ids.waitFor(t, "elicitation/complete", func(got []string) bool { return len(got) >= 1 }, 10*time.Second)
			if !slices.Equal(got, []string{"el-42"}) {
				t.Errorf("ElicitationComplete saw %q, want [el-42]", got)
			}
		})
	}
}

// TestProgressHandlerWithoutCallback: a call that carries its own progress token, with
// no WithProgress callback, has its progress delivered to the connection-wide
// Handlers.Progress, token untouched.
func TestProgressHandlerWithoutCallback(t *testing.T) {
	for name, cfg := range serverTransports(t) {
		t.Run(name, func(t *testing.T) {
			type note struct {
				token    any
				progress float64
			}
			notes := newSeen[note]()
			c := open(t, cfg, nil, func(o *Options) {
				o.Handlers.Progress = func(_ context.Context, p *mcp.ProgressNotificationParams) {
					notes.add(note{p.ProgressToken, p.Progress})
				}
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			p := &mcp.CallToolParams{Name: "slow_progress", Arguments: map[string]any{"ms": 10, "steps": 3}}
			p.SetProgressToken("mine-1")
			res, err := c.CallTool(ctx, p)
			if err != nil || res.IsError {
				t.Fatalf("slow_progress: %+v, %v", res, err)
			}
			got := notes.waitFor(t, "three progress notifications", func(got []note) bool { return len(got) >= 3 }, 10*time.Second)
			want := []note{{"mine-1", 1}, {"mine-1", 2}, {"mine-1", 3}}
			if !slices.Equal(got, want) {
				t.Errorf("Handlers.Progress saw %v, want %v", got, want)
			}
		})
	}
}

// twoServers is a Go-built config of two test servers: one over stdio, one over
// streamable HTTP.
func twoServers(t *testing.T, stdio testserver.Options) *Config {
	h := testserver.StartHTTP(t, testserver.Options{})
	return &Config{Servers: []ServerConfig{
		{Name: "one", Transport: transport.Config{Name: "one", Stdio: &transport.Stdio{Command: testserver.Build(t), Args: testserver.Args(stdio)}}},
		{Name: "two", Transport: transport.Config{Name: "two", HTTP: &transport.HTTP{URL: h.URL()}}},
	}}
}

func newTestManager(t *testing.T, cfg *Config, opts ManagerOptions) *Manager {
	t.Helper()
	opts.Logger = quietLogger()
	m, err := NewManager(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return m
}

// managerText calls a tool of a Manager's server and returns its text.
func managerText(ctx context.Context, m *Manager, server, tool string, args any) (string, error) {
	res, err := m.CallTool(ctx, server, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return "", err
	}
	if res.IsError || len(res.Content) != 1 {
		return "", fmt.Errorf("%s.%s answered %+v", server, tool, res)
	}
	return res.Content[0].(*mcp.TextContent).Text, nil
}

func managerState(t *testing.T, ctx context.Context, m *Manager, server string) testserver.SessionState {
	t.Helper()
	res, err := m.CallTool(ctx, server, &mcp.CallToolParams{Name: "state"})
	if err != nil {
		t.Fatalf("%s state: %v", server, err)
	}
	st, err := testserver.State(res)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestManagerHandlersPerServer: ManagerOptions.Handlers gives each server its own
// handlers, by name: two servers (whose connections share one SDK client, their
// handlers being of one kind) each get their sampling answered by their own handler.
func TestManagerHandlersPerServer(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	m := newTestManager(t, twoServers(t, testserver.Options{}), ManagerOptions{
		Handlers: func(server string) Handlers {
			mu.Lock()
			asked = append(asked, server)
			mu.Unlock()
			return Handlers{CreateMessage: func(_ context.Context, p *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
				return &mcp.CreateMessageResult{Model: "test", Role: "assistant", Content: &mcp.TextContent{Text: "answered by " + server}}, nil
			}}
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, server := range []string{"one", "two", "one"} {
		if text, err := managerText(ctx, m, server, "sample", map[string]any{"prompt": "who?"}); err != nil || text != "answered by "+server {
			t.Errorf("%s sample = %q, %v: want its own handler's answer", server, text, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if slices.Sort(asked); !slices.Equal(asked, []string{"one", "two"}) {
		t.Errorf("Handlers was asked for %v, want each server once", asked)
	}
	m.mu.Lock()
	clients := len(m.clients)
	m.mu.Unlock()
	if clients != 1 {
		t.Errorf("%d SDK clients for two connections of one kind, want 1 (shared)", clients)
	}
}

// TestManagerRoots: ManagerOptions.Roots reach every server (each lists them), and
// Manager.SetRoots reaches every session: each server hears roots/list_changed and
// then lists the new roots. A Manager's connection refuses SetRoots of its own.
func TestManagerRoots(t *testing.T) {
	m := newTestManager(t, twoServers(t, testserver.Options{ProtocolVersions: []string{"2025-11-25"}}), ManagerOptions{
		Roots: []*mcp.Root{{URI: "file:///a", Name: "a"}},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	servers := []string{"one", "two"}
	for _, server := range servers {
		if text, err := managerText(ctx, m, server, "roots", nil); err != nil || text != `["file:///a"]` {
			t.Fatalf("%s roots = %q, %v", server, text, err)
		}
	}
	if err := m.SetRoots(&mcp.Root{URI: "file:///a", Name: "a"}, &mcp.Root{URI: "file:///b", Name: "b"}); err != nil {
		t.Fatal(err)
	}
	for _, server := range servers {
		deadline := time.Now().Add(10 * time.Second)
		for managerState(t, ctx, m, server).RootsListChanged == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s never heard roots/list_changed", server)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if text, err := managerText(ctx, m, server, "roots", nil); err != nil || text != `["file:///a","file:///b"]` {
			t.Errorf("%s roots after SetRoots = %q, %v", server, text, err)
		}
		if got := m.Conn(server).Roots(); len(got) != 2 {
			t.Errorf("%s Conn.Roots = %v", server, got)
		}
		if err := m.Conn(server).SetRoots(); err == nil {
			t.Errorf("%s: SetRoots on a Manager's connection succeeded", server)
		}
	}
}

// subscriber is what TestUnsubscribeNotRestored drives: a Conn, or a Manager's
// server.
type subscriber struct {
	subscribe, unsubscribe func(ctx context.Context, uri string) error
	call                   func(ctx context.Context, tool string, args any) (string, error)
	conn                   func() *conn
}

// TestUnsubscribeNotRestored: Conn.Unsubscribe and Manager.Unsubscribe reach the
// server, and a later session does not subscribe again: after a reconnect only the
// remaining subscription is restored (and reported updated once), the cancelled one
// gets no ResourceUpdated, and the new session's server never saw a subscribe to it.
func TestUnsubscribeNotRestored(t *testing.T) {
	for _, how := range []string{"conn", "manager"} {
		for _, proto := range []string{"2025-11-25", ""} {
			name := how + "-" + proto
			if proto == "" {
				name = how + "-latest"
			}
			t.Run(name, func(t *testing.T) {
				opts := testserver.Options{}
				if proto != "" {
					opts.ProtocolVersions = []string{proto}
				}
				updated := newSeen[string]()
				onUpdate := func(_ context.Context, p *mcp.ResourceUpdatedNotificationParams) { updated.add(p.URI) }
				var s subscriber
				if how == "conn" {
					c := open(t, stdioConfig(t, opts), nil, func(o *Options) { o.Handlers.ResourceUpdated = onUpdate })
					s = subscriber{
						subscribe: func(ctx context.Context, uri string) error { return c.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}) },
						unsubscribe: func(ctx context.Context, uri string) error {
							return c.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri})
						},
						call: c.callText,
						conn: func() *conn { return c },
					}
				} else {
					cfg := &Config{Servers: []ServerConfig{{Name: "srv", Transport: stdioConfig(t, opts)}}}
					cfg.Servers[0].Transport.Name = "srv"
					p := *fastPolicies()
					cfg.Servers[0].Policies = p
					m := newTestManager(t, cfg, ManagerOptions{Handlers: func(string) Handlers { return Handlers{ResourceUpdated: onUpdate} }})
					s = subscriber{
						subscribe: func(ctx context.Context, uri string) error {
							return m.Subscribe(ctx, "srv", &mcp.SubscribeParams{URI: uri})
						},
						unsubscribe: func(ctx context.Context, uri string) error {
							return m.Unsubscribe(ctx, "srv", &mcp.UnsubscribeParams{URI: uri})
						},
						call: func(ctx context.Context, tool string, args any) (string, error) {
							return managerText(ctx, m, "srv", tool, args)
						},
						conn: func() *conn { return &conn{Conn: m.Conn("srv"), t: t} },
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				a, b := testserver.ResourceA, testserver.ResourceB
				for _, uri := range []string{a, b} {
					if err := s.subscribe(ctx, uri); err != nil {
						t.Fatal(err)
					}
				}
				if err := s.unsubscribe(ctx, a); err != nil {
					t.Fatal(err)
				}
				c := s.conn()
				if got := c.Subscriptions(); !slices.Equal(got, []string{b}) {
					t.Fatalf("Subscriptions after unsubscribing %s = %v", a, got)
				}
				// The server saw it: only b is subscribed, touching a reaches nobody.
				serverSubs := func() []string {
					t.Helper()
					text, err := s.call(ctx, "state", nil)
					if err != nil {
						t.Fatal(err)
					}
					var st testserver.SessionState
					if err := json.Unmarshal([]byte(text), &st); err != nil {
						t.Fatal(err)
					}
					return st.Subscriptions
				}
				waitSubs := func(what string) {
					t.Helper()
					deadline := time.Now().Add(10 * time.Second)
					for got := serverSubs(); !slices.Equal(got, []string{b}); got = serverSubs() {
						if time.Now().After(deadline) {
							t.Fatalf("%s: the server's subscriptions are %v, want [%s]", what, got, b)
						}
						time.Sleep(20 * time.Millisecond)
					}
				}
				waitSubs("after Unsubscribe")
				if n, err := s.call(ctx, "touch", map[string]any{"uri": a}); err != nil || n != "0" {
					t.Errorf("touch %s after Unsubscribe: %q sessions subscribed, %v", a, n, err)
				}
				first := c.session()
				c.Reconnect()
				c.waitNewSession(first, 20*time.Second)
				waitSubs("after the reconnect")
				text, err := s.call(ctx, "state", nil)
				if err != nil {
					t.Fatal(err)
				}
				var st testserver.SessionState
				if err := json.Unmarshal([]byte(text), &st); err != nil {
					t.Fatal(err)
				}
				if slices.Contains(st.Subscribed, a) {
					t.Errorf("the new session was subscribed to %s again: %v", a, st.Subscribed)
				}
				// The gap's update for b, and real ones for b, but none for a.
				updated.waitFor(t, "the gap's update", func(got []string) bool { return count(got, b) >= 1 }, 10*time.Second)
				if n, err := s.call(ctx, "touch", map[string]any{"uri": a}); err != nil || n != "0" {
					t.Errorf("touch %s after the reconnect: %q sessions subscribed, %v", a, n, err)
				}
				if n, err := s.call(ctx, "touch", map[string]any{"uri": b}); err != nil || n != "1" {
					t.Errorf("touch %s after the reconnect: %q sessions subscribed, %v", b, n, err)
				}
				got := updated.waitFor(t, "a new update", func(got []string) bool { return count(got, b) >= 2 }, 10*time.Second)
				if count(got, a) != 0 || count(got, b) != 2 {
					t.Errorf("updates %v: want none for %s and two for %s (the gap's, then the touch's)", got, a, b)
				}
			})
		}
	}
}

// collectSeq gathers an iterator's items, failing t on an error.
func collectSeq[T any](t *testing.T, what string, seq iter.Seq2[T, error], key func(T) string) []string {
	t.Helper()
	var out []string
	for it, err := range seq {
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		out = append(out, key(it))
	}
	slices.Sort(out)
	return out
}

// TestManagerRequests: the Manager's server-qualified requests reach the named server,
// and no other: two in-memory test servers, each changed differently (a tool, a
// prompt, a resource added, a resource touched) answer their own lists and reads,
// in the list forms and the iterator forms; an unknown server is ErrUnknownServer.
func TestManagerRequests(t *testing.T) {
	mem := func(name string) ServerConfig {
		return ServerConfig{Name: name, Transport: transport.Config{Name: name, InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}}}
	}
	m := newTestManager(t, &Config{Servers: []ServerConfig{mem("x"), mem("y")}}, ManagerOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, change := range []struct{ server, tool string }{{"x", "change_tools"}, {"x", "change_prompts"}, {"y", "change_resources"}} {
		if _, err := managerText(ctx, m, change.server, change.tool, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := managerText(ctx, m, "x", "touch", map[string]any{"uri": testserver.ResourceA}); err != nil {
		t.Fatal(err)
	}
	toolName := func(x *mcp.Tool) string { return x.Name }
	promptName := func(x *mcp.Prompt) string { return x.Name }
	resourceURI := func(x *mcp.Resource) string { return x.URI }
	templateURI := func(x *mcp.ResourceTemplate) string { return x.URITemplate }
	for _, server := range []string{"x", "y"} {
		wantExtraTool, wantPrompts, wantResources := server == "x", []string{testserver.PromptGreet}, []string{testserver.ResourceA, testserver.ResourceB}
		if server == "x" {
			wantPrompts = []string{testserver.PromptExtra, testserver.PromptGreet}
		} else {
			wantResources = []string{testserver.ResourceA, testserver.ResourceB, testserver.ResourceExtra}
		}
		// Tools.
		lt, err := m.ListTools(ctx, server, nil)
		if err != nil {
			t.Fatal(err)
		}
		var listed []string
		for _, tool := range lt.Tools {
			listed = append(listed, tool.Name)
		}
		slices.Sort(listed)
		iterated := collectSeq(t, server+" Tools", m.Tools(ctx, server, nil), toolName)
		if !slices.Equal(listed, iterated) || slices.Contains(listed, "extra") != wantExtraTool || !slices.Contains(listed, "echo") {
			t.Errorf("%s tools: listed %v, iterated %v (extra wanted: %v)", server, listed, iterated, wantExtraTool)
		}
		// Prompts.
		lp, err := m.ListPrompts(ctx, server, nil)
		if err != nil {
			t.Fatal(err)
		}
		listed = nil
		for _, p := range lp.Prompts {
			listed = append(listed, p.Name)
		}
		slices.Sort(listed)
		if iterated := collectSeq(t, server+" Prompts", m.Prompts(ctx, server, nil), promptName); !slices.Equal(listed, wantPrompts) || !slices.Equal(iterated, wantPrompts) {
			t.Errorf("%s prompts: listed %v, iterated %v, want %v", server, listed, iterated, wantPrompts)
		}
		gp, err := m.GetPrompt(ctx, server, &mcp.GetPromptParams{Name: testserver.PromptGreet, Arguments: map[string]string{"name": server}})
		if err != nil || len(gp.Messages) != 1 || gp.Messages[0].Content.(*mcp.TextContent).Text != "Hello, "+server+"!" {
			t.Errorf("%s GetPrompt = %+v, %v", server, gp, err)
		}
		_, err = m.GetPrompt(ctx, server, &mcp.GetPromptParams{Name: testserver.PromptExtra})
		if (err == nil) != (server == "x") {
			t.Errorf("%s GetPrompt(extra), added on x only: %v", server, err)
		}
		// Resources and templates.
		lr, err := m.ListResources(ctx, server, nil)
		if err != nil {
			t.Fatal(err)
		}
		listed = nil
		for _, r := range lr.Resources {
			listed = append(listed, r.URI)
		}
		slices.Sort(listed)
		if iterated := collectSeq(t, server+" Resources", m.Resources(ctx, server, nil), resourceURI); !slices.Equal(listed, wantResources) || !slices.Equal(iterated, wantResources) {
			t.Errorf("%s resources: listed %v, iterated %v, want %v", server, listed, iterated, wantResources)
		}
		lrt, err := m.ListResourceTemplates(ctx, server, nil)
		if err != nil || len(lrt.ResourceTemplates) != 1 || lrt.ResourceTemplates[0].URITemplate != testserver.ItemTemplate {
			t.Errorf("%s ListResourceTemplates = %+v, %v", server, lrt, err)
		}
		if got := collectSeq(t, server+" ResourceTemplates", m.ResourceTemplates(ctx, server, nil), templateURI); !slices.Equal(got, []string{testserver.ItemTemplate}) {
			t.Errorf("%s ResourceTemplates = %v", server, got)
		}
		wantA := "a v0"
		if server == "x" {
			wantA = "a v1" // touched on x only
		}
		rr, err := m.ReadResource(ctx, server, &mcp.ReadResourceParams{URI: testserver.ResourceA})
		if err != nil || len(rr.Contents) != 1 || rr.Contents[0].Text != wantA {
			t.Errorf("%s ReadResource(a) = %+v, %v, want %q", server, rr, err, wantA)
		}
		comp, err := m.Complete(ctx, server, &mcp.CompleteParams{
			Ref:      &mcp.CompleteReference{Type: "ref/resource", URI: testserver.ItemTemplate},
			Argument: mcp.CompleteParamsArgument{Name: "id", Value: "ap"},
		})
		if err != nil || !slices.Equal(comp.Completion.Values, []string{"apple", "apricot"}) {
			t.Errorf("%s Complete = %+v, %v", server, comp, err)
		}
		if err := m.Ping(ctx, server, nil); err != nil {
			t.Errorf("%s Ping: %v", server, err)
		}
	}
	if err := m.SetLoggingLevel(ctx, "y", &mcp.SetLoggingLevelParams{Level: "error"}); err != nil {
		t.Fatal(err)
	}
	if x, y := managerState(t, ctx, m, "x").LogLevel, managerState(t, ctx, m, "y").LogLevel; x != "" || y != "error" {
		t.Errorf("levels after SetLoggingLevel(y, error): x %q, y %q", x, y)
	}
	// An unknown server, in every form.
	unknown := map[string]error{}
	_, unknown["ListTools"] = m.ListTools(ctx, "z", nil)
	_, unknown["ListPrompts"] = m.ListPrompts(ctx, "z", nil)
	_, unknown["GetPrompt"] = m.GetPrompt(ctx, "z", &mcp.GetPromptParams{Name: "greet"})
	_, unknown["ListResources"] = m.ListResources(ctx, "z", nil)
	_, unknown["ListResourceTemplates"] = m.ListResourceTemplates(ctx, "z", nil)
	_, unknown["ReadResource"] = m.ReadResource(ctx, "z", &mcp.ReadResourceParams{URI: testserver.ResourceA})
	_, unknown["Complete"] = m.Complete(ctx, "z", &mcp.CompleteParams{})
	unknown["Unsubscribe"] = m.Unsubscribe(ctx, "z", &mcp.UnsubscribeParams{URI: testserver.ResourceA})
	for _, err := range m.Tools(ctx, "z", nil) {
		unknown["Tools"] = err
	}
	for _, err := range m.Prompts(ctx, "z", nil) {
		unknown["Prompts"] = err
	}
	for _, err := range m.Resources(ctx, "z", nil) {
		unknown["Resources"] = err
	}
	for _, err := range m.ResourceTemplates(ctx, "z", nil) {
		unknown["ResourceTemplates"] = err
	}
	if len(unknown) != 12 {
		t.Errorf("%d forms tried, want 12", len(unknown))
	}
	for form, err := range unknown {
		if !errors.Is(err, ErrUnknownServer) {
			t.Errorf("%s of an unknown server: %v", form, err)
		}
	}
}

// TestUnadvertisedRequestsRefused: a server that asks a client for what it did not
// advertise (elicitation, sampling, roots: no handler, no roots) gets method-not-found
// from the client itself (refuseUnadvertised), not an invalid-params error, an empty
// list or a hang. (The SDK rewrites the message of any -32601 answer to its own
// "method not found: <method>", so the code is what tells.)
// The SDK's server checks the client's capabilities before it sends, so the server
// here is the test server's hand-written JSON-RPC one (-raw), which sends them anyway.
// The same server gets an answer from a client that has the handler.
func TestUnadvertisedRequestsRefused(t *testing.T) {
	cfg := transport.Config{Name: "raw", Stdio: &transport.Stdio{Command: testserver.Build(t), Args: []string{"-raw"}}}
	ask := func(t *testing.T, c *conn, method string) map[string]any {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		text, err := c.callText(ctx, "ask", map[string]any{"method": method})
		if err != nil {
			t.Fatalf("ask %s: %v\n%s", method, err, c.timeline())
		}
		var answer map[string]any
		if err := json.Unmarshal([]byte(text), &answer); err != nil {
			t.Fatalf("ask %s: the client's answer is %q", method, text)
		}
		return answer
	}
	plain := open(t, cfg, nil, nil)
	for _, method := range []string{"elicitation/create", "sampling/createMessage", "roots/list"} {
		answer := ask(t, plain, method)
		e, _ := answer["error"].(map[string]any)
		code, _ := e["code"].(float64)
		if code != -32601 {
			t.Errorf("%s to a client that did not advertise it: answered %v, want method-not-found (-32601) from the client", method, answer)
		}
	}
	able := open(t, cfg, nil, func(o *Options) {
		o.Handlers.Elicit = func(context.Context, *mcp.ElicitParams) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "decline"}, nil
		}
	})
	answer := ask(t, able, "elicitation/create")
	if r, _ := answer["result"].(map[string]any); r == nil || r["action"] != "decline" {
		t.Errorf("elicitation/create to a client with a handler: answered %v, want its handler's decline", answer)
	}
}

// TestCancelSendsCancelledAndDoesNotCount: a call whose context is cancelled while the
// server runs it returns at once with the context's error, the server receives
// notifications/cancelled (and the slow tool ends early), and the connection counts
// nothing: same session, still ready, no failures, no transition.
func TestCancelSendsCancelledAndDoesNotCount(t *testing.T) {
	for name, cfg := range serverTransports(t) {
		t.Run(name, func(t *testing.T) {
			c := open(t, cfg, nil, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := c.WaitReady(ctx); err != nil {
				t.Fatal(err)
			}
			session, trs := c.session(), len(c.transitions())
			cctx, ccancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				_, err := c.CallTool(cctx, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"ms": 20000}})
				done <- err
			}()
			c.waitServerCalls("slow", 1, 10*time.Second)
			start := time.Now()
			ccancel()
			var err error
			select {
			case err = <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("the cancelled call did not return within 5s")
			}
			if took := time.Since(start); !errors.Is(err, context.Canceled) || took > 2*time.Second {
				t.Errorf("the cancelled call: %v after %v, want context.Canceled at once", err, took)
			}
			// The server counts what it receives (stats): it got the notification.
			deadline := time.Now().Add(10 * time.Second)
			for {
				res, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "stats"})
				if err != nil {
					t.Fatal(err)
				}
				stats, err := testserver.Stats(res)
				if err != nil {
					t.Fatal(err)
				}
				if stats["notifications/cancelled"] == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the server received %d notifications/cancelled, want 1", stats["notifications/cancelled"])
				}
				time.Sleep(20 * time.Millisecond)
			}
			if st := c.Status(); st.State != states.Ready || st.Failures != 0 || c.session() != session {
				t.Errorf("after the cancel: state %s, %d failures, session %d (was %d)", st.State, st.Failures, c.session(), session)
			}
			for _, tr := range c.transitions()[trs:] {
				if tr.Cause != states.CauseNone {
					t.Errorf("a transition with a cause after the cancel: %v", tr)
				}
				if tr.To != states.Ready && tr.To != states.Probing {
					t.Errorf("the connection moved after the cancel: %v", tr)
				}
			}
		})
	}
}

// TestRestoreRefusedSubscriptionDropped: a subscription the restarted server refuses
// (the resource it was to has gone) does not keep the connection down: the new session
// comes up without it, the other subscription is restored, the dropped resource is
// reported updated once (so that the handler's read finds out), and Subscriptions no
// longer lists it.
func TestRestoreRefusedSubscriptionDropped(t *testing.T) {
	// Over streamable HTTP (2025-11-25: resources/subscribe answered with an error),
	// and over stdio (2026-07-28: subscriptions/listen answered with an error, which
	// the SDK drops unread and the session's connection sees).
	h := testserver.StartHTTP(t, testserver.Options{})
	for _, tc := range []struct {
		name    string
		cfg     transport.Config
		restart func(c *conn)
	}{
		{"http", httpConfig(h), func(*conn) { h.Restart(true) }}, // a new server, without the extra resource
		{"stdio", stdioConfig(t, testserver.Options{}), func(c *conn) { // a new child, without it
			_, _ = c.CallTool(context.Background(), &mcp.CallToolParams{Name: "crash"})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			updates := make(chan string, 16)
			// No probe: one answered resets the failures counted (the connection
			// healthy again), which a loaded machine let happen before the count
			// below was read.
			pol := fastPolicies()
			pol.KeepaliveInterval = 0
			c := open(t, tc.cfg, pol, func(o *Options) {
				o.Handlers.ResourceUpdated = func(_ context.Context, p *mcp.ResourceUpdatedNotificationParams) { updates <- p.URI }
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if text, err := c.callText(ctx, "change_resources", nil); err != nil || text != "added "+testserver.ResourceExtra {
				t.Fatalf("change_resources = %q, %v", text, err)
			}
			for _, uri := range []string{testserver.ResourceA, testserver.ResourceExtra} {
				if err := c.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
					t.Fatal(err)
				}
			}
			first := c.current.Load()
			tc.restart(c)
			c.waitFor(func(states.State) bool { s := c.current.Load(); return s != nil && s != first }, 20*time.Second)
			if err := c.WaitReady(ctx); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{testserver.ResourceA}, c.Subscriptions()); diff != "" {
				t.Errorf("Subscriptions after the restart (-want +got):\n%s", diff)
			}
			got := map[string]int{}
			for len(got) < 2 {
				select {
				case uri := <-updates:
					got[uri]++
				case <-ctx.Done():
					t.Fatalf("updates after the restart: %v", got)
				}
			}
			if got[testserver.ResourceA] != 1 || got[testserver.ResourceExtra] != 1 {
				t.Errorf("updates after the restart: %v, want one each", got)
			}
			if _, err := c.ReadResource(ctx, &mcp.ReadResourceParams{URI: testserver.ResourceExtra}); err == nil {
				t.Error("the dropped resource reads without error")
			}
			if st := c.sessionState(ctx); !slices.Equal(st.Subscriptions, []string{testserver.ResourceA}) {
				t.Errorf("the new session is subscribed to %v", st.Subscriptions)
			}
			if st := c.Status(); st.Failures != 1 {
				t.Errorf("%d failures counted, want 1 (the restart's)", st.Failures)
			}
		})
	}
}

// TestRestoreFailureFailsTheNewSession: a restore that fails other than by the server's
// refusal (here every subscribe answered 503 by a proxy, after the server forgot its
// sessions) fails the new session: it never becomes the one calls use, and the failure
// names what could not be restored, in the transitions, the Status and the error of a
// call. Unsubscribing, with no session up, forgets the subscription at once, and the
// next session comes up.
func TestRestoreFailureFailsTheNewSession(t *testing.T) {
	var failSubscribe atomic.Bool
	h := testserver.StartHTTP(t, testserver.Options{})
	target, err := url.Parse(h.URL())
	if err != nil {
		t.Fatal(err)
	}
	inner := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && failSubscribe.Load() {
			b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			if bytes.Contains(b, []byte(`"resources/subscribe"`)) {
				http.Error(w, "overloaded", http.StatusServiceUnavailable)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	pol := fastPolicies()
	pol.BreakerThreshold = 1000 // it keeps trying
	c := open(t, transport.Config{Name: "s", HTTP: &transport.HTTP{URL: srv.URL + "/mcp"}}, pol, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Subscribe(ctx, &mcp.SubscribeParams{URI: testserver.ResourceA}); err != nil {
		t.Fatal(err)
	}
	before := len(c.transitions())
	failSubscribe.Store(true)
	h.Restart(true) // the session is lost; the next one's restore fails
	const why = `restoring the subscription to "` + testserver.ResourceA + `"`
	c.waitFor(func(states.State) bool {
		for _, tr := range c.transitions()[before:] {
			if tr.Trigger == states.ConnectFailed.String() {
				return c.current.Load() == nil
			}
		}
		return false
	}, 20*time.Second)
	failed := 0
	for _, tr := range c.transitions()[before:] {
		if tr.Trigger == states.ConnectFailed.String() {
			failed++
			if tr.Err == nil || !strings.Contains(tr.Err.Error(), why) {
				t.Errorf("a connect failed for another reason: %v", tr)
			}
		}
	}
	if failed == 0 {
		t.Errorf("no connect failed\n%s", c.timeline())
	}
	t.Logf("the failure: %v", c.Status().LastFailure)
	if st := c.Status(); st.LastFailure == nil || !strings.Contains(st.LastFailure.Message, why) {
		t.Errorf("status after the failed restores: %+v", st.LastFailure)
	}
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = c.CallTool(short, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}})
	cancelShort()
	if err == nil || !strings.Contains(err.Error(), why) {
		t.Errorf("a call with no session: %v, want the restore's failure named", err)
	}
	if err := c.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: testserver.ResourceA}); err != nil {
		t.Fatalf("Unsubscribe with no session: %v", err)
	}
	if err := c.WaitReady(ctx); err != nil {
		t.Fatalf("after the unsubscribe: %v\n%s", err, c.timeline())
	}
	if subs := c.Subscriptions(); len(subs) != 0 {
		t.Errorf("Subscriptions = %v", subs)
	}
}

// TestConnWithoutALogger: a connection opened without Options.Logger logs to
// slog.Default(), as its doc says. It logged through the nil logger, and the
// first record of a kind the connection logs itself (a subscription the new
// session refused on a restore, the log level refused, a listen's end) was a nil
// pointer's panic: the process died.
func TestConnWithoutALogger(t *testing.T) {
	var logs testutil.SyncBuffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	h := testserver.StartHTTP(t, testserver.Options{})
	pol := fastPolicies()
	pol.KeepaliveInterval = 0
	c := open(t, httpConfig(h), pol, func(o *Options) { o.Logger = nil })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if text, err := c.callText(ctx, "change_resources", nil); err != nil || text != "added "+testserver.ResourceExtra {
		t.Fatalf("change_resources = %q, %v", text, err)
	}
	if err := c.Subscribe(ctx, &mcp.SubscribeParams{URI: testserver.ResourceExtra}); err != nil {
		t.Fatal(err)
	}
	first := c.current.Load()
	h.Restart(true) // a new server, without the resource: the restore's subscribe is refused
	c.waitFor(func(states.State) bool { s := c.current.Load(); return s != nil && s != first }, 20*time.Second)
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "refused a subscription") {
		t.Errorf("slog.Default() got no record of the refused subscription:\n%s", logs.String())
	}
}
