package mcpfsm

import (
	"context"
	"io"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// stubDial dials a stub session that answers everything at once.
func stubDial(context.Context, transport.Config, transport.Options) (transport.Client, error) {
	return stubClient{res: &mcp.CallToolResult{}}, nil
}

// TestListHandlerMayReadTheConn: ToolsChanged runs on the owner as a session
// comes up. A handler that reads the connection's own state (Subscriptions, Roots: a
// getter, not a blocking call) deadlocks the owner, because the first delivery is made
// with stateMu held (restoreAndSwap): the connection never becomes ready, and Close
// never returns.
func TestListHandlerMayReadTheConn(t *testing.T) {
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

// TestListHandlerPanicIsContained: a panic in a notification handler is
// contained (safely), but the list handlers, and ResourceUpdated after a reconnect,
// are called bare on the owner or a re-list goroutine: a panic there takes down the
// process. The scenario runs in a child test process; the parent checks it survived.
func TestListHandlerPanicIsContained(t *testing.T) {
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
	cmd := exec.Command(os.Args[0], "-test.run=^TestListHandlerPanicIsContained$", "-test.count=1")
	cmd.Env = append(os.Environ(), "MCPFSM_REVIEW_PANIC=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("a panicking ToolsChanged handler took the process down: %v\n%s", err, capText(string(out), 2000))
	}
}

// flakyReadStub is a stub session that fails its second request about uriA (the first
// is the restore's subscribe, the second a read) as a broken session does.
type flakyReadStub struct {
	stubClient
	flaky bool
	n     *atomic.Int32
}

func (f flakyReadStub) Request(ctx context.Context, _, name string, _ func(context.Context, *mcp.ClientSession) error) error {
	if f.flaky && name == testserver.ResourceA && f.n.Add(1) == 2 {
		return io.EOF
	}
	return nil
}

// Subscribe counts as Request does: the restore's subscribe is the first request for
// the resource.
func (f flakyReadStub) Subscribe(ctx context.Context, uri string) error {
	return f.Request(ctx, transport.OpRequest, uri, nil)
}

// TestResourceUpdatedMayReadTheResource: after a reconnect, ResourceUpdated is
// called for each subscription on the owner, with a context that never ends. The
// natural handler re-reads the resource through the connection. If that read finds
// the new session broken, it is reported and waits to be retried on the next session,
// which only the owner can open, and the owner is waiting for the handler: the
// connection is stuck for good, and Close never returns.
func TestResourceUpdatedMayReadTheResource(t *testing.T) {
	var cp atomic.Pointer[Conn]
	var dials atomic.Int32
	var reads atomic.Int32
	opened := make(chan struct{})
	c, err := Open(transport.Config{Name: "stub", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}}, Options{
		Logger: quietLogger(), Policies: fastPolicies(),
		dial: func(context.Context, transport.Config, transport.Options) (transport.Client, error) {
			return flakyReadStub{stubClient{res: &mcp.CallToolResult{}}, dials.Add(1) == 2, &reads}, nil
		},
		Handlers: Handlers{ResourceUpdated: func(ctx context.Context, p *mcp.ResourceUpdatedNotificationParams) {
			<-opened
			_, _ = cp.Load().ReadResource(ctx, &mcp.ReadResourceParams{URI: p.URI})
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	cp.Store(c)
	close(opened)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Subscribe(ctx, &mcp.SubscribeParams{URI: testserver.ResourceA}); err != nil {
		t.Fatal(err)
	}
	c.Reconnect() // session 2: the restore's subscribe works, the handler's read does not
	if _, err := c.WaitState(ctx, func(states.State) bool { return dials.Load() >= 3 }); err != nil {
		t.Errorf("no session after the broken one: %v (state %s, %d dials)", err, c.State(), dials.Load())
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer ccancel()
	if err := c.Close(cctx); err != nil {
		t.Fatalf("Close: %v: the owner is stuck in ResourceUpdated (the test leaks it)", err)
	}
}

// TestServerRequestFloodBounded: a server that sends thousands of sampling
// requests at once (an in-memory go-sdk server, each from a goroutine of its
// own) must not run thousands of the client's handlers at once: those beyond
// maxServerRequests are refused with an error the server sees.
func TestServerRequestFloodBounded(t *testing.T) {
	const flood = 2000
	var running, most, refused atomic.Int64
	srv := mcp.NewServer(&mcp.Implementation{Name: "flooder", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "flood", InputSchema: map[string]any{"type": "object"}}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		done := make(chan struct{}, flood)
		for range flood {
			go func() {
				defer func() { done <- struct{}{} }()
				if _, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "x"}}}}); err != nil {
					refused.Add(1)
				}
			}()
		}
		for range flood {
			<-done
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
	})
	cfg := transport.Config{Name: "flooder", InMemory: &transport.InMemory{Server: srv}, ProtocolVersion: "2025-11-25"}
	pol := fastPolicies()
	pol.KeepaliveInterval = 0 // the flood delays answers: no probe is to judge the server by them
	c := open(t, cfg, pol, func(o *Options) {
		o.Handlers.CreateMessage = func(ctx context.Context, p *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
			n := running.Add(1)
			defer running.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(200 * time.Millisecond) // a model takes its time
			return &mcp.CreateMessageResult{Content: &mcp.TextContent{Text: "x"}, Model: "m", Role: "assistant"}, nil
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "flood"}); err != nil {
		t.Fatalf("%v\n%s", err, c.timeline())
	}
	t.Logf("handlers at once: at most %d; refused %d of %d", most.Load(), refused.Load(), flood)
	if most.Load() > maxServerRequests || refused.Load() == 0 {
		t.Errorf("%d handlers ran at once and %d requests were refused, want at most %d and some", most.Load(), refused.Load(), maxServerRequests)
	}
}
