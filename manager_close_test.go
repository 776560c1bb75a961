package mcpfsm

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestManagerCloseDoesNotBlockRequests: Manager.Close holds the Manager's lock
// while its connections close (up to teardown_timeout each, and more), and every
// request takes that lock, without its context, to find its connection. A request made
// meanwhile, with a short deadline, waits for the whole close: a call that hangs past
// its context. (Status, Servers, Conn and Reload block the same way.)
func TestManagerCloseDoesNotBlockRequests(t *testing.T) {
	pol := *fastPolicies()
	pol.TeardownTimeout = 3 * time.Second // the server ignores the close: the teardown takes all of it
	cfg := &Config{Servers: []ServerConfig{{
		Name: "hangs", Transport: stdioConfig(t, testserver.Options{HangClose: true}), Policies: pol,
	}}}
	m, err := NewManager(cfg, ManagerOptions{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Conn("hangs").WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	c := m.Conn("hangs")
	closed := make(chan error, 1)
	go func() { closed <- m.Close(ctx) }()
	// Close has taken the lock once the connection starts tearing down.
	for c.State() != "tearing-down" {
		select {
		case <-ctx.Done():
			t.Fatal("the connection never started closing")
		case <-time.After(time.Millisecond):
		}
	}
	start := time.Now()
	cctx, ccancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer ccancel()
	_, err = m.CallTool(cctx, "hangs", &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}})
	took := time.Since(start)
	if !errors.Is(err, ErrClosed) && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a call during Close: %v, want ErrClosed or its deadline", err)
	}
	if took > time.Second {
		t.Errorf("a call with a 200ms deadline returned after %s, blocked by Manager.Close", took.Round(time.Millisecond))
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}

// TestReloadKeepsSessionState: a Reload that changes a server's lifecycle spec
// gives it a new Conn, and requests through the Manager follow it; but what the user
// established through the Manager (subscriptions, the log level) stays with the old
// Conn, which is closed: the new one never subscribes, and the updates stop, though
// the Manager's Subscribe promises they are kept across reconnects.
func TestReloadKeepsSessionState(t *testing.T) {
	bbm, err := LoadSpecFile("docs/lifecycles/break-before-make.yaml")
	if err != nil {
		t.Fatal(err)
	}
	srv := testserver.New(testserver.Options{})
	cfgWith := func(spec *machine.Spec, file string) *Config {
		return &Config{Servers: []ServerConfig{{
			Name: "mem", Transport: transport.Config{Name: "mem", InMemory: &transport.InMemory{Server: srv}},
			Spec: spec, SpecFile: file, Policies: *fastPolicies(),
		}}}
	}
	m, err := NewManager(cfgWith(DefaultSpec(), ""), ManagerOptions{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Subscribe(ctx, "mem", &mcp.SubscribeParams{URI: testserver.ResourceA}); err != nil {
		t.Fatal(err)
	}
	if err := m.SetLoggingLevel(ctx, "mem", &mcp.SetLoggingLevelParams{Level: "warning"}); err != nil {
		t.Fatal(err)
	}
	res, err := m.Reload(ctx, cfgWith(bbm, "docs/lifecycles/break-before-make.yaml"))
	if err != nil || len(res.Reconnected) != 1 {
		t.Fatalf("Reload = %v, %v; want mem reconnected", res, err)
	}
	c := m.Conn("mem")
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if subs := c.Subscriptions(); len(subs) != 1 || subs[0] != testserver.ResourceA {
		t.Errorf("after a Reload that changed the spec, the connection's subscriptions are %q, want [%s]", subs, testserver.ResourceA)
	}
	out, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "state"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := testserver.State(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Subscriptions) != 1 {
		t.Errorf("the new connection's session is subscribed to %q, want [%s]", st.Subscriptions, testserver.ResourceA)
	}
}

// TestManagerCloseWaitsForReloadsDrops: a Reload whose context ends returns while the
// servers it removed are still closing; Manager.Close waits for those too, as it does
// for its current ones (it once returned at once, leaving a child and its goroutines
// alive for the removed server's teardown timeout). And a nil config is an error, not
// a panic.
func TestManagerCloseWaitsForReloadsDrops(t *testing.T) {
	if _, err := NewManager(nil, ManagerOptions{}); err == nil {
		t.Error("NewManager(nil): no error")
	}
	pol := *fastPolicies()
	pol.TeardownTimeout = 3 * time.Second
	hang := ServerConfig{Name: "hangs", Transport: stdioConfig(t, testserver.Options{HangClose: true}), Policies: pol}
	hang.Transport.Name = "hangs"
	mem := ServerConfig{Name: "mem", Transport: transport.Config{Name: "mem", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}}, Policies: pol}
	m, err := NewManager(&Config{Servers: []ServerConfig{hang, mem}}, ManagerOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hc := m.Conn("hangs")
	if err := hc.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Reload(ctx, nil); err == nil {
		t.Error("Reload(nil): no error")
	}
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	if _, err := m.Reload(short, &Config{Servers: []ServerConfig{mem}}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Reload with a short context: %v, want its deadline (the removed server hangs in close)", err)
	}
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if st := hc.State(); st != states.Closed {
		t.Errorf("Manager.Close returned while the removed connection is %s", st)
	}
}

// TestReloadMovesRequestsInFlight: a Reload that changes a server's lifecycle spec
// closes its old connection at once, breaking the requests in flight on it. Those
// that are safe to send again (a subscribe, an idempotent tool) are sent on the new
// connection, as after any session that broke under them; one that may have run is
// not. (They once failed with "not retried: machine closed", and a Subscribe that
// failed so was never made on the new connection.)
func TestReloadMovesRequestsInFlight(t *testing.T) {
	gate := make(chan struct{})
	began := make(chan string, 16)
	var runs sync.Map // tool or URI → *atomic.Int32
	hold := func(what string) {
		n, _ := runs.LoadOrStore(what, new(atomic.Int32))
		if n.(*atomic.Int32).Add(1) > 1 {
			return // the second time, on the new connection: at once
		}
		began <- what
		<-gate // a server that goes on when its client is gone
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "held"}, &mcp.ServerOptions{
		SubscribeHandler: func(_ context.Context, r *mcp.SubscribeRequest) error {
			hold(r.Params.URI)
			return nil
		},
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
	})
	srv.AddResource(&mcp.Resource{URI: "test://held", Name: "held"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{}, nil
	})
	for _, tool := range []struct {
		name       string
		idempotent bool
	}{{"same", true}, {"bump", false}} {
		srv.AddTool(&mcp.Tool{Name: tool.name, InputSchema: &jsonschema.Schema{Type: "object"}, Annotations: &mcp.ToolAnnotations{IdempotentHint: tool.idempotent}},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				hold(tool.name)
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil
			})
	}
	other, err := LoadSpec("other.yaml", DefaultSpecYAML())
	if err != nil {
		t.Fatal(err)
	}
	cfgWith := func(spec *machine.Spec) *Config {
		return &Config{Servers: []ServerConfig{{
			Name: "held", Transport: transport.Config{Name: "held", InMemory: &transport.InMemory{Server: srv}},
			Spec: spec, Policies: *fastPolicies(),
		}}}
	}
	m, err := NewManager(cfgWith(DefaultSpec()), ManagerOptions{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	subscribed := make(chan error, 1)
	go func() { subscribed <- m.Subscribe(ctx, "held", &mcp.SubscribeParams{URI: "test://held"}) }()
	called := map[string]chan error{}
	for _, tool := range []string{"same", "bump"} {
		called[tool] = make(chan error, 1)
		go func() {
			_, err := m.CallTool(ctx, "held", &mcp.CallToolParams{Name: tool})
			called[tool] <- err
		}()
	}
	for range 3 {
		select {
		case <-began:
		case <-ctx.Done():
			t.Fatal("the requests never reached the server")
		}
	}
	if res, err := m.Reload(ctx, cfgWith(other)); err != nil || len(res.Reconnected) != 1 {
		t.Fatalf("Reload = %v, %v", res, err)
	}
	close(gate)
	if err := <-subscribed; err != nil {
		t.Errorf("Subscribe in flight across the Reload: %v", err)
	}
	if subs := m.Conn("held").Subscriptions(); !slices.Contains(subs, "test://held") {
		t.Errorf("the new connection's subscriptions are %q, want test://held", subs)
	}
	if err := <-called["same"]; err != nil {
		t.Errorf("an idempotent call in flight across the Reload: %v", err)
	}
	if err := <-called["bump"]; !errors.Is(err, ErrMayHaveRun) {
		t.Errorf("a call that may have run, in flight across the Reload: %v, want ErrMayHaveRun", err)
	}
	n, _ := runs.Load("bump")
	if got := n.(*atomic.Int32).Load(); got != 1 {
		t.Errorf("bump ran %d times, want 1", got)
	}
}
