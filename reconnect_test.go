package mcpfsm

import (
	"context"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestReconnectLetsCallsFinish: Conn.Reconnect promises that the old session "is
// closed once the calls in flight on it have finished", and calls "never wait for it"
// (make before break). retire drains the old session for at most teardown_timeout/2,
// then closes it by force: a tool call in flight longer than that (here 1s, with a
// 500ms teardown_timeout) is cut, and, not being idempotent, fails with ErrMayHaveRun.
// A planned reconnect (Reconnect, a Reload that changed the transport, a recycle at
// max_session_age) thus fails the long calls of a healthy server.
func TestReconnectLetsCallsFinish(t *testing.T) {
	cfg := transport.Config{Name: "mem", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}}
	c := open(t, cfg, nil, nil) // teardown_timeout 500ms
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "hold", Arguments: map[string]any{"ms": 1000}})
		done <- err
	}()
	for c.Status().Session == nil || c.Status().Session.InFlight == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("the call never went out")
		case <-time.After(time.Millisecond):
		}
	}
	c.Reconnect()
	if err := <-done; err != nil {
		t.Errorf("a call in flight during a planned reconnect: %v", err)
	}
}
