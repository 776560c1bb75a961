package mcpfsm

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// cutBound is how soon a server must see a call cancelled once the close of its
// session began: generous, for a loaded machine.
const cutBound = 2 * time.Second

// A cutServer is a test server for the tests of calls cut by a close, with told,
// which says whether the server was told that the held call id was cancelled: over
// HTTP its journal tool's handler saw the cancel ("cancelled ID" in its journal);
// over stdio its stdin carried notifications/cancelled before it ended (recorded on
// the way by tee: the go-sdk's server may take a cancel that its stdin's end
// follows at once for that end, as it cancels a request on a goroutine of its own).
type cutServer struct {
	name    string // its transport and protocol version
	version string // the protocol version it must negotiate
	cfg     transport.Config
	journal string
	told    func(t *testing.T, id string) bool
}

// cutServers are the test server over stdio on 2025-11-25 and 2026-07-28, and over
// streamable HTTP, stateful (2025-11-25) and stateless (2026-07-28, its handlers
// cancelled as their POST ends: the go-sdk's server does so only with
// PropagateRequestCancellation).
func cutServers(t *testing.T) []cutServer {
	dir := t.TempDir()
	j := func(name string) string { return filepath.Join(dir, name) }
	overStdio := func(name, version string, opts testserver.Options) cutServer {
		opts.Journal = j(name)
		stdin := j(name + ".stdin")
		cfg := stdioConfig(t, opts)
		cfg.Stdio.Args = append([]string{"-c", `tee "$0" | "$@"`, stdin, cfg.Stdio.Command}, cfg.Stdio.Args...)
		cfg.Stdio.Command = "sh"
		return cutServer{name, version, cfg, opts.Journal, func(t *testing.T, _ string) bool {
			b, err := os.ReadFile(stdin)
			if err != nil {
				t.Fatal(err)
			}
			return strings.Contains(string(b), `"method":"notifications/cancelled"`)
		}}
	}
	overHTTP := func(name, version string, cfg transport.Config) cutServer {
		srv := cutServer{name: name, version: version, cfg: cfg, journal: j(name)}
		srv.told = func(t *testing.T, id string) bool { return journalCount(t, srv, "cancelled "+id) > 0 }
		return srv
	}
	h25 := httpConfig(testserver.StartHTTP(t, testserver.Options{Journal: j("http-2025-11-25")}))
	srv26 := testserver.New(testserver.Options{Journal: j("http-2026-07-28")})
	hs26 := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv26 },
		&mcp.StreamableHTTPOptions{Stateless: true, PropagateRequestCancellation: true}))
	t.Cleanup(hs26.Close)
	return []cutServer{
		overStdio("stdio-2025-11-25", "2025-11-25", testserver.Options{ProtocolVersions: []string{"2025-11-25"}}),
		overStdio("stdio-2026-07-28", "2026-07-28", testserver.Options{}),
		overHTTP("http-2025-11-25", "2025-11-25", h25),
		overHTTP("http-2026-07-28", "2026-07-28", transport.Config{Name: "http-server", HTTP: &transport.HTTP{URL: hs26.URL}}),
	}
}

// cutPolicies: a teardown bound long enough that a close forced at its end is not
// taken for a quick one.
func cutPolicies() *machine.Policies {
	p := fastPolicies()
	p.TeardownTimeout = 5 * time.Second
	p.KeepaliveInterval = 0 // no probe: the calls are the only traffic
	return p
}

// heldCall is a call of the journal tool, held by the server for a minute, in flight.
type heldCall struct {
	id   string
	done chan error
}

// hold starts a held call of id through call, and returns once the server runs it.
func hold(t *testing.T, srv cutServer, id string, call func(context.Context, *mcp.CallToolParams) (*mcp.CallToolResult, error)) *heldCall {
	t.Helper()
	h := &heldCall{id: id, done: make(chan error, 1)}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := call(ctx, &mcp.CallToolParams{Name: "journal", Arguments: map[string]any{"id": id, "ms": 60_000}})
		h.done <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); journalCount(t, srv, id) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: the call never reached the server", srv.name)
		}
	}
	return h
}

func journalCount(t *testing.T, srv cutServer, key string) int {
	t.Helper()
	runs, err := testserver.ReadJournal(srv.journal)
	if err != nil {
		t.Fatal(err)
	}
	return runs[key]
}

// cancelledWithin checks that the server was told the held call was cancelled
// within cutBound of since.
func (h *heldCall) cancelledWithin(t *testing.T, srv cutServer, since time.Time) {
	t.Helper()
	for !srv.told(t, h.id) {
		if time.Since(since) > cutBound {
			t.Errorf("%s: the server was not told the call %s was cancelled within %v of the close", srv.name, h.id, cutBound)
			return
		}
		time.Sleep(5 * time.Millisecond) // polling what the server saw: no event to await
	}
}

// cutError checks that the held call failed as one our own close cut: an artifact,
// the connection closed under it, which the server may have run (it is not
// idempotent: not sent again), and not a cancel of its caller's.
func (h *heldCall) cutError(t *testing.T, srv cutServer) {
	t.Helper()
	var err error
	select {
	case err = <-h.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: the held call did not return", srv.name)
	}
	var ce *CallError
	switch {
	case err == nil:
		t.Errorf("%s: the held call succeeded", srv.name)
	case !errors.As(err, &ce) || ce.Cause != states.CauseArtifact || ce.Retried:
		t.Errorf("%s: the held call: %v, want a CallError of our own close, not retried", srv.name, err)
	case !errors.Is(err, ErrMayHaveRun) || !errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, context.Canceled):
		t.Errorf("%s: the held call: %v, want the connection closed under it, which may have run it (not a cancel of its caller's)", srv.name, err)
	}
}

// TestCloseCancelsCallsInFlight: a connection closed with a call in flight cancels
// it before it closes its session, so that the server is told (notifications/
// cancelled; on 2026-07-28 over HTTP the call's POST ends), over stdio and streamable
// HTTP on both protocol versions; the close returns within its bound (at once, the
// server having stopped the call), and the caller gets the error of a call our own
// close cut. (The calls were broken by the close instead: a stdio server saw its
// stdin end, an HTTP server on 2025-11-25 ran the call on, and held the session's
// DELETE, so that the close took its whole bound and was forced.)
func TestCloseCancelsCallsInFlight(t *testing.T) {
	for _, srv := range cutServers(t) {
		t.Run(srv.name, func(t *testing.T) {
			c := open(t, srv.cfg, cutPolicies(), nil)
			c.waitState("ready", 10*time.Second)
			if info, _ := c.Server(); info.ProtocolVersion != srv.version {
				t.Fatalf("negotiated %q, want %q", info.ProtocolVersion, srv.version)
			}
			h := hold(t, srv, "close", c.CallTool)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			if err := c.Close(ctx); err != nil {
				t.Errorf("Close: %v", err)
			}
			if took := time.Since(start); took > cutPolicies().TeardownTimeout/2 {
				t.Errorf("Close took %v: the server was not told of the call, and held the close", took.Round(time.Millisecond))
			}
			h.cancelledWithin(t, srv, start)
			h.cutError(t, srv)
		})
	}
}

// TestRetireCancelsCallsInFlight: a session replaced by a planned reconnect whose
// call outlives its drain window is closed with the call cancelled first: the server
// is told, and the call fails as one our own close cut (not sent again: it may have
// run); the new session serves on.
func TestRetireCancelsCallsInFlight(t *testing.T) {
	for _, srv := range cutServers(t) {
		t.Run(srv.name, func(t *testing.T) {
			pol := cutPolicies()
			pol.DrainTimeout = time.Second // half of it to drain, half to close
			c := open(t, srv.cfg, pol, nil)
			c.waitState("ready", 10*time.Second)
			h := hold(t, srv, "retire", c.CallTool)
			start := time.Now()
			c.Reconnect()
			h.cancelledWithin(t, srv, start)
			h.cutError(t, srv)
			c.waitState("ready", 10*time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if got, err := c.callText(ctx, "echo", map[string]any{"text": "after"}); err != nil || got != "after" {
				t.Errorf("a call on the new session: %q, %v", got, err)
			}
		})
	}
}

// TestReloadRemovingAServerCancelsItsCalls: a Manager's Reload that removes a server
// with a call in flight has the call cancelled on the server before the connection
// closes, and returns without waiting for the server to end the call (its
// teardown_timeout, before).
func TestReloadRemovingAServerCancelsItsCalls(t *testing.T) {
	for _, srv := range cutServers(t) {
		t.Run(srv.name, func(t *testing.T) {
			pol := *cutPolicies()
			keep := ServerConfig{Name: "keep", Transport: transport.Config{Name: "keep", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}}, Policies: pol}
			gone := ServerConfig{Name: "gone", Transport: srv.cfg, Policies: pol}
			m, err := NewManager(&Config{Servers: []ServerConfig{keep, gone}}, ManagerOptions{Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			t.Cleanup(func() { _ = m.Close(ctx) })
			if err := m.Conn("gone").WaitReady(ctx); err != nil {
				t.Fatal(err)
			}
			h := hold(t, srv, "reload", func(ctx context.Context, p *mcp.CallToolParams) (*mcp.CallToolResult, error) {
				return m.CallTool(ctx, "gone", p)
			})
			start := time.Now()
			res, err := m.Reload(ctx, &Config{Servers: []ServerConfig{keep}})
			if err != nil || len(res.Removed) != 1 {
				t.Fatalf("Reload: %v, %v", res, err)
			}
			if took := time.Since(start); took > pol.TeardownTimeout/2 {
				t.Errorf("the Reload took %v: the server was not told of the call, and held the close", took.Round(time.Millisecond))
			}
			h.cancelledWithin(t, srv, start)
			h.cutError(t, srv)
		})
	}
}

// TestCloseCancelsARelistInFlight: a re-list (after the server said its tools
// changed) still running when the connection closes is cancelled before the close,
// as a call is (cutCalls), over streamable HTTP on 2025-11-25: the server is told,
// and the close returns at once. (It ran under a context of its own, ended only by
// its 10 s bound: the close was made under it, the server ran the listing on and
// held the session's DELETE, and the close took its whole bound.)
func TestCloseCancelsARelistInFlight(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "relist", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "one"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{}, nil, nil
	})
	var lists atomic.Int32
	held, told, ended := make(chan struct{}), make(chan struct{}), make(chan struct{})
	srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "tools/list" && lists.Add(1) == 2 { // the re-list: held until cancelled
				close(held)
				select {
				case <-ctx.Done():
					close(told)
				case <-ended: // the test's end: for the server's close
				}
				return nil, ctx.Err()
			}
			return next(ctx, method, req)
		}
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	t.Cleanup(func() { close(ended) }) // before hs.Close
	pol := cutPolicies()
	c := open(t, transport.Config{Name: "relist", HTTP: &transport.HTTP{URL: hs.URL}, ProtocolVersion: "2025-11-25"}, pol, nil)
	c.waitState("ready", 10*time.Second)
	mcp.AddTool(srv, &mcp.Tool{Name: "two"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{}, nil, nil
	}) // notifications/tools/list_changed
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the server's list_changed brought no re-list")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := c.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
	if took := time.Since(start); took > pol.TeardownTimeout/2 {
		t.Errorf("Close took %v: the re-list in flight was not cancelled, and held the close", took.Round(time.Millisecond))
	}
	select {
	case <-told:
	case <-time.After(cutBound):
		t.Errorf("the server was not told the re-list was cancelled within %v", cutBound)
	}
}

// TestCallInFlightWhenTheSessionBreaks: a call in flight on a session found broken
// (its stdio server frozen: the probe times out) is cut by the teardown that follows
// (cutCalls), and fails as lost, saying that the session broke with it in flight,
// not that it was cancelled on the server: a server that broke may hear of nothing.
// (The cut's error said "the session was closed with the request in flight (it was
// cancelled on the server)", as for a close of our own.)
func TestCallInFlightWhenTheSessionBreaks(t *testing.T) {
	c := open(t, stdioConfig(t, testserver.Options{}), fastPolicies(), nil) // probes every 300 ms
	c.waitState("ready", 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	text, err := c.callText(ctx, "pid", nil)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(text)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	done := make(chan error, 1)
	go func() {
		_, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "hold", Arguments: map[string]any{"ms": 60_000}})
		done <- err
	}()
	for st := c.Status(); st.Session == nil || st.Session.InFlight == 0; st = c.Status() {
		time.Sleep(5 * time.Millisecond) // the call is sent: no event says so
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	select {
	case err = <-done:
	case <-ctx.Done():
		t.Fatal("the call did not return once its session broke")
	}
	var ce *CallError
	switch {
	case !errors.As(err, &ce) || ce.Cause != states.CauseLost && ce.Cause != states.CauseTimeout:
		t.Errorf("the call: %v, want a CallError of the broken session", err)
	case strings.Contains(err.Error(), "cancelled on the server") || !strings.Contains(err.Error(), "the session broke with the request in flight"):
		t.Errorf("the call: %v, want it said that the session broke with it in flight", err)
	case !errors.Is(err, ErrMayHaveRun) || !errors.Is(err, mcp.ErrConnectionClosed):
		t.Errorf("the call: %v, want the connection closed under it, which may have run it", err)
	}
}
