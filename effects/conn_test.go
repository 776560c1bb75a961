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
