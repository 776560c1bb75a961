package transport

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpfsm/mcpfsm/transport/testserver"
)

// TestToolsChangedWhileRelistening: a change of the server's tools made while the
// session's list-changed listen is being sent again (after a resource listen ended,
// which made the go-sdk's server forget the session's list-changed registration; see
// relistenRule) is reported once the new listen is in force. It was lost: the server
// notified no one, and the session went on with the old list until the next change.
// The window is one round trip; the test holds the new listen on the server's side.
func TestToolsChangedWhileRelistening(t *testing.T) {
	srv := testserver.New(testserver.Options{})
	var listens atomic.Int32
	held := make(chan struct{}, 1)
	release := make(chan struct{})
	srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if p, ok := req.GetParams().(*mcp.SubscriptionsListenParams); ok && method == "subscriptions/listen" &&
				p.Notifications != nil && len(p.Notifications.ResourceSubscriptions) == 0 && listens.Add(1) == 2 {
				// The list-changed listen sent again (the first is the SDK's, at connect).
				held <- struct{}{}
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			return next(ctx, method, req)
		}
	})
	changed := make(chan struct{}, 16)
	s := dial(t, Config{Name: "memory-test", InMemory: &InMemory{Server: srv}}, Options{OnToolsChanged: func() { changed <- struct{}{} }})
	if !newProtocol(s.cs) {
		t.Fatalf("the session speaks %s, want 2026-07-28 or later", s.ProtocolVersion())
	}
	if err := s.Subscribe(callCtx(t), "test://static/a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Unsubscribe(callCtx(t), "test://static/a"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the list-changed listen was not sent again after the resource listen ended")
	}
	if _, err := s.CallTool(callCtx(t), &mcp.CallToolParams{Name: "change_tools"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // past the server's debounce (10 ms): notified to no one
	select {
	case <-changed:
		t.Fatal("a change reported while no list-changed listen was registered: the test no longer holds the window")
	default:
	}
	close(release)
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("the change made while the list-changed listen was sent again was never reported")
	}
}
