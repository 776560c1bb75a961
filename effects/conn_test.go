package effects

import (
	"context"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestToolsChangedWhileConnecting: a server may change its tools (and say so with
// tools/list_changed) as soon as a session is up, before connect has stored the session
// it dialed. The re-list once ran on the session not yet stored and panicked on a nil
// client; the change must instead be picked up once connect has listed. The Dialer
// takes a moment after a real dial, as a decorating Dialer or a preempted owner may.
func TestToolsChangedWhileConnecting(t *testing.T) {
	server := mcp.NewServer(&mcp.Implementation{Name: "early"}, nil)
	noop := func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{}, nil, nil
	}
	mcp.AddTool(server, &mcp.Tool{Name: "first"}, noop)
	slowDial := func(ctx context.Context, cfg transport.Config, opts transport.Options) (transport.Client, error) {
		s, err := transport.DialClient(ctx, cfg, opts)
		mcp.AddTool(server, &mcp.Tool{Name: "late"}, noop) // the server's tools change now
		time.Sleep(200 * time.Millisecond)                 // and the notification comes
		return s, err
	}
	lists := make(chan []string, 8)
	c := NewConn(transport.Config{Name: "early", InMemory: &transport.InMemory{Server: server}}, ConnOptions{
		Dial: slowDial,
		OnTools: func(tools []*mcp.Tool) {
			var names []string
			for _, t := range tools {
				names = append(names, t.Name)
			}
			lists <- names
		},
	})
	c.Bind(func(machine.Event) {})
	pol := machine.Policies{TeardownTimeout: time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ev := c.Invoke(ctx, machine.Invocation{Effect: "connect", Policies: &pol})
	if ev.Trigger != states.Connected {
		t.Fatalf("connect: %v", ev.Err)
	}
	defer c.Invoke(ctx, machine.Invocation{Effect: "teardown", Policies: &pol})
	for {
		select {
		case names := <-lists:
			if slices.Contains(names, "late") {
				return
			}
		case <-ctx.Done():
			t.Fatal("the tool added while connecting never showed up in a listing")
		}
	}
}

// TestSessionEndIsAlwaysReported: a session that ends by itself is gone whatever its
// error says. An end whose error classified as no counting failure (here a server's
// JSON-RPC error, or none at all) was once not reported, leaving the machine ready on
// a dead session until a probe or a call found out.
func TestSessionEndIsAlwaysReported(t *testing.T) {
	for _, endErr := range []error{
		&transport.Error{Server: "s", Op: transport.OpEnd, Err: &jsonrpc.Error{Code: -32603, Message: "internal"}},
		&transport.Error{Server: "s", Op: transport.OpEnd},
		io.EOF,
	} {
		var onEnd func(error)
		dial := func(ctx context.Context, cfg transport.Config, opts transport.Options) (transport.Client, error) {
			onEnd = opts.OnEnd
			return transport.DialClient(ctx, cfg, opts)
		}
		c := NewConn(transport.Config{Name: "ends", InMemory: &transport.InMemory{Server: mcp.NewServer(&mcp.Implementation{Name: "s"}, nil)}},
			ConnOptions{Dial: dial})
		posted := make(chan machine.Event, 1)
		c.Bind(func(ev machine.Event) { posted <- ev })
		pol := machine.Policies{TeardownTimeout: time.Second}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if ev := c.Invoke(ctx, machine.Invocation{Effect: "connect", Policies: &pol}); ev.Trigger != states.Connected {
			t.Fatalf("connect: %v", ev.Err)
		}
		onEnd(endErr)
		select {
		case ev := <-posted:
			if ev.Trigger != states.Lost || !ev.Cause.Counts() {
				t.Errorf("end with %v: posted %v (%s), want lost with a counting cause", endErr, ev.Trigger, ev.Cause)
			}
		default:
			t.Errorf("end with %v: nothing reported", endErr)
		}
		c.Invoke(ctx, machine.Invocation{Effect: "teardown", Policies: &pol})
		cancel()
	}
}

// TestReplaceThenRetire: a connect while a session is live makes the new session the
// one calls get at once; the old one finishes its call in flight and only then does
// retire close it. A session that Close kept from being retired is closed by teardown.
func TestReplaceThenRetire(t *testing.T) {
	server := mcp.NewServer(&mcp.Implementation{Name: "s"}, nil)
	var closed []uint64
	c := NewConn(transport.Config{Name: "replace", InMemory: &transport.InMemory{Server: server}},
		ConnOptions{OnClose: func(s *Session) { closed = append(closed, s.ID) }})
	c.Bind(func(machine.Event) {})
	pol := machine.Policies{TeardownTimeout: 10 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	connect := func() {
		t.Helper()
		if ev := c.Invoke(ctx, machine.Invocation{Effect: "connect", Policies: &pol}); ev.Trigger != states.Connected {
			t.Fatalf("connect: %v", ev.Err)
		}
	}
	connect()
	first := c.Acquire() // a call in flight on session 1
	connect()
	if s := c.Acquire(); s == nil || s.ID != 2 {
		t.Fatalf("a call after the replacement got session %v, want 2", s)
	} else {
		s.Release()
	}
	retired := make(chan machine.Event)
	go func() { retired <- c.Invoke(ctx, machine.Invocation{Effect: "retire", Policies: &pol}) }()
	select {
	case ev := <-retired:
		t.Fatalf("retire ended (%v) with a call in flight on the old session", ev.Trigger)
	case <-time.After(100 * time.Millisecond):
	}
	first.Release()
	if ev := <-retired; ev.Trigger != states.Retired || ev.Err != nil {
		t.Fatalf("retire = %v, %v", ev.Trigger, ev.Err)
	}
	connect() // session 3 replaces 2, and Close comes before retire
	if ev := c.Invoke(ctx, machine.Invocation{Effect: "teardown", Policies: &pol}); ev.Trigger != states.TornDown || ev.Err != nil {
		t.Fatalf("teardown = %v, %v", ev.Trigger, ev.Err)
	}
	if want := []uint64{1, 2, 3}; !slices.Equal(closed, want) || c.Current() != nil {
		t.Errorf("closed sessions %v, want %v, and no current one", closed, want)
	}
}
