package mcpfsm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpfsm/mcpfsm/internal/testutil"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestCallNotRetriedReportsFirstFailure: an idempotent call caught by Close is to be
// retried, but there is no next session. It ran once: the error says so (Retried is
// false; it once came back "after one retry"), keeps the first attempt's cause and
// error, and says why there was no retry.
func TestCallNotRetriedReportsFirstFailure(t *testing.T) {
	cfg := transport.Config{Name: "mem", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}}
	c := open(t, cfg, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	var rep CallReport
	go func() {
		_, err := c.CallTool(WithReport(ctx, &rep), &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"ms": 3000}}) // annotated idempotent
		done <- err
	}()
	c.waitServerCalls("slow", 1, 10*time.Second) // the call is in flight
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	err := <-done
	// It was sent once (what tells it from a request that failed fast, which was
	// never sent: the demo once counted such a call as failed fast).
	if rep.Attempts != 1 || rep.First != nil {
		t.Errorf("report = %+v, want 1 attempt and no first error (there was no second)", rep)
	}
	var ce *CallError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v, want a *CallError", err)
	}
	if ce.Retried || strings.Contains(err.Error(), "after one retry") {
		t.Errorf("the call ran once, but the error says it was retried: %v", err)
	}
	// The tool is idempotent: running it twice would have been harmless, so the
	// error does not warn that it may have run (ErrMayHaveRun is for calls that
	// could not be retried for that reason).
	if ce.Cause != states.CauseArtifact || errors.Is(err, ErrMayHaveRun) || !errors.Is(err, ErrClosed) ||
		!strings.Contains(err.Error(), "(not retried: ") {
		t.Errorf("want the first attempt's cause (artifact) and why no retry (closed); got cause %s: %v", ce.Cause, err)
	}
}

// TestCallParamsJSONCannotEncode: a request whose parameters JSON cannot encode (a NaN,
// a channel, a func, a MarshalJSON that fails) is the caller's mistake, found before
// anything is sent. It fails with cause request, is not retried, does not say it may
// have run, and costs the connection nothing: three of them once tore the session down
// each (cause lost, twice for a read-only tool, which was retried) and opened the
// breaker for every other caller.
func TestCallParamsJSONCannotEncode(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{})
	for _, cfg := range []transport.Config{
		{Name: "mem", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}},
		stdioConfig(t, testserver.Options{}),
		httpConfig(h),
	} {
		t.Run(cfg.Kind(), func(t *testing.T) {
			c := open(t, cfg, nil, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := c.WaitReady(ctx); err != nil {
				t.Fatal(err)
			}
			calls := map[string]func() error{
				"NaN": func() error {
					return errOf(c.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": math.NaN()}}))
				},
				"chan": func() error {
					return errOf(c.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": make(chan int)}}))
				},
				"func": func() error { return errOf(c.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: func() {}})) },
				"MarshalJSON": func() error {
					return errOf(c.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: failingJSON{}}))
				},
				"read, +Inf": func() error {
					return errOf(c.ReadResource(ctx, &mcp.ReadResourceParams{URI: "test://static/a", Meta: mcp.Meta{"x": math.Inf(1)}}))
				},
				"readOnlyHint": func() error {
					return errOf(c.CallTool(ctx, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"ms": math.NaN()}}))
				},
			}
			for name, call := range calls {
				err := call()
				var ce *CallError
				if !errors.As(err, &ce) {
					t.Fatalf("%s: err = %v, want a *CallError", name, err)
				}
				if !strings.Contains(err.Error(), "cannot be sent as given (request): ") {
					t.Errorf("%s: %v", name, err)
				}
				if ce.Cause != states.CauseRequest || ce.Retried || errors.Is(err, ErrMayHaveRun) {
					t.Errorf("%s: cause %s, retried %v, may have run %v, want request, neither: %v",
						name, ce.Cause, ce.Retried, errors.Is(err, ErrMayHaveRun), err)
				}
			}
			if _, err := c.Conn.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}}); err != nil {
				t.Errorf("a good call after them: %v (state %s)", err, c.State())
			}
			for _, tr := range c.transitions() {
				if tr.From == states.Ready {
					t.Errorf("the connection left ready: %v\n%s", tr, c.timeline())
				}
			}
		})
	}
}

// failingJSON is a value whose encoding fails with an error that, alone, would say
// the transport broke.
type failingJSON struct{}

func (failingJSON) MarshalJSON() ([]byte, error) { return nil, io.EOF }

// errOf returns a request's error.
func errOf(_ any, err error) error { return err }

// blockingLister is a session whose tools/list waits for release, counting the
// listings: a stand-in server that is slow to list.
type blockingLister struct {
	stubClient
	lists   *atomic.Int32
	release chan struct{}
	started chan struct{}
}

func (b blockingLister) ListTools(ctx context.Context) ([]*mcp.Tool, error) {
	if b.lists.Add(1) > 1 { // the connect's own listing does not wait
		b.started <- struct{}{}
		<-b.release
	}
	return []*mcp.Tool{{Name: "echo"}}, nil
}

// TestToolRelistsCoalesce: notifications that the tool list changed, arriving while a
// re-list runs, cost one more re-list after it, not one each. (The SDK's server
// debounces its own notifications; this tests ours, at the client, with a server that
// is slow to list.) In a bubble, so that "while a re-list runs" is exact: once every
// goroutine is blocked, only the first re-list may have started.
func TestToolRelistsCoalesce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var lists atomic.Int32
		b := blockingLister{stubClient: stubClient{res: &mcp.CallToolResult{}}, lists: &lists, release: make(chan struct{}), started: make(chan struct{}, 64)}
		c, err := Open(transport.Config{Name: "slow", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}},
			Options{Logger: quietLogger(), dial: func(context.Context, transport.Config, transport.Options) (transport.Client, error) { return b, nil }})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		if err := c.WaitReady(context.Background()); err != nil {
			t.Fatal(err)
		}
		s := c.current.Load()
		s.tools.changed(c, s)
		<-b.started // a re-list is running, and waits
		for range 50 {
			s.tools.changed(c, s)
		}
		synctest.Wait()
		if n := lists.Load(); n != 2 {
			t.Errorf("%d listings while the first re-list runs, want 2 (connect's and that one)", n)
		}
		close(b.release)
		<-b.started // the one re-list that the 50 notifications cost
		s.tools.wait()
		if n := lists.Load(); n != 3 { // connect's, the first re-list's, and one more
			t.Errorf("%d listings for 51 notifications, want 3 (connect's, then two re-lists)", n)
		}
	})
}

// TestCallResultTheSDKCannotRead: a server that answers a call with a result the
// go-sdk cannot read (a content type it does not know, as a server on a later
// protocol may send) answered: the call fails with cause server, is not sent again,
// and the session stays (it was taken for lost: torn down, a stdio server
// respawned, a read-only call sent twice, every call in flight failed, and three
// such answers opened the breaker). Over stdio and streamable HTTP, with the answer
// as JSON and as an event stream.
func TestCallResultTheSDKCannotRead(t *testing.T) {
	cfgs := []transport.Config{
		{Name: "raw", Stdio: &transport.Stdio{Command: testserver.Build(t), Args: []string{"-raw"}}},
	}
	for _, sse := range []bool{false, true} {
		srv := httptest.NewServer(strangeServer(sse))
		t.Cleanup(srv.Close)
		cfgs = append(cfgs, transport.Config{Name: fmt.Sprintf("http-sse-%v", sse), HTTP: &transport.HTTP{URL: srv.URL}})
	}
	for _, cfg := range cfgs {
		t.Run(cfg.Name, func(t *testing.T) {
			c := open(t, cfg, nil, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := c.WaitReady(ctx); err != nil {
				t.Fatal(err)
			}
			for range 4 { // past the breaker's threshold, were they counted
				var report CallReport
				_, err := c.Conn.CallTool(WithReport(ctx, &report), &mcp.CallToolParams{Name: "strange"})
				var ce *CallError
				if !errors.As(err, &ce) || !strings.Contains(err.Error(), `unrecognized content type "bogus"`) {
					t.Fatalf("strange: %v, want a *CallError saying the content type", err)
				}
				if ce.Cause != states.CauseServer || report.Attempts > 1 || errors.Is(err, ErrMayHaveRun) {
					t.Errorf("strange: cause %s, retried %v, may have run %v, want server, neither: %v",
						ce.Cause, report.Attempts > 1, errors.Is(err, ErrMayHaveRun), err)
				}
			}
			if err := c.Conn.Ping(ctx, nil); err != nil {
				t.Errorf("a ping after them: %v (state %s)", err, c.State())
			}
			for _, tr := range c.transitions() {
				if tr.From == states.Ready {
					t.Errorf("the connection left ready: %v\n%s", tr, c.timeline())
				}
			}
		})
	}
}

// strangeServer is a server of testutil.RawHTTPServer whose tool strange answers with a
// content of type "bogus" (as JSON, or as an event stream if sse).
func strangeServer(sse bool) http.Handler {
	return testutil.RawHTTPServer(sse, func(method string) any {
		switch method {
		case "initialize":
			return map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{"tools": map[string]any{}},
				"serverInfo": map[string]any{"name": "strange", "version": "0"}}
		case "tools/list":
			return map[string]any{"tools": []any{map[string]any{"name": "strange", "inputSchema": map[string]any{"type": "object"}}}}
		case "tools/call":
			return map[string]any{"content": []any{map[string]any{"type": "bogus", "text": "?"}}}
		case "ping":
			return map[string]any{}
		}
		return nil
	})
}

// TestIteratorErrorsAreCallErrors: an iterator's own errors (a server that repeats a
// cursor, or lists past the caps) are *CallErrors, as every error of a request is
// (README), with the method and cause server; they were plain errors.
func TestIteratorErrorsAreCallErrors(t *testing.T) {
	var loop atomic.Bool
	srv := httptest.NewServer(testutil.RawHTTPServer(false, func(method string) any {
		switch method {
		case "initialize":
			return map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{"prompts": map[string]any{}},
				"serverInfo": map[string]any{"name": "cursors", "version": "0"}}
		case "prompts/list":
			result := map[string]any{"prompts": []any{map[string]any{"name": "p"}}}
			if loop.Load() {
				result["nextCursor"] = "again"
			}
			return result
		}
		return map[string]any{}
	}))
	t.Cleanup(srv.Close)
	c := open(t, transport.Config{Name: "cursors", HTTP: &transport.HTTP{URL: srv.URL}}, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	loop.Store(true)
	var last error
	for _, err := range c.Conn.Prompts(ctx, nil) {
		last = err
	}
	var ce *CallError
	if !errors.As(last, &ce) || ce.Method != "prompts/list" || ce.Cause != states.CauseServer || !errors.Is(last, transport.ErrListTooLong) {
		t.Errorf("a walk of a list whose cursor repeats ended with %#v (%v), want a *CallError of prompts/list, cause server, wrapping ErrListTooLong", last, last)
	}
}

// TestIteratorBytesCapped: a list whose pages add up to more than
// transport.MaxListBytes bytes (a page may be as large as a message, 16 MiB, and
// 1,000 pages were allowed: 16 GB) ends the walk there, with a *CallError wrapping
// ErrListTooLong; no later page is asked for.
func TestIteratorBytesCapped(t *testing.T) {
	var served atomic.Int64
	big := strings.Repeat("x", 10_000)
	srv := httptest.NewServer(testutil.RawHTTPServer(false, func(method string) any {
		switch method {
		case "initialize":
			return map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{"prompts": map[string]any{}},
				"serverInfo": map[string]any{"name": "big", "version": "0"}}
		case "prompts/list":
			n := served.Add(1)
			return map[string]any{"prompts": []any{map[string]any{"name": "p", "description": big}}, "nextCursor": fmt.Sprint("c", n)}
		}
		return map[string]any{}
	}))
	t.Cleanup(srv.Close)
	defer func(old int) { maxListBytes = old }(maxListBytes)
	maxListBytes = 3*10_000 + 1000 // three pages, not four
	c := open(t, transport.Config{Name: "big", HTTP: &transport.HTTP{URL: srv.URL}}, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	var last error
	got := 0
	for _, err := range c.Conn.Prompts(ctx, nil) {
		if last = err; err == nil {
			got++
		}
	}
	var ce *CallError
	if !errors.As(last, &ce) || ce.Method != "prompts/list" || !errors.Is(last, transport.ErrListTooLong) || !strings.Contains(last.Error(), "bytes") {
		t.Errorf("the walk ended with %v, want a *CallError of prompts/list wrapping ErrListTooLong, over its bytes", last)
	}
	if got != 3 || served.Load() != 4 {
		t.Errorf("%d prompts yielded of %d pages served, want 3 of 4", got, served.Load())
	}
}
