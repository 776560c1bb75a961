package mcpfsm

import (
	"context"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// stubDial dials a stub session that answers everything at once.
func stubDial(context.Context, transport.Config, transport.Options) (transport.Client, error) {
	return stubClient{res: &mcp.CallToolResult{}}, nil
}

// TestReviewListHandlerMayReadTheConn: ToolsChanged runs on the owner as a session
// comes up. A handler that reads the connection's own state (Subscriptions, Roots: a
// getter, not a blocking call) deadlocks the owner, because the first delivery is made
// with stateMu held (restoreAndSwap): the connection never becomes ready, and Close
// never returns.
func TestReviewListHandlerMayReadTheConn(t *testing.T) {
	var cp atomic.Pointer[Conn]
	opened := make(chan struct{})
	got := make(chan []string, 1)
	c, err := Open(transport.Config{Name: "stub", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}}, Options{
		Logger: quietLogger(), dial: stubDial,
		Handlers: Handlers{ToolsChanged: func([]*mcp.Tool) {
			<-opened
			select {
			case got <- cp.Load().Subscriptions():
			default:
			}
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	cp.Store(c)
	close(opened)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Errorf("WaitReady: %v (state %s): the owner is stuck in ToolsChanged", err, c.State())
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer ccancel()
	if err := c.Close(cctx); err != nil {
		t.Fatalf("Close: %v: the owner is wedged (the test leaks it)", err)
	}
	<-got
}

// TestReviewListHandlerPanicIsContained: a panic in a notification handler is
// contained (safely), but the list handlers, and ResourceUpdated after a reconnect,
// are called bare on the owner or a re-list goroutine: a panic there takes down the
// process. The scenario runs in a child test process; the parent checks it survived.
func TestReviewListHandlerPanicIsContained(t *testing.T) {
	if os.Getenv("MCPFSM_REVIEW_PANIC") == "1" {
		c, err := Open(transport.Config{Name: "stub", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}}, Options{
			Logger: quietLogger(), dial: stubDial,
			Handlers: Handlers{ToolsChanged: func([]*mcp.Tool) { panic("user handler") }},
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		if err := c.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.Close(ctx); err != nil {
			t.Fatal(err)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestReviewListHandlerPanicIsContained$", "-test.count=1")
	cmd.Env = append(os.Environ(), "MCPFSM_REVIEW_PANIC=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("a panicking ToolsChanged handler took the process down: %v\n%s", err, capText(string(out), 2000))
	}
}
