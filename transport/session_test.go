package transport

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// kind starts a test server (if it needs one) and returns how to reach it.
type kind struct {
	name  string
	start func(t *testing.T, o testserver.Options) Config
}

var kinds = []kind{
	{"stdio", func(t *testing.T, o testserver.Options) Config { return stdioConfig(t, o) }},
	{"http", func(t *testing.T, o testserver.Options) Config { return httpConfig(testserver.StartHTTP(t, o)) }},
	{"stateless", func(t *testing.T, o testserver.Options) Config {
		o.Stateless = true
		return httpConfig(testserver.StartHTTP(t, o))
	}},
	{"sse", func(t *testing.T, o testserver.Options) Config {
		o.SSE = true
		return sseConfig(testserver.StartHTTP(t, o))
	}},
	{"memory", func(t *testing.T, o testserver.Options) Config { return memoryConfig(o) }},
}

// ends records OnEnd calls.
type ends struct {
	n  atomic.Int32
	ch chan error
}

func newEnds() *ends { return &ends{ch: make(chan error, 4)} }

func (e *ends) options() Options {
	return Options{OnEnd: func(err error) {
		e.n.Add(1)
		e.ch <- err
	}}
}

func (e *ends) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-e.ch:
		return err
	case <-time.After(callTimeout):
		t.Fatal("OnEnd was not called")
		return nil
	}
}

func TestSessionBasics(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			s := dial(t, k.start(t, testserver.Options{}), Options{})
			ctx := callCtx(t)
			if got := s.ServerInfo().Name; got != testserver.Name {
				t.Errorf("ServerInfo().Name = %q, want %q", got, testserver.Name)
			}
			if got, err := echo(ctx, s, "hello"); err != nil || got != "hello" {
				t.Fatalf("echo = %q, %v", got, err)
			}
			var counts []string
			for range 3 {
				res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "counter"})
				if err != nil {
					t.Fatal(err)
				}
				counts = append(counts, resultText(res))
			}
			want := []string{"1", "2", "3"}
			if k.name == "stateless" {
				want = []string{"1", "1", "1"} // every request is a new session
			}
			if !slices.Equal(counts, want) {
				t.Errorf("counter = %v, want %v", counts, want)
			}
			tools, err := s.ListTools(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tool := range tools {
				names = append(names, tool.Name)
			}
			for _, name := range []string{"echo", "counter", "slow", "crash", "stats", "change_tools", "grandchild"} {
				if !slices.Contains(names, name) {
					t.Errorf("ListTools = %v, missing %s", names, name)
				}
			}
			if err := s.Probe(ctx); err != nil {
				t.Errorf("Probe: %v", err)
			}
			if s.Closing() {
				t.Error("Closing before Close")
			}
			if err := s.Close(ctx); err != nil {
				t.Errorf("Close: %v", err)
			}
			if !s.Closing() {
				t.Error("not Closing after Close")
			}
			if err := s.Close(ctx); err != nil {
				t.Errorf("second Close: %v", err)
			}
			_, err = echo(ctx, s, "late")
			if !errors.Is(err, mcp.ErrConnectionClosed) {
				t.Errorf("call after Close = %v, want ErrConnectionClosed", err)
			}
		})
	}
}

func TestToolAnnotations(t *testing.T) {
	s := dial(t, memoryConfig(testserver.Options{}), Options{})
	tools, err := s.ListTools(callCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*mcp.Tool{}
	for _, tool := range tools {
		byName[tool.Name] = tool
	}
	if a := byName["echo"].Annotations; a == nil || !a.ReadOnlyHint {
		t.Errorf("echo annotations %+v, want readOnlyHint", a)
	}
	if a := byName["slow"].Annotations; a == nil || !a.IdempotentHint {
		t.Errorf("slow annotations %+v, want idempotentHint", a)
	}
	if a := byName["counter"].Annotations; a != nil && (a.ReadOnlyHint || a.IdempotentHint) {
		t.Errorf("counter annotations %+v: it is neither read-only nor idempotent", a)
	}
}

func TestListToolsPages(t *testing.T) {
	// A small page size makes several pages.
	paged := mcp.NewServer(&mcp.Implementation{Name: "paged", Version: "1"}, &mcp.ServerOptions{PageSize: 4})
	for i := range 25 {
		mcp.AddTool(paged, &mcp.Tool{Name: "t" + strconv.Itoa(i)},
			func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
				return &mcp.CallToolResult{}, nil, nil
			})
	}
	s := dial(t, Config{Name: "paged", InMemory: &InMemory{Server: paged}}, Options{})
	tools, err := s.ListTools(callCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(tools) != 25 {
		t.Errorf("ListTools returned %d tools, want 25", len(tools))
	}
}

func TestCallToolDoesNotModifyParams(t *testing.T) {
	// Protocol 2026-07-28 (stateless HTTP, in-memory) is where the SDK writes
	// _meta into the params it is given.
	for _, k := range []kind{kinds[2], kinds[4]} {
		t.Run(k.name, func(t *testing.T) {
			s := dial(t, k.start(t, testserver.Options{}), Options{})
			p := &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}, Meta: mcp.Meta{"k": "v"}}
			var wg sync.WaitGroup
			for range 20 {
				wg.Go(func() {
					if _, err := s.CallTool(callCtx(t), p); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			if len(p.Meta) != 1 {
				t.Errorf("params' _meta was modified: %v", p.Meta)
			}
			q := &mcp.CallToolParams{Name: "counter"}
			if _, err := s.CallTool(callCtx(t), q); err != nil {
				t.Fatal(err)
			}
			if q.Arguments != nil || q.Meta != nil {
				t.Errorf("params were modified: %+v", q)
			}
		})
	}
}

func TestOnEndAfterServerGoesAway(t *testing.T) {
	t.Run("http", func(t *testing.T) {
		h := testserver.StartHTTP(t, testserver.Options{})
		e := newEnds()
		cfg := httpConfig(h)
		cfg.HTTP.MaxRetries = -1 // fail as soon as the event stream breaks
		s := dial(t, cfg, e.options())
		h.Stop()
		err := e.wait(t)
		var te *Error
		if !errors.As(err, &te) || te.Op != OpEnd || te.Server != cfg.Name {
			t.Errorf("OnEnd(%v): want an *Error with Op %q", err, OpEnd)
		}
		<-s.watched
		if n := e.n.Load(); n != 1 {
			t.Errorf("OnEnd called %d times", n)
		}
	})
	t.Run("sse", func(t *testing.T) {
		h := testserver.StartHTTP(t, testserver.Options{SSE: true})
		e := newEnds()
		dial(t, sseConfig(h), e.options())
		h.Stop()
		e.wait(t)
	})
	t.Run("memory", func(t *testing.T) {
		e := newEnds()
		s := dial(t, memoryConfig(testserver.Options{}), e.options())
		_, err := s.CallTool(callCtx(t), &mcp.CallToolParams{Name: "crash"})
		if err == nil {
			t.Error("crash answered")
		}
		e.wait(t)
	})
	t.Run("stdio", func(t *testing.T) {
		e := newEnds()
		s := dial(t, stdioConfig(t, testserver.Options{}), e.options())
		if _, err := s.CallTool(callCtx(t), &mcp.CallToolParams{Name: "crash"}); err == nil {
			t.Error("crash answered")
		}
		e.wait(t)
	})
}

func TestOnEndNotAfterClose(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			e := newEnds()
			s := dial(t, k.start(t, testserver.Options{}), e.options())
			if _, err := echo(callCtx(t), s, "x"); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(callCtx(t)); err != nil {
				t.Fatal(err)
			}
			select {
			case <-s.watched:
			case <-time.After(callTimeout):
				t.Fatal("the watcher outlived Close")
			}
			if n := e.n.Load(); n != 0 {
				t.Errorf("OnEnd called %d times after Close", n)
			}
		})
	}
}

func TestOnEndMayCallClose(t *testing.T) {
	var s *Session
	closed := make(chan error, 1)
	ready := make(chan struct{})
	opts := Options{OnEnd: func(error) {
		<-ready
		closed <- s.Close(callCtx(t))
	}}
	s = dial(t, memoryConfig(testserver.Options{}), opts)
	close(ready)
	_, _ = s.CallTool(callCtx(t), &mcp.CallToolParams{Name: "crash"})
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close from OnEnd: %v", err)
		}
	case <-time.After(callTimeout):
		t.Fatal("Close from OnEnd did not return")
	}
}

func TestCloseConcurrent(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			s := dial(t, k.start(t, testserver.Options{}), Options{})
			var wg sync.WaitGroup
			errs := make([]error, 8)
			for i := range errs {
				wg.Go(func() { errs[i] = s.Close(callCtx(t)) })
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Errorf("Close #%d: %v", i, err)
				}
			}
		})
	}
}

// closeWithin closes s with a short ctx and checks that the close was forced
// and returned soon after ctx ended.
func closeWithin(t *testing.T, s *Session) error {
	t.Helper()
	const timeout = 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	err := s.Close(ctx)
	// Generous: what matters is that the server cannot hold Close, not how
	// fast this machine kills and reaps.
	if d := time.Since(start); d > timeout+forceGrace+5*time.Second {
		t.Errorf("Close took %v with a %v context", d, timeout)
	}
	if !errors.Is(err, ErrForcedClose) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close = %v, want ErrForcedClose and DeadlineExceeded", err)
	}
	var te *Error
	if !errors.As(err, &te) || te.Op != OpClose {
		t.Errorf("Close = %#v, want an *Error with Op %q", err, OpClose)
	}
	return err
}

func TestCloseHangingServer(t *testing.T) {
	t.Run("stdio", func(t *testing.T) {
		s := dial(t, stdioConfig(t, testserver.Options{HangClose: true}), Options{})
		closeWithin(t, s)
	})
	t.Run("http", func(t *testing.T) {
		h := testserver.StartHTTP(t, testserver.Options{HangClose: true})
		s := dial(t, httpConfig(h), Options{})
		closeWithin(t, s)
		if h.Count("DELETE") != 1 {
			t.Errorf("%d DELETEs, want 1", h.Count("DELETE"))
		}
	})
}

func TestForcedCloseAbortsCallsInFlight(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			s := dial(t, k.start(t, testserver.Options{}), Options{})
			done := callSlow(t, s)
			// The graceful close waits for calls in flight: it is forced.
			closeWithin(t, s)
			select {
			case err := <-done:
				if err == nil {
					t.Error("the call in flight succeeded")
				}
			case <-time.After(callTimeout / 2):
				t.Fatal("the call in flight was not aborted")
			}
		})
	}
}

func TestForcedCloseOfFrozenHTTPServer(t *testing.T) {
	for _, sse := range []bool{false, true} {
		h := testserver.StartHTTP(t, testserver.Options{SSE: sse})
		cfg := httpConfig(h)
		if sse {
			cfg = sseConfig(h)
		}
		s := dial(t, cfg, Options{})
		h.Freeze()
		done := make(chan error, 1)
		go func() {
			_, err := echo(callCtx(t), s, "x")
			done <- err
		}()
		time.Sleep(100 * time.Millisecond)
		closeWithin(t, s)
		select {
		case err := <-done:
			if err == nil {
				t.Error("a call to a frozen server succeeded")
			}
		case <-time.After(callTimeout / 2):
			t.Fatal("the call in flight was not aborted")
		}
	}
}

func TestCloseWithEndedContext(t *testing.T) {
	s := dial(t, stdioConfig(t, testserver.Options{}), Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Close(ctx)
	// The close is forced at once; a child that exits on its own first is
	// fine too.
	if err != nil && !errors.Is(err, ErrForcedClose) {
		t.Errorf("Close = %v", err)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Close = %v, want it to carry context.Canceled", err)
	}
}

func TestDialContextIsNotRetained(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			cfg := k.start(t, testserver.Options{})
			e := newEnds()
			ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
			s, err := Dial(ctx, cfg, e.options())
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close(context.Background()) })
			time.Sleep(200 * time.Millisecond)
			if got, err := echo(callCtx(t), s, "alive"); err != nil || got != "alive" {
				t.Errorf("echo after the dial context ended = %q, %v", got, err)
			}
			if n := e.n.Load(); n != 0 {
				t.Errorf("OnEnd called: %v", <-e.ch)
			}
		})
	}
}

func TestDialFailures(t *testing.T) {
	t.Run("hang initialize", func(t *testing.T) {
		for _, k := range kinds {
			t.Run(k.name, func(t *testing.T) {
				cfg := k.start(t, testserver.Options{HangInitialize: true})
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				defer cancel()
				s, err := Dial(ctx, cfg, Options{})
				if err == nil {
					s.Close(ctx)
					t.Fatal("Dial succeeded")
				}
				var te *Error
				if !errors.As(err, &te) || te.Op != OpDial || !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("Dial = %v, want an *Error with Op dial and DeadlineExceeded", err)
				}
			})
		}
	})
	t.Run("no server", func(t *testing.T) {
		for _, cfg := range []Config{
			{Name: "missing", Stdio: &Stdio{Command: "/nonexistent/mcp-server"}},
			{Name: "refused", HTTP: &HTTP{URL: "http://127.0.0.1:1/mcp"}},
			{Name: "refused", SSE: &HTTP{URL: "http://127.0.0.1:1/sse"}},
		} {
			_, err := Dial(callCtx(t), cfg, Options{})
			var te *Error
			if !errors.As(err, &te) || te.Op != OpDial || te.Server != cfg.Name {
				t.Errorf("Dial(%v) = %v, want an *Error with Op dial", cfg, err)
			}
		}
	})
	t.Run("invalid config", func(t *testing.T) {
		_, err := Dial(callCtx(t), Config{Name: "x"}, Options{})
		var te *Error
		if !errors.As(err, &te) || te.Op != OpConfig {
			t.Errorf("Dial = %v, want an *Error with Op config", err)
		}
	})
}

func TestOnToolsChanged(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			changed := make(chan struct{}, 4)
			s := dial(t, k.start(t, testserver.Options{}), Options{OnToolsChanged: func() { changed <- struct{}{} }})
			if _, err := s.CallTool(callCtx(t), &mcp.CallToolParams{Name: "change_tools"}); err != nil {
				t.Fatal(err)
			}
			select {
			case <-changed:
			case <-time.After(callTimeout):
				t.Fatal("OnToolsChanged was not called")
			}
			tools, err := s.ListTools(callCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(tools, func(tool *mcp.Tool) bool { return tool.Name == "extra" }) {
				t.Error("the re-listed tools do not include extra")
			}
		})
	}
}

// TestInMemorySynctest proves that a session works inside a synctest bubble:
// minutes of virtual time pass in no real time.
func TestInMemorySynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s, err := Dial(ctx, memoryConfig(testserver.Options{}), Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := echo(ctx, s, "bubble"); err != nil || got != "bubble" {
			t.Fatalf("echo = %q, %v", got, err)
		}
		if err := s.Probe(ctx); err != nil {
			t.Fatalf("Probe: %v", err)
		}
		start := time.Now()
		res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"ms": 3 * 60 * 1000}})
		if err != nil || resultText(res) != "slept" {
			t.Fatalf("slow = %v, %v", res, err)
		}
		if d := time.Since(start); d != 3*time.Minute {
			t.Errorf("slow took %v of virtual time, want 3m", d)
		}
		// A forced close in the bubble: a call in flight, a close context
		// that ends.
		go s.CallTool(ctx, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"ms": 3_600_000}})
		synctest.Wait()
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if err := s.Close(cctx); !errors.Is(err, ErrForcedClose) {
			t.Errorf("Close = %v, want ErrForcedClose", err)
		}
		if err := s.Close(ctx); !errors.Is(err, ErrForcedClose) {
			t.Errorf("second Close = %v, want the same result", err)
		}
	})
}
