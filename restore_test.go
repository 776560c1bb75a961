package mcpfsm

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// restoreStub is a stub session whose server, if slow is set, never answers a
// subscribe to slowURI (as a restore sends it) until the request's context ends. Other
// requests through Request succeed without reaching anything.
type restoreStub struct {
	stubClient
	slow  bool
	began chan struct{} // gets one value when the slow subscribe has begun
}

const slowURI = "test://slow"

func (r restoreStub) Request(ctx context.Context, _, name string, _ func(context.Context, *mcp.ClientSession) error) error {
	if r.slow && name == slowURI {
		select {
		case r.began <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

// Subscribe is Request's, for the subscription's URI.
func (r restoreStub) Subscribe(ctx context.Context, uri string) error {
	return r.Request(ctx, transport.OpRequest, uri, nil)
}

// TestSubscribeDuringRestoreKeepsItsDeadline: a restore holds stateMu while it
// re-establishes the session state on a new session, for as long as connect_timeout.
// A Subscribe (or SetLoggingLevel, Unsubscribe) made meanwhile is sent on the session
// that serves (make before break) and answered at once, then waits for stateMu to
// record it, without its context: it returns when the restore gives up, long after its
// deadline. (Subscriptions, Roots and SetRoots block the same way.)
func TestSubscribeDuringRestoreKeepsItsDeadline(t *testing.T) {
	pol := *fastPolicies()
	pol.ConnectTimeout = 2 * time.Second
	var dials atomic.Int32
	began := make(chan struct{}, 1)
	c, err := Open(transport.Config{Name: "stub", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}}, Options{
		Logger: quietLogger(), Policies: &pol,
		dial: func(context.Context, transport.Config, transport.Options) (transport.Client, error) {
			return restoreStub{stubClient{res: &mcp.CallToolResult{}}, dials.Add(1) > 1, began}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Subscribe(ctx, &mcp.SubscribeParams{URI: slowURI}); err != nil {
		t.Fatal(err)
	}
	c.Reconnect() // the new session's restore of slowURI hangs for connect_timeout
	select {
	case <-began: // the restore holds stateMu from here until connect_timeout
	case <-ctx.Done():
		t.Fatal("the new session's restore never began")
	}
	sctx, scancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer scancel()
	start := time.Now()
	err = c.Subscribe(sctx, &mcp.SubscribeParams{URI: "test://other"})
	if took := time.Since(start); took > time.Second {
		t.Errorf("Subscribe with a 200ms deadline returned after %s (err %v): it waited for the restore", took.Round(time.Millisecond), err)
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Subscribe: %v", err)
	}
}
