package mcpfsm_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// managerConfig writes a config into a temp dir and parses it.
func managerConfig(t *testing.T, text string) *mcpfsm.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "servers.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := mcpfsm.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// events collects a Manager's merged stream.
type events struct {
	mu  sync.Mutex
	got map[string][]machine.Transition
}

func (e *events) observe(server string, tr machine.Transition) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.got == nil {
		e.got = map[string][]machine.Transition{}
	}
	e.got[server] = append(e.got[server], tr)
}

func (e *events) count(server string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.got[server])
}

func newManager(t *testing.T, cfg *mcpfsm.Config, ev *events) *mcpfsm.Manager {
	t.Helper()
	return openManager(t, cfg, mcpfsm.ManagerOptions{Observer: ev.observe})
}

// openManager makes a Manager of cfg with opts (logging nothing), closed at cleanup.
func openManager(t *testing.T, cfg *mcpfsm.Config, opts mcpfsm.ManagerOptions) *mcpfsm.Manager {
	t.Helper()
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	m, err := mcpfsm.NewManager(cfg, opts)
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

// texter returns a function that takes a call's results and returns its text, failing
// t on an error.
func texter(t *testing.T) func(*mcp.CallToolResult, error) string {
	return func(res *mcp.CallToolResult, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return res.Content[0].(*mcp.TextContent).Text
	}
}

func TestManager(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{Name: "http-one"})
	cfg := managerConfig(t, fmt.Sprintf(`version: 1
servers:
  local:
    command: %s
  remote:
    url: %s
`, testserver.Build(t), h.URL()))
	ev := &events{}
	m := newManager(t, cfg, ev)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	text := texter(t)
	if got := text(m.Call(ctx, "local.echo", map[string]any{"text": "a"})); got != "a" {
		t.Errorf("local.echo = %q", got)
	}
	if got := text(m.CallTool(ctx, "remote", &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "b"}})); got != "b" {
		t.Errorf("remote echo = %q", got)
	}
	if _, err := m.Call(ctx, "nowhere.echo", nil); !errors.Is(err, mcpfsm.ErrUnknownServer) {
		t.Errorf("call to an unknown server = %v", err)
	}
	if _, err := m.Call(ctx, "echo", nil); err == nil {
		t.Error("an unqualified name was accepted")
	}
	names := map[string]bool{}
	for _, tool := range m.Listed() {
		names[tool.Name] = true
	}
	if !names["local.counter"] || !names["remote.counter"] {
		t.Errorf("qualified tools = %v", names)
	}
	if ev.count("local") < 2 || ev.count("remote") < 2 {
		t.Errorf("the merged stream lacks transitions: %d local, %d remote", ev.count("local"), ev.count("remote"))
	}
	if st := m.States(); st["local"] != states.Ready || st["remote"] != states.Ready {
		t.Errorf("states = %v", st)
	}
	if fmt.Sprint(m.Servers()) != "[local remote]" {
		t.Errorf("servers = %v", m.Servers())
	}
}

// TestManagerReload changes a config in every way at once and checks what each server
// went through.
func TestManagerReload(t *testing.T) {
	one := testserver.StartHTTP(t, testserver.Options{Name: "one"})
	two := testserver.StartHTTP(t, testserver.Options{Name: "two"})
	bin := testserver.Build(t)
	dir := t.TempDir()
	spec := filepath.Join(dir, "lifecycle.yaml")
	if err := os.WriteFile(spec, mcpfsm.DefaultSpecYAML(), 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(text string) *mcpfsm.Config {
		path := filepath.Join(dir, "servers.yaml")
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := mcpfsm.LoadConfig(path)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	before := write(fmt.Sprintf(`version: 1
servers:
  same: {url: %[1]s}
  moves: {url: %[1]s}
  tuned: {url: %[1]s}
  respec: {url: %[1]s, spec: lifecycle.yaml}
  gone: {command: %[2]s}
`, one.URL(), bin))
	ev := &events{}
	m := newManager(t, before, ev)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	text := texter(t)
	for _, s := range []string{"same", "moves", "tuned", "respec"} {
		for range 2 {
			text(m.CallTool(ctx, s, &mcp.CallToolParams{Name: "counter", Arguments: nil}))
		}
	}
	gone := m.Conn("gone")
	if err := gone.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	respecOld := m.Conn("respec")
	// The lifecycle file changes (one policy default) and everything else does too.
	if err := os.WriteFile(spec, []byte(strings.Replace(string(mcpfsm.DefaultSpecYAML()), "default: 10s", "default: 11s", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	after := write(fmt.Sprintf(`version: 1
servers:
  same: {url: %[1]s}
  moves: {url: %[2]s}
  tuned: {url: %[1]s, policies: {keepalive_interval: 7s}}
  respec: {url: %[1]s, spec: lifecycle.yaml}
  new: {command: %[3]s}
`, one.URL(), two.URL(), bin))
	sameBefore := ev.count("same")
	tunedBefore := ev.count("tuned")
	res, err := m.Reload(ctx, after)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := res.String(), "added new; removed gone; reconnected moves, respec; retuned tuned; unchanged same"; got != want {
		t.Errorf("reload = %q, want %q", got, want)
	}
	if gone.State() != states.Closed || m.Conn("gone") != nil {
		t.Errorf("a removed server is %s", gone.State())
	}
	// Untouched: the same session, the counter goes on, no transition.
	if got := text(m.CallTool(ctx, "same", &mcp.CallToolParams{Name: "counter", Arguments: nil})); got != "3" || ev.count("same") != sameBefore {
		t.Errorf("an unchanged server: counter %s, %d new transitions", got, ev.count("same")-sameBefore)
	}
	// Policies alone: adopted, and the same session.
	tuned := m.Conn("tuned")
	if got := text(m.CallTool(ctx, "tuned", &mcp.CallToolParams{Name: "counter", Arguments: nil})); got != "3" {
		t.Errorf("a retuned server lost its session: counter %s", got)
	}
	if p := tuned.Policies(); p.KeepaliveInterval != 7*time.Second || ev.count("tuned") != tunedBefore {
		t.Errorf("retuned: keepalive %v, %d new transitions", p.KeepaliveInterval, ev.count("tuned")-tunedBefore)
	}
	// Transport changed: the next call reaches the new server, on a new session.
	if got := text(m.CallTool(ctx, "moves", &mcp.CallToolParams{Name: "counter", Arguments: nil})); got != "1" || two.Count("tools/call") == 0 {
		t.Errorf("a moved server: counter %s, calls at the new server %d", got, two.Count("tools/call"))
	}
	// Lifecycle changed: a new connection with the new spec.
	respec := m.Conn("respec")
	if respec == respecOld || respecOld.State() != states.Closed || respec.Policies().ConnectTimeout != 11*time.Second {
		t.Errorf("a server whose lifecycle changed was not given a new connection")
	}
	if got := text(m.Call(ctx, "new.echo", map[string]any{"text": "hi"})); got != "hi" {
		t.Errorf("new.echo = %q", got)
	}
}

// memServer is an in-memory server config, as an embedder builds one in Go.
func memServer(name string) mcpfsm.ServerConfig {
	return mcpfsm.ServerConfig{Name: name, Transport: transport.Config{
		Name: name, InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{Name: name})},
	}}
}

// TestManagerGoBuiltConfig: a Config built in Go leaves Policies zero ("the spec's
// defaults") and sets Spec directly. Reload must keep the defaults across a transport
// change (it once installed all-zero policies, sending the connection straight to
// breaker-open), must see a changed Spec (it once compared only the spec's file and
// text, which a Go-built config does not have), and, like NewManager, must refuse a
// server named twice (the first connection would be left open, out of reach).
func TestManagerGoBuiltConfig(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m := newManager(t, &mcpfsm.Config{Servers: []mcpfsm.ServerConfig{memServer("a")}}, &events{})
	if err := m.Conn("a").WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	want := mcpfsm.DefaultSpec().Defaults()
	if got := m.Conn("a").Policies(); got != want {
		t.Fatalf("policies before reload:\n%s", cmp.Diff(want, got))
	}

	moved := memServer("a") // another server: a transport change
	res, err := m.Reload(ctx, &mcpfsm.Config{Servers: []mcpfsm.ServerConfig{moved}})
	if err != nil || len(res.Reconnected) != 1 {
		t.Fatalf("reload of a transport change: %s, %v", res, err)
	}
	c := m.Conn("a")
	if got := c.Policies(); got != want {
		t.Errorf("policies after reloading a transport change (-want +got):\n%s", cmp.Diff(want, got))
	}
	if _, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}}); err != nil {
		t.Errorf("call after reload: %v (state %s)", err, c.State())
	}

	other, err := mcpfsm.LoadSpec("other.yaml", []byte(strings.Replace(string(mcpfsm.DefaultSpecYAML()), "default: 10s", "default: 11s", 1)))
	if err != nil {
		t.Fatal(err)
	}
	moved.Spec = other
	if res, err := m.Reload(ctx, &mcpfsm.Config{Servers: []mcpfsm.ServerConfig{moved}}); err != nil || len(res.Reconnected) != 1 {
		t.Fatalf("reload of a spec change: %s, %v", res, err)
	}
	if m.Conn("a").Spec() != other {
		t.Error("after reloading a new Spec, the connection still runs the old one")
	}
	if got := m.Conn("a").Policies(); got != other.Defaults() {
		t.Errorf("policies after a spec change (-want +got):\n%s", cmp.Diff(other.Defaults(), got))
	}

	twice := &mcpfsm.Config{Servers: []mcpfsm.ServerConfig{memServer("b"), memServer("b")}}
	if _, err := m.Reload(ctx, twice); err == nil || !strings.Contains(err.Error(), `server "b" is named twice`) {
		t.Errorf("Reload of a server named twice: err = %v", err)
	}
	if m.Conn("a") == nil || m.Conn("b") != nil {
		t.Error("a refused Reload changed the servers")
	}
	if _, err := mcpfsm.NewManager(twice, mcpfsm.ManagerOptions{}); err == nil || !strings.Contains(err.Error(), `server "b" is named twice`) {
		t.Errorf("NewManager of a server named twice: err = %v", err)
	}
	unnamed := &mcpfsm.Config{Servers: []mcpfsm.ServerConfig{memServer("")}}
	if _, err := mcpfsm.NewManager(unnamed, mcpfsm.ManagerOptions{}); err == nil || !strings.Contains(err.Error(), `server 1: name ""`) {
		t.Errorf("NewManager of an unnamed server: err = %v", err)
	}
}

// TestManagerReloadToDeadServerKeepsSession: a reload that moves a server to an address
// where nothing answers says so, and the old session serves on.
func TestManagerReloadToDeadServerKeepsSession(t *testing.T) {
	one := testserver.StartHTTP(t, testserver.Options{Name: "one"})
	dead := testserver.StartHTTP(t, testserver.Options{Name: "dead"})
	dead.Stop()
	m := newManager(t, managerConfig(t, fmt.Sprintf("version: 1\nservers:\n  moves: {url: %s}\n", one.URL())), &events{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	text := texter(t)
	text(m.CallTool(ctx, "moves", &mcp.CallToolParams{Name: "counter", Arguments: nil}))
	res, err := m.Reload(ctx, managerConfig(t, fmt.Sprintf("version: 1\nservers:\n  moves: {url: %s}\n", dead.URL())))
	if err == nil || !strings.Contains(err.Error(), "reconnecting moves: the new config did not connect, the old session serves on") || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("Reload error = %v, want one that says the move failed and why", err)
	}
	if got := res.String(); got != "reconnected moves" {
		t.Errorf("reload = %q", got)
	}
	if got := text(m.CallTool(ctx, "moves", &mcp.CallToolParams{Name: "counter", Arguments: nil})); got != "2" {
		t.Errorf("after a failed move the counter says %s, want 2 (the old session)", got)
	}
}

// TestManagerReloadDuringConnect: a server whose old address hangs is being connected
// (on the old config) when Reload moves it to a live server. The old attempt's failure
// (connecting → backing-off) once counted as the new config's; Reload must wait for an
// attempt with the new config, and report success when it connects.
func TestManagerReloadDuringConnect(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepting := make(chan struct{})
	accepted := make(chan struct{}, 1)
	defer func() { ln.Close(); <-accepting }()
	go func() { // accept and never answer
		defer close(accepting)
		var held []net.Conn
		for {
			c, err := ln.Accept()
			if err != nil {
				for _, c := range held {
					c.Close()
				}
				return
			}
			held = append(held, c)
			select {
			case accepted <- struct{}{}:
			default:
			}
		}
	}()
	live := testserver.StartHTTP(t, testserver.Options{Name: "live"})
	pol := "    policies: {connect_timeout: 1s, backoff_base: 1m}\n"
	m := newManager(t, managerConfig(t, fmt.Sprintf("version: 1\nservers:\n  moves:\n    url: http://%s/mcp\n%s", ln.Addr(), pol)), &events{})
	select { // the connect to the hanging address is under way
	case <-accepted:
	case <-time.After(20 * time.Second):
		t.Fatal("the connection never dialed the hanging address")
	}
	if st := m.Conn("moves").State(); st != states.Connecting {
		t.Fatalf("state %v, want connecting", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = m.Reload(ctx, managerConfig(t, fmt.Sprintf("version: 1\nservers:\n  moves:\n    url: %s\n%s", live.URL(), pol)))
	if st := m.Conn("moves").State(); err != nil || st != states.Ready || live.Count("tools/list") == 0 {
		t.Errorf("Reload = %v, state after %s, tools/list at the new server %d; want the move done\n%v",
			err, st, live.Count("tools/list"), m.Conn("moves").History())
	}
}

// bothVersions is the config of two servers of the test server over HTTP: "new" on
// 2026-07-28 (stateless), "old" pinned to 2025-11-25 (sessions).
func bothVersions(t *testing.T) *mcpfsm.Config {
	t.Helper()
	stateless := testserver.StartHTTP(t, testserver.Options{Stateless: true})
	sessions := testserver.StartHTTP(t, testserver.Options{})
	return managerConfig(t, fmt.Sprintf(`version: 1
servers:
  new:
    url: %s
  old:
    url: %s
    protocol: 2025-11-25
`, stateless.URL(), sessions.URL()))
}

// inputCallKey marks the context of a call in TestManagerServerRequestsThroughMiddleware.
type inputCallKey struct{}

// TestManagerServerRequestsThroughMiddleware: what a server asks during a call goes
// through the Manager's receiving middleware on every protocol version: as requests
// on 2025-11-25, as input requests inside the call's answer on 2026-07-28, where the
// middleware gets the call's context (and so can tell which call asks). An
// elicitation's answer is checked against its form on both.
func TestManagerServerRequestsThroughMiddleware(t *testing.T) {
	cfg := bothVersions(t)
	answer := map[string]any{"answer": "yes"}
	var mu sync.Mutex
	m := openManager(t, cfg, mcpfsm.ManagerOptions{
		Roots: []*mcp.Root{{URI: "file:///manager"}},
		Handlers: func(string) mcpfsm.Handlers {
			return mcpfsm.Handlers{Elicit: func(context.Context, *mcp.ElicitParams) (*mcp.ElicitResult, error) {
				mu.Lock()
				defer mu.Unlock()
				return &mcp.ElicitResult{Action: "accept", Content: answer}, nil
			}}
		},
	})
	type seen struct{ server, method, call string }
	var got []seen
	m.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method != "roots/list" && method != "elicitation/create" {
				return next(ctx, method, req)
			}
			server, _ := mcpfsm.ServerName(ctx)
			call, _ := ctx.Value(inputCallKey{}).(string)
			mu.Lock()
			got = append(got, seen{server, method, call})
			mu.Unlock()
			if method == "roots/list" {
				return &mcp.ListRootsResult{Roots: []*mcp.Root{{URI: "file:///middleware"}}}, nil
			}
			return next(ctx, method, req)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	text := texter(t)
	for _, server := range []string{"new", "old"} {
		cctx := context.WithValue(ctx, inputCallKey{}, server+" call")
		if roots := text(m.CallTool(cctx, server, &mcp.CallToolParams{Name: "roots"})); roots != `["file:///middleware"]` {
			t.Errorf("%s: the server got the roots %s, want the middleware's", server, roots)
		}
		if res := text(m.CallTool(cctx, server, &mcp.CallToolParams{Name: "elicit", Arguments: map[string]any{"message": "?"}})); !strings.Contains(res, `accept {"answer":"yes"}`) {
			t.Errorf("%s: elicit answered %q", server, res)
		}
	}
	want := []seen{
		{"new", "roots/list", "new call"}, {"new", "elicitation/create", "new call"},
		{"old", "roots/list", ""}, {"old", "elicitation/create", ""}, // a request of the server's: the call's context is not its
	}
	mu.Lock()
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(seen{})); diff != "" {
		t.Errorf("what the middleware saw (-want +got):\n%s", diff)
	}
	answer = map[string]any{"answer": 5} // not the form's string
	mu.Unlock()
	for _, server := range []string{"new", "old"} {
		res, err := m.CallTool(ctx, server, &mcp.CallToolParams{Name: "elicit", Arguments: map[string]any{"message": "?"}})
		var msg string
		if err != nil {
			msg = err.Error()
		} else if res.IsError {
			msg = res.Content[0].(*mcp.TextContent).Text
		}
		if !strings.Contains(msg, "does not match requested schema") {
			t.Errorf("%s: an answer not of the form's schema: %+v, %v", server, res, err)
		}
	}
}

// TestManagerMiddlewarePanics: a receiving middleware that panics on what a server
// sends fails that request, on both protocol versions (the call that made it fails),
// and the process and the connections live on; it ended the process, on the go-sdk's
// goroutine for the request.
func TestManagerMiddlewarePanics(t *testing.T) {
	cfg := bothVersions(t)
	m := openManager(t, cfg, mcpfsm.ManagerOptions{Roots: []*mcp.Root{{URI: "file:///manager"}}})
	m.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "roots/list" {
				panic("the middleware broke")
			}
			return next(ctx, method, req)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	text := texter(t)
	for _, server := range []string{"new", "old"} {
		res, err := m.CallTool(ctx, server, &mcp.CallToolParams{Name: "roots"})
		var msg string
		if err != nil {
			msg = err.Error()
		} else if res.IsError {
			msg = res.Content[0].(*mcp.TextContent).Text
		}
		if !strings.Contains(msg, "the client's middleware on roots/list failed (it panicked)") || strings.Contains(msg, "the middleware broke") {
			t.Errorf("%s: a call whose roots the middleware panicked on: %+v, %v", server, res, err)
		}
		if got := text(m.CallTool(ctx, server, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "alive"}})); got != "alive" {
			t.Errorf("%s: after the panic, echo = %q", server, got)
		}
	}
}
