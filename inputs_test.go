package mcpfsm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// This file tries to break the fulfilment of a 2026-07-28 server's input requests
// (inputs.go) with servers that ask too much, too often, or nonsense, and with
// handlers that fail, wait or answer nothing.

// callCause calls tool on c and returns the call's error and its cause.
func callCause(ctx context.Context, c *conn, tool string, args map[string]any) (*mcp.CallToolResult, error, states.Cause) {
	res, err := c.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	var ce *CallError
	if errors.As(err, &ce) {
		return res, err, ce.Cause
	}
	return res, err, states.CauseNone
}

// TestInputHandlerErrorIsTheServers: a handler's error ends the call that asked
// (the server gets no answer to send back), with cause server, whatever the error
// says: a handler that gave up at its own deadline (context.DeadlineExceeded) or
// whose user's pipe closed (io.EOF) was read as the connection's timeout or loss:
// the call was sent again, the session torn down, and three such answers opened the
// breaker, as on no earlier protocol version (where the error goes to the server).
func TestInputHandlerErrorIsTheServers(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{Stateless: true})
	errs := []error{errors.New("the user said no"), context.DeadlineExceeded, io.EOF, context.Canceled, mcp.ErrConnectionClosed}
	var which atomic.Int32
	c := open(t, httpConfig(h), nil, func(o *Options) {
		o.Handlers.Elicit = func(context.Context, *mcp.ElicitParams) (*mcp.ElicitResult, error) {
			return nil, errs[which.Load()]
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, want := range errs {
		which.Store(int32(i))
		before := h.Count("tools/call")
		_, err, cause := callCause(ctx, c, "elicit", map[string]any{"message": "?"})
		if cause != states.CauseServer || !errors.Is(err, want) {
			t.Errorf("a handler's %q: cause %s, %v; want cause server, wrapping the handler's error", want, cause, err)
		}
		if n := h.Count("tools/call") - before; n != 1 {
			t.Errorf("a handler's %q: the call was sent %d times, want once", want, n)
		}
	}
	if st := c.State(); st != states.Ready {
		t.Errorf("state %s, want ready\n%s", st, c.timeline())
	}
	if n := c.count(states.Ready, states.TearingDown); n != 0 {
		t.Errorf("%d teardowns, want none\n%s", n, c.timeline())
	}
}

// TestInputBounds: a server that asks forever gets 10 rounds, one that sheds load
// (asks nothing) 3, and one that asks more things at once than the connection
// answers at once (maxServerRequests) none: each call fails with cause server and
// the connection is left alone. A round of 20,000 roots requests (600 KB) made the
// client answer with tens of megabytes (each answer a copy of the roots) on 20,000
// goroutines at once: half a gigabyte of heap, and a bigger round (a server's answer
// may be 32 MiB) more than a machine has.
func TestInputBounds(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{Stateless: true})
	var rounds atomic.Int32
	srv := h.Server()
	mcp.AddTool(srv, &mcp.Tool{Name: "forever"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		rounds.Add(1)
		return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"r": &mcp.ListRootsParams{}}}, nil, nil
	})
	mcp.AddTool(srv, &mcp.Tool{Name: "shed"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		rounds.Add(1)
		return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{}}, nil, nil
	})
	mcp.AddTool(srv, &mcp.Tool{Name: "many"}, func(_ context.Context, req *mcp.CallToolRequest, in struct{ N int }) (*mcp.CallToolResult, any, error) {
		rounds.Add(1)
		if n := len(req.Params.InputResponses); n > 0 {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprint(n)}}}, nil, nil
		}
		asked := mcp.InputRequestMap{}
		for i := range in.N {
			asked[fmt.Sprint(i)] = &mcp.ListRootsParams{}
		}
		return &mcp.CallToolResult{InputRequests: asked}, nil, nil
	})
	c := open(t, httpConfig(h), nil, func(o *Options) {
		o.Roots = []*mcp.Root{{URI: "file:///" + strings.Repeat("x", 1000)}}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		tool   string
		n      int
		rounds int32
		err    string // "": no error
	}{
		{"forever", 0, maxInputRounds, "still asks after 10 rounds"},
		{"shed", 0, maxShedRounds, "asked nothing 3 times"},
		{"many", maxServerRequests, 2, ""},
		{"many", maxServerRequests + 1, 1, "asks 257 things at once"},
		{"many", 20000, 1, "asks 20000 things at once"},
	} {
		rounds.Store(0)
		var args map[string]any
		if tc.n > 0 {
			args = map[string]any{"N": tc.n}
		}
		res, err, cause := callCause(ctx, c, tc.tool, args)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s %d: %v", tc.tool, tc.n, err)
		case tc.err == "" && (len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != fmt.Sprint(tc.n)):
			t.Errorf("%s %d: %+v, want %d answers", tc.tool, tc.n, res, tc.n)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || cause != states.CauseServer):
			t.Errorf("%s %d: %v (cause %s), want an error saying %q, cause server", tc.tool, tc.n, err, cause, tc.err)
		}
		if got := rounds.Load(); got != tc.rounds {
			t.Errorf("%s %d: the server saw %d rounds, want %d", tc.tool, tc.n, got, tc.rounds)
		}
	}
	if n := c.count(states.Ready, states.TearingDown); n != 0 {
		t.Errorf("%d teardowns, want none\n%s", n, c.timeline())
	}
}

// TestInputHandlerEndsWithTheSession: a handler answering an input request is given
// a context that ends when the session does, as on earlier protocol versions (the
// server's request's context), not only when the caller's does: Close returned at
// once and left the call waiting in its handler for as long as the caller's context
// lived (for ever with context.Background()).
func TestInputHandlerEndsWithTheSession(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{Stateless: true})
	asked := make(chan struct{}, 1)
	c := open(t, httpConfig(h), nil, func(o *Options) {
		o.Handlers.Elicit = func(ctx context.Context, _ *mcp.ElicitParams) (*mcp.ElicitResult, error) {
			asked <- struct{}{}
			<-ctx.Done()
			return nil, ctx.Err()
		}
	})
	done := make(chan error, 1)
	go func() {
		_, err := c.CallTool(context.Background(), &mcp.CallToolParams{Name: "elicit", Arguments: map[string]any{"message": "?"}})
		done <- err
	}()
	<-asked
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
	select {
	case err := <-done:
		var ce *CallError
		if !errors.As(err, &ce) || ce.Cause.Counts() {
			t.Errorf("the call cut by Close: %v (%+v), want a CallError whose cause does not count", err, ce)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call still waits in its handler 10s after Close returned")
	}
}

// TestInputSessionReplacedDuringHandler: a reconnect (make before break) while a
// handler answers lets the call finish on the old session (for drain_timeout), then
// ends the handler if it has not: the call is one cut by our own close (not a
// failure of the connection), sent again on the new session (the tool is read-only)
// and answered there. The handler was left waiting for the caller's context.
func TestInputSessionReplacedDuringHandler(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{Stateless: true})
	asked := make(chan struct{})
	var waited atomic.Bool
	pol := fastPolicies()
	pol.DrainTimeout = time.Second // the old session's calls are waited for this long
	c := open(t, httpConfig(h), pol, func(o *Options) {
		o.Handlers.Elicit = func(ctx context.Context, _ *mcp.ElicitParams) (*mcp.ElicitResult, error) {
			if waited.CompareAndSwap(false, true) {
				close(asked)
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return &mcp.ElicitResult{Action: "decline"}, nil
		}
	})
	done := make(chan error, 1)
	go func() {
		text, err := c.callText(context.Background(), "elicit", map[string]any{"message": "?"})
		if err == nil && !strings.Contains(text, "decline") {
			err = fmt.Errorf("answered %q", text)
		}
		done <- err
	}()
	<-asked
	first := c.session()
	c.Reconnect()
	c.waitNewSession(first, 10*time.Second)
	select {
	case err := <-done:
		// The test server's elicit tool is read-only: cut by our own close, the
		// call is sent again on the new session, and answered there.
		if err != nil {
			t.Errorf("the call cut by the retire: %v; want it sent again, and answered", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the call still waits in its handler 10s after its session was replaced\n%s", c.timeline())
	}
	if n := c.count(states.Ready, states.TearingDown); n != 0 {
		t.Errorf("%d teardowns, want none\n%s", n, c.timeline())
	}
}

// TestInputCallerCancels: the caller gives up while a handler answers: the handler's
// context ends, the call fails with cause canceled, and nothing is left running
// (goleak, in TestMain).
func TestInputCallerCancels(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{Stateless: true})
	asked := make(chan struct{})
	ended := make(chan struct{})
	c := open(t, httpConfig(h), nil, func(o *Options) {
		o.Handlers.Elicit = func(ctx context.Context, _ *mcp.ElicitParams) (*mcp.ElicitResult, error) {
			close(asked)
			<-ctx.Done()
			close(ended)
			return nil, ctx.Err()
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-asked; cancel() }()
	_, err, cause := callCause(ctx, c, "elicit", map[string]any{"message": "?"})
	if err == nil || cause != states.CauseCanceled {
		t.Errorf("a call its caller cancelled: %v (cause %s), want cause canceled", err, cause)
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context did not end")
	}
	if st := c.State(); st != states.Ready {
		t.Errorf("state %s, want ready", st)
	}
}

// TestInputPromptAndRead: a prompt and a resource read whose 2026-07-28 server asks
// for roots get them, through the middleware a Manager gives its clients (added after
// the connection was up), and the caller's params are not changed.
func TestInputPromptAndRead(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{Stateless: true})
	rootsOf := func(responses mcp.InputResponseMap) string {
		if r, ok := responses["roots"].(*mcp.ListRootsResult); ok && len(r.Roots) == 1 {
			return r.Roots[0].URI
		}
		return ""
	}
	h.Server().AddPrompt(&mcp.Prompt{Name: "rooted"}, func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		if uri := rootsOf(req.Params.InputResponses); uri != "" {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: uri}}}}, nil
		}
		return &mcp.GetPromptResult{InputRequests: mcp.InputRequestMap{"roots": &mcp.ListRootsParams{}}}, nil
	})
	h.Server().AddResource(&mcp.Resource{URI: "test://rooted", Name: "rooted"}, func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		if uri := rootsOf(req.Params.InputResponses); uri != "" {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: uri}}}, nil
		}
		return &mcp.ReadResourceResult{InputRequests: mcp.InputRequestMap{"roots": &mcp.ListRootsParams{}}}, nil
	})
	m := newTestManager(t, &Config{Servers: []ServerConfig{{Name: "s", Policies: *fastPolicies(), Transport: httpConfig(h)}}},
		ManagerOptions{Roots: []*mcp.Root{{URI: "file:///manager"}}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pp := &mcp.GetPromptParams{Name: "rooted"}
	rp := &mcp.ReadResourceParams{URI: "test://rooted"}
	check := func(want string) {
		t.Helper()
		if p, err := m.Conn("s").GetPrompt(ctx, pp); err != nil || len(p.Messages) != 1 || p.Messages[0].Content.(*mcp.TextContent).Text != want {
			t.Errorf("the prompt: %+v, %v; want %s", p, err, want)
		}
		if r, err := m.Conn("s").ReadResource(ctx, rp); err != nil || len(r.Contents) != 1 || r.Contents[0].Text != want {
			t.Errorf("the read: %+v, %v; want %s", r, err, want)
		}
		if pp.InputResponses != nil || pp.RequestState != "" || rp.InputResponses != nil || rp.RequestState != "" {
			t.Errorf("the caller's params were changed: %+v, %+v", pp, rp)
		}
	}
	check("file:///manager")
	m.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "roots/list" {
				return &mcp.ListRootsResult{Roots: []*mcp.Root{{URI: "file:///middleware"}}}, nil
			}
			return next(ctx, method, req)
		}
	})
	check("file:///middleware")
}
