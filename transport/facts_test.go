package transport

// Facts: what each transport's errors look like under failure, measured with
// real servers and pinned here, so that an SDK upgrade that changes one fails
// loudly. The package documentation and the error classifier rely on them.

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The SDK's internal codes, detectable with errors.Is.
var (
	codeClientClosing = &jsonrpc.Error{Code: -32003}
	codeRejected      = &jsonrpc.Error{Code: -32005}
)

// fact is what an error must look like.
type fact struct {
	msg  string  // regexp the whole Error() text must match
	is   []error // errors.Is must hold
	not  []error // errors.Is must not hold
	code int64   // the code of the first *jsonrpc.Error errors.As finds; 0: none found
	bare error   // if set, the *Error wraps exactly this
	exit string  // if set, an *exec.ExitError with this String(); else none
	url  bool    // an *url.Error is in the chain
	// status is the *Error's HTTPStatus (0: none recorded). Not checked for
	// errors that are not *Error.
	status int
}

func checkFact(t *testing.T, what string, err error, f fact) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error", what)
		return
	}
	bad := func(format string, args ...any) {
		t.Helper()
		args = append([]any{what}, args...)
		t.Errorf("%s: "+format+"\n%s", append(args, chain(err))...)
	}
	if !regexp.MustCompile(`^(?s:` + f.msg + `)$`).MatchString(err.Error()) {
		bad("message does not match %q", f.msg)
	}
	for _, target := range f.is {
		if !errors.Is(err, target) {
			bad("errors.Is(%v) is false", target)
		}
	}
	for _, target := range f.not {
		if errors.Is(err, target) {
			bad("errors.Is(%v) is true", target)
		}
	}
	var je *jsonrpc.Error
	switch {
	case errors.As(err, &je) && je.Code != f.code:
		bad("first *jsonrpc.Error has code %d, want %d", je.Code, f.code)
	case je == nil && f.code != 0:
		bad("no *jsonrpc.Error, want code %d", f.code)
	}
	if f.bare != nil && errors.Unwrap(err) != f.bare {
		bad("the *Error does not wrap %v bare", f.bare)
	}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee) && ee.String() != f.exit:
		bad("exit status %q, want %q", ee.String(), f.exit)
	case ee == nil && f.exit != "":
		bad("no *exec.ExitError, want %q", f.exit)
	}
	var ue *url.Error
	if errors.As(err, &ue) != f.url {
		bad("*url.Error in chain: %v, want %v", ue != nil, f.url)
	}
	if te, ok := err.(*Error); ok && te.HTTPStatus != f.status {
		bad("HTTPStatus %d, want %d", te.HTTPStatus, f.status)
	}
}

// prefix is the start of every message of a session to server.
func prefix(server, op string) string {
	return regexp.QuoteMeta(`mcp server "`+server+`": `+op) + `: `
}

// callSlow starts a call that lasts a minute and returns once the server has
// received it (the stats tool counts calls on receipt, its own included).
func callSlow(t *testing.T, s *Session) <-chan error {
	t.Helper()
	base := stats(t, s)["tools/call"]
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		_, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"ms": 60_000}})
		done <- err
	}()
	for polls, deadline := 1, time.Now().Add(callTimeout); ; polls++ {
		if stats(t, s)["tools/call"] >= base+polls+1 {
			return done
		}
		if time.Now().After(deadline) {
			t.Fatal("the slow call did not reach the server")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func recv(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(callTimeout):
		t.Fatal("no result")
		return nil
	}
}

func shortCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	t.Cleanup(cancel)
	return ctx
}

func echoErr(t *testing.T, s *Session) error {
	_, err := echo(callCtx(t), s, "x")
	return err
}

// staleConn is what a POST gets when it goes out on a pooled connection that
// a stopped or restarted server has closed, before net/http noticed: net/http
// does not retry a POST it has written.
func staleConn(name string) fact {
	return fact{
		msg:  prefix(name, `call tool "echo"`) + `calling "tools/call": sending "tools/call": rejected by transport: Post "` + loopback + `": (EOF|http: server closed idle connection)`,
		is:   []error{codeRejected},
		code: -32005, url: true,
	}
}

// freshErr calls echo until the call does not fail on a stale connection
// (see staleConn), checking those that do.
func freshErr(t *testing.T, s *Session, name string) error {
	t.Helper()
	err := echoErr(t, s)
	for i := 0; i < 3 && isStale(err); i++ {
		checkFact(t, "stale connection", err, staleConn(name))
		err = echoErr(t, s)
	}
	return err
}

func isStale(err error) bool {
	return errors.Is(err, codeRejected) && !errors.Is(err, syscall.ECONNREFUSED) &&
		(errors.Is(err, io.EOF) || strings.Contains(err.Error(), "server closed idle connection"))
}

// frozenCallFact: a call to a server that froze fails at the call's own deadline,
// with the bare context error; the session then closes (see closeFrozen).
func frozenCallFact(t *testing.T, h *testserver.HTTPServer, s *Session, name string) {
	t.Helper()
	h.Freeze()
	_, err := echo(shortCtx(t), s, "x")
	checkFact(t, "deadline", err, fact{
		msg:  prefix(name, `call tool "echo"`) + `context deadline exceeded`,
		bare: context.DeadlineExceeded,
	})
	closeFrozen(t, s)
}

// closeFrozen closes a session whose HTTP server is frozen after a call
// timed out. The SDK sends a cancellation notice for that call on a goroutine
// (bounded by 5s); if it has begun, the graceful close waits for it and is
// forced; if not, the close is clean.
func closeFrozen(t *testing.T, s *Session) {
	t.Helper()
	if err := s.Close(shortCtx(t)); err != nil && !errors.Is(err, ErrForcedClose) {
		t.Errorf("Close = %v, want nil or ErrForcedClose", err)
	}
}

const (
	loopback    = `http://127\.0\.0\.1:\d+/mcp`
	refused     = `dial tcp 127\.0\.0\.1:\d+: connect: connection refused`
	sessionID   = `[A-Z0-9]+`
	forcedClose = `forced close: the close context ended first: context deadline exceeded`
)

func TestFactsStreamableHTTP(t *testing.T) {
	const name = "http-test"
	t.Run("negotiation", func(t *testing.T) {
		h := testserver.StartHTTP(t, testserver.Options{})
		s := dial(t, httpConfig(h), Options{})
		if s.ProtocolVersion() != "2025-11-25" || !regexp.MustCompile(`^`+sessionID+`$`).MatchString(s.ID()) {
			t.Errorf("protocol %q, session ID %q", s.ProtocolVersion(), s.ID())
		}
	})
	t.Run("server stopped", func(t *testing.T) {
		h := testserver.StartHTTP(t, testserver.Options{})
		e := newEnds()
		cfg := httpConfig(h)
		cfg.HTTP.MaxRetries = 1
		s := dial(t, cfg, e.options())
		inflight := callSlow(t, s)
		stopped := time.Now()
		h.Stop()
		checkFact(t, "call in flight", recv(t, inflight), fact{
			msg:  prefix(name, `call tool "slow"`) + `calling "tools/call": sending "tools/call": rejected by transport: Post "` + loopback + `": EOF`,
			is:   []error{codeRejected, io.EOF},
			not:  []error{mcp.ErrConnectionClosed},
			code: -32005, url: true,
		})
		// Connection refused: the call fails, the session stays open.
		checkFact(t, "later call", freshErr(t, s, name), fact{
			msg:  prefix(name, `call tool "echo"`) + `calling "tools/call": sending "tools/call": rejected by transport: Post "` + loopback + `": ` + refused,
			is:   []error{codeRejected, syscall.ECONNREFUSED},
			not:  []error{mcp.ErrConnectionClosed},
			code: -32005, url: true,
		})
		// The session ends when the event stream has failed to reconnect
		// MaxRetries times; the first retry waits at least a second.
		end := e.wait(t)
		if d := time.Since(stopped); d < time.Second {
			t.Errorf("OnEnd after %v: the SDK waits at least 1s before its first reconnect", d)
		}
		checkFact(t, "OnEnd", end, fact{
			msg: prefix(name, "end") + `standalone SSE stream: failed to reconnect \(session ID: ` + sessionID + `\): connection failed after 1 attempts: Get "` + loopback + `": ` + refused,
			not: []error{syscall.ECONNREFUSED, mcp.ErrConnectionClosed, mcp.ErrSessionMissing},
		})
		checkFact(t, "call after the end", echoErr(t, s), fact{
			msg: prefix(name, `call tool "echo"`) + `connection closed: calling "tools/call": client is closing: standalone SSE stream: failed to reconnect .*`,
			is:  []error{mcp.ErrConnectionClosed},
			not: []error{syscall.ECONNREFUSED, codeRejected},
		})
		checkFact(t, "Close", s.Close(callCtx(t)), fact{
			msg: prefix(name, "close") + `Delete "` + loopback + `": ` + refused,
			is:  []error{syscall.ECONNREFUSED},
			url: true,
		})
	})
	t.Run("dial refused by the server", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "no", http.StatusUnauthorized)
		}))
		defer srv.Close()
		_, err := Dial(callCtx(t), Config{Name: name, HTTP: &HTTP{URL: srv.URL}}, Options{})
		checkFact(t, "401", err, fact{
			msg:    prefix(name, "dial") + `calling "initialize": sending "initialize": Unauthorized`,
			not:    []error{codeRejected},
			status: http.StatusUnauthorized,
		})
	})
	t.Run("server stopped, no retry", func(t *testing.T) {
		h := testserver.StartHTTP(t, testserver.Options{})
		e := newEnds()
		cfg := httpConfig(h)
		cfg.HTTP.MaxRetries = -1
		dial(t, cfg, e.options())
		h.Stop()
		checkFact(t, "OnEnd", e.wait(t), fact{
			msg: prefix(name, "end") + `standalone SSE stream: exceeded 0 retries without progress \(session ID: ` + sessionID + `\)`,
		})
	})
	t.Run("transient statuses", func(t *testing.T) {
		for _, code := range []int{500, 502, 503, 504, 429} {
			h := testserver.StartHTTP(t, testserver.Options{})
			e := newEnds()
			s := dial(t, httpConfig(h), e.options())
			h.SetStatus(code)
			checkFact(t, http.StatusText(code), echoErr(t, s), fact{
				msg:  prefix(name, `call tool "echo"`) + `calling "tools/call": rejected by transport: sending "tools/call": ` + regexp.QuoteMeta(http.StatusText(code)),
				is:   []error{codeRejected},
				code: -32005, status: code,
			})
			h.SetStatus(0)
			if err := echoErr(t, s); err != nil {
				t.Errorf("after %d the session is broken: %v", code, err)
			}
			if e.n.Load() != 0 {
				t.Errorf("OnEnd after %d", code)
			}
		}
	})
	t.Run("other statuses break the session", func(t *testing.T) {
		for _, code := range []int{400, 401, 403} {
			h := testserver.StartHTTP(t, testserver.Options{})
			e := newEnds()
			s := dial(t, httpConfig(h), e.options())
			h.SetStatus(code)
			checkFact(t, http.StatusText(code), echoErr(t, s), fact{
				msg:    prefix(name, `call tool "echo"`) + `calling "tools/call": sending "tools/call": ` + regexp.QuoteMeta(http.StatusText(code)),
				not:    []error{codeRejected, mcp.ErrConnectionClosed},
				status: code,
			})
			checkFact(t, http.StatusText(code)+": OnEnd", e.wait(t), fact{
				msg: prefix(name, "end") + `sending "tools/call": ` + regexp.QuoteMeta(http.StatusText(code)),
			})
			h.SetStatus(0)
			if err := echoErr(t, s); !errors.Is(err, mcp.ErrConnectionClosed) {
				t.Errorf("after %d: %v, want ErrConnectionClosed", code, err)
			}
		}
	})
	t.Run("server forgot the session", func(t *testing.T) {
		h := testserver.StartHTTP(t, testserver.Options{})
		e := newEnds()
		s := dial(t, httpConfig(h), e.options())
		h.Restart(true)
		// The first POST after a restart may fail on a stale connection; the
		// session survives that.
		checkFact(t, "404", freshErr(t, s, name), fact{
			msg:    prefix(name, `call tool "echo"`) + `calling "tools/call": sending "tools/call": failed to connect \(session ID: ` + sessionID + `\): session not found`,
			is:     []error{mcp.ErrSessionMissing},
			not:    []error{mcp.ErrConnectionClosed, codeRejected},
			status: http.StatusNotFound,
		})
		checkFact(t, "after 404", echoErr(t, s), fact{
			msg: prefix(name, `call tool "echo"`) + `connection closed: calling "tools/call": client is closing: sending "tools/call": failed to connect \(session ID: ` + sessionID + `\): session not found`,
			is:  []error{mcp.ErrConnectionClosed},
			not: []error{mcp.ErrSessionMissing},
		})
		checkFact(t, "OnEnd", e.wait(t), fact{
			msg: prefix(name, "end") + `sending "tools/call": failed to connect \(session ID: ` + sessionID + `\): session not found`,
			is:  []error{mcp.ErrSessionMissing},
		})
		deletes := h.Count("DELETE")
		if err := s.Close(callCtx(t)); err != nil {
			t.Errorf("Close: %v", err)
		}
		if h.Count("DELETE") != deletes {
			t.Error("Close sent a DELETE for a missing session")
		}
	})
	t.Run("server restarted, sessions kept", func(t *testing.T) {
		h := testserver.StartHTTP(t, testserver.Options{})
		s := dial(t, httpConfig(h), Options{})
		h.Restart(false)
		if err := freshErr(t, s, name); err != nil {
			t.Errorf("call after a restart: %v", err)
		}
	})
	t.Run("frozen server", func(t *testing.T) {
		h := testserver.StartHTTP(t, testserver.Options{})
		s := dial(t, httpConfig(h), Options{})
		frozenCallFact(t, h, s, name)
	})
	t.Run("ping refused", func(t *testing.T) {
		h := testserver.StartHTTP(t, testserver.Options{RefusePing: true})
		s := dial(t, httpConfig(h), Options{})
		checkFact(t, "SDK ping", s.ClientSession().Ping(callCtx(t), nil), fact{
			msg:  `calling "ping": method not found: "ping"`,
			code: jsonrpc.CodeMethodNotFound,
		})
		if err := s.Probe(callCtx(t)); err != nil {
			t.Errorf("Probe of a ping-less server: %v", err)
		}
	})
	t.Run("server hangs in close", func(t *testing.T) {
		h := testserver.StartHTTP(t, testserver.Options{HangClose: true})
		s := dial(t, httpConfig(h), Options{})
		checkFact(t, "Close", s.Close(shortCtx(t)), fact{
			msg: prefix(name, "close") + forcedClose + `\nDelete "` + loopback + `": ` + forcedClose,
			is:  []error{ErrForcedClose, context.DeadlineExceeded},
			url: true,
		})
	})
	t.Run("clean close", func(t *testing.T) {
		h := testserver.StartHTTP(t, testserver.Options{})
		s := dial(t, httpConfig(h), Options{})
		if err := s.Close(callCtx(t)); err != nil {
			t.Errorf("Close: %v", err)
		}
		if h.Count("DELETE") != 1 {
			t.Errorf("%d DELETEs, want 1", h.Count("DELETE"))
		}
	})
}

func TestFactsStatelessHTTP(t *testing.T) {
	const name = "http-test"
	start := func(t *testing.T, o testserver.Options) (*testserver.HTTPServer, *Session, *ends) {
		o.Stateless = true
		h := testserver.StartHTTP(t, o)
		e := newEnds()
		s := dial(t, httpConfig(h), e.options())
		if s.ProtocolVersion() != "2026-07-28" || s.ID() != "" {
			t.Fatalf("protocol %q, session ID %q", s.ProtocolVersion(), s.ID())
		}
		return h, s, e
	}
	t.Run("server stopped", func(t *testing.T) {
		h, s, e := start(t, testserver.Options{})
		h.Stop()
		checkFact(t, "call", freshErr(t, s, name), fact{
			msg:  prefix(name, `call tool "echo"`) + `calling "tools/call": sending "tools/call": rejected by transport: Post "` + loopback + `": ` + refused,
			is:   []error{codeRejected, syscall.ECONNREFUSED},
			code: -32005, url: true,
		})
		// Nothing tells the session that the server is gone: no OnEnd, ever
		// (here: not in a second).
		time.Sleep(time.Second)
		if e.n.Load() != 0 {
			t.Error("OnEnd was called")
		}
		h.Restart(true)
		if err := freshErr(t, s, name); err != nil {
			t.Errorf("after a restart, no session to forget: %v", err)
		}
	})
	t.Run("transient statuses", func(t *testing.T) {
		h, s, _ := start(t, testserver.Options{})
		h.SetStatus(503)
		checkFact(t, "503", echoErr(t, s), fact{
			msg:  prefix(name, `call tool "echo"`) + `calling "tools/call": rejected by transport: sending "tools/call": Service Unavailable`,
			is:   []error{codeRejected},
			code: -32005, status: 503,
		})
	})
	t.Run("a server's error answer also wraps -32005", func(t *testing.T) {
		_, s, _ := start(t, testserver.Options{})
		_, err := s.CallTool(callCtx(t), &mcp.CallToolParams{Name: "nonexistent"})
		checkFact(t, "unknown tool", err, fact{
			msg:  prefix(name, `call tool "nonexistent"`) + `calling "tools/call": sending "tools/call": unknown tool "nonexistent": rejected by transport: Bad Request`,
			is:   []error{codeRejected},
			code: jsonrpc.CodeInvalidParams, // the first code errors.As finds is the server's
			// HTTPStatus tells a server's answer from a transport's rejection.
			status: http.StatusBadRequest,
		})
	})
	t.Run("SDK ping does not reach the server", func(t *testing.T) {
		h, s, _ := start(t, testserver.Options{})
		before := h.Count("ping")
		checkFact(t, "SDK ping", s.ClientSession().Ping(callCtx(t), nil), fact{
			msg:  `calling "ping": sending "ping": missing or invalid _meta field "io\.modelcontextprotocol/protocolVersion": rejected by transport: Bad Request`,
			is:   []error{codeRejected},
			code: jsonrpc.CodeInvalidParams,
		})
		if h.Count("ping") != before+1 {
			t.Error("the SDK's ping did not reach the HTTP handler")
		}
		if n := stats(t, s)["ping"]; n != 0 {
			t.Errorf("the SDK's ping reached the MCP server %d times: the HTTP layer should reject it", n)
		}
	})
	t.Run("SDK ListTools is cached with a TTL", func(t *testing.T) {
		h := testserver.StartHTTP(t, testserver.Options{Stateless: true, ToolsTTL: time.Hour})
		client := mcp.NewClient(&mcp.Implementation{Name: "raw", Version: "1"}, nil)
		cs, err := client.Connect(callCtx(t), &mcp.StreamableClientTransport{Endpoint: h.URL()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		before := h.Count("tools/list")
		for range 2 {
			if _, err := cs.ListTools(callCtx(t), nil); err != nil {
				t.Fatal(err)
			}
		}
		if got := h.Count("tools/list") - before; got != 1 {
			t.Errorf("two SDK ListTools made %d requests, want 1 (the second from the cache)", got)
		}
		// The session's ListTools and Probe do reach the wire: see
		// TestListToolsIsNeverCached, TestProbeReachesTheWireOverHTTP.
	})
	t.Run("frozen server", func(t *testing.T) {
		h, s, _ := start(t, testserver.Options{})
		frozenCallFact(t, h, s, name)
	})
	t.Run("close", func(t *testing.T) {
		h, s, _ := start(t, testserver.Options{HangClose: true})
		if err := s.Close(callCtx(t)); err != nil {
			t.Errorf("Close: %v", err)
		}
		if h.Count("DELETE") != 0 {
			t.Error("Close sent a DELETE without a session")
		}
	})
}

func TestFactsSSE(t *testing.T) {
	const name = "sse-test"
	start := func(t *testing.T, o testserver.Options) (*testserver.HTTPServer, *Session, *ends) {
		o.SSE = true
		h := testserver.StartHTTP(t, o)
		e := newEnds()
		s := dial(t, sseConfig(h), e.options())
		if s.ProtocolVersion() != "2025-11-25" || s.ID() != "" {
			t.Fatalf("protocol %q, session ID %q", s.ProtocolVersion(), s.ID())
		}
		// Dial asks for 2025-11-25 over SSE: the SDK's SSE server may answer
		// server/discover with 2026-07-28 (a race in Server.Connect), which
		// has no SSE binding.
		if n := h.Count("server/discover"); n != 0 {
			t.Errorf("Dial sent %d server/discover over SSE", n)
		}
		return h, s, e
	}
	t.Run("server stopped", func(t *testing.T) {
		h, s, e := start(t, testserver.Options{})
		inflight := callSlow(t, s)
		h.Stop()
		checkFact(t, "call in flight", recv(t, inflight), fact{
			msg: prefix(name, `call tool "slow"`) + `calling "tools/call": EOF`,
			is:  []error{io.EOF},
			not: []error{mcp.ErrConnectionClosed},
		})
		checkFact(t, "OnEnd", e.wait(t), fact{
			msg: prefix(name, "end") + `EOF`,
			is:  []error{io.EOF},
		})
		checkFact(t, "later call", echoErr(t, s), fact{
			msg: prefix(name, `call tool "echo"`) + `connection closed: calling "tools/call": client is closing: EOF`,
			is:  []error{mcp.ErrConnectionClosed},
			not: []error{io.EOF},
		})
		if err := s.Close(callCtx(t)); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	t.Run("any error status breaks the session", func(t *testing.T) {
		for _, code := range []int{500, 502, 503, 429, 401, 404} {
			h, s, e := start(t, testserver.Options{})
			h.SetStatus(code)
			checkFact(t, http.StatusText(code), echoErr(t, s), fact{
				msg:    prefix(name, `call tool "echo"`) + `calling "tools/call": failed to write: ` + regexp.QuoteMeta(strconv.Itoa(code)+" "+http.StatusText(code)),
				not:    []error{codeRejected, mcp.ErrConnectionClosed},
				status: code,
			})
			e.wait(t)
			h.SetStatus(0)
			if err := echoErr(t, s); !errors.Is(err, mcp.ErrConnectionClosed) {
				t.Errorf("after %d: %v, want ErrConnectionClosed", code, err)
			}
		}
	})
	t.Run("server restarted", func(t *testing.T) {
		for _, forget := range []bool{false, true} {
			h, s, e := start(t, testserver.Options{})
			h.Restart(forget)
			// The event stream is the session: it does not survive.
			checkFact(t, "OnEnd", e.wait(t), fact{msg: prefix(name, "end") + `EOF`, is: []error{io.EOF}})
			if err := echoErr(t, s); !errors.Is(err, mcp.ErrConnectionClosed) {
				t.Errorf("after a restart: %v, want ErrConnectionClosed", err)
			}
		}
	})
	t.Run("frozen server", func(t *testing.T) {
		h, s, _ := start(t, testserver.Options{})
		frozenCallFact(t, h, s, name)
	})
	t.Run("ping refused", func(t *testing.T) {
		_, s, _ := start(t, testserver.Options{RefusePing: true})
		checkFact(t, "SDK ping", s.ClientSession().Ping(callCtx(t), nil), fact{
			msg:  `calling "ping": method not found: "ping"`,
			code: jsonrpc.CodeMethodNotFound,
		})
		if err := s.Probe(callCtx(t)); err != nil {
			t.Errorf("Probe of a ping-less server: %v", err)
		}
	})
	t.Run("close sends nothing", func(t *testing.T) {
		h, s, _ := start(t, testserver.Options{HangClose: true})
		if err := s.Close(callCtx(t)); err != nil {
			t.Errorf("Close: %v", err)
		}
		if h.Count("DELETE") != 0 {
			t.Error("Close sent a DELETE")
		}
	})
}

func TestFactsInMemory(t *testing.T) {
	const name = "memory-test"
	start := func(t *testing.T, o testserver.Options) (*Session, *ends) {
		e := newEnds()
		s := dial(t, memoryConfig(o), e.options())
		if s.ProtocolVersion() != "2026-07-28" || s.ID() != "" {
			t.Fatalf("protocol %q, session ID %q", s.ProtocolVersion(), s.ID())
		}
		return s, e
	}
	t.Run("server closes the session", func(t *testing.T) {
		s, e := start(t, testserver.Options{})
		_, err := s.CallTool(callCtx(t), &mcp.CallToolParams{Name: "crash"})
		checkFact(t, "call in flight", err, fact{
			msg: prefix(name, `call tool "crash"`) + `calling "tools/call": EOF`,
			is:  []error{io.EOF},
		})
		checkFact(t, "OnEnd", e.wait(t), fact{msg: prefix(name, "end") + `EOF`, is: []error{io.EOF}})
		checkFact(t, "later call", echoErr(t, s), fact{
			msg: prefix(name, `call tool "echo"`) + `connection closed: calling "tools/call": client is closing: EOF`,
			is:  []error{mcp.ErrConnectionClosed},
			not: []error{codeClientClosing}, // the cause is text only (%v)
		})
	})
	t.Run("deadline", func(t *testing.T) {
		s, _ := start(t, testserver.Options{})
		_, err := s.CallTool(shortCtx(t), &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"ms": 60_000}})
		checkFact(t, "deadline", err, fact{
			msg:  prefix(name, `call tool "slow"`) + `context deadline exceeded`,
			bare: context.DeadlineExceeded,
		})
	})
	t.Run("ping", func(t *testing.T) {
		s, _ := start(t, testserver.Options{})
		// On 2026-07-28 the SDK's server still answers a ping without _meta.
		if err := s.ClientSession().Ping(callCtx(t), nil); err != nil {
			t.Errorf("SDK ping: %v", err)
		}
		s, _ = start(t, testserver.Options{RefusePing: true})
		checkFact(t, "SDK ping refused", s.ClientSession().Ping(callCtx(t), nil), fact{
			msg:  `calling "ping": method not found: "ping"`,
			code: jsonrpc.CodeMethodNotFound,
		})
		if err := s.Probe(callCtx(t)); err != nil {
			t.Errorf("Probe of a ping-less server: %v", err)
		}
	})
	t.Run("close waits for calls in flight", func(t *testing.T) {
		s, _ := start(t, testserver.Options{})
		inflight := callSlow(t, s)
		checkFact(t, "Close", s.Close(shortCtx(t)), fact{
			msg: prefix(name, "close") + forcedClose,
			is:  []error{ErrForcedClose, context.DeadlineExceeded},
		})
		err := recv(t, inflight)
		want := fact{msg: prefix(name, `call tool "slow"`) + `calling "tools/call": EOF`, is: []error{io.EOF}}
		if errors.Is(err, io.ErrClosedPipe) {
			// The in-memory pipe's two ends close in either order: the call's read
			// sees EOF, or the closed pipe when its own end closed first (about one
			// run in a hundred under load).
			want = fact{msg: prefix(name, `call tool "slow"`) + `calling "tools/call": io: read/write on closed pipe`, is: []error{io.ErrClosedPipe}}
		}
		checkFact(t, "call in flight", err, want)
	})
}

// The SDK's transports differ in what they keep of the Connect context. Dial
// hides that (TestDialContextIsNotRetained); these pin the SDK's behaviour.
func TestFactsConnectContext(t *testing.T) {
	connect := func(t *testing.T, tr mcp.Transport) (*mcp.ClientSession, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "raw", Version: "1"}, nil).Connect(ctx, tr, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs, cancel
	}
	t.Run("SSE keeps it", func(t *testing.T) {
		h := testserver.StartHTTP(t, testserver.Options{SSE: true})
		cs, cancel := connect(t, &mcp.SSEClientTransport{Endpoint: h.URL()})
		cancel()
		done := make(chan error, 1)
		go func() { done <- cs.Wait() }()
		recv(t, done) // the session ended with the Connect context
	})
	t.Run("streamable detaches it", func(t *testing.T) {
		h := testserver.StartHTTP(t, testserver.Options{})
		cs, cancel := connect(t, &mcp.StreamableClientTransport{Endpoint: h.URL()})
		cancel()
		time.Sleep(200 * time.Millisecond)
		if _, err := cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}}); err != nil {
			t.Errorf("call after the Connect context ended: %v", err)
		}
	})
	t.Run("command ignores it", func(t *testing.T) {
		cs, cancel := connect(t, &mcp.CommandTransport{Command: exec.Command(testserver.Build(t))})
		cancel()
		time.Sleep(200 * time.Millisecond)
		if _, err := cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}}); err != nil {
			t.Errorf("call after the Connect context ended: %v", err)
		}
	})
	t.Run("in-memory ignores it", func(t *testing.T) {
		st, ct := mcp.NewInMemoryTransports()
		ss, err := testserver.New(testserver.Options{}).Connect(context.Background(), st, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer ss.Wait()
		cs, cancel := connect(t, ct)
		cancel()
		time.Sleep(200 * time.Millisecond)
		if _, err := cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}}); err != nil {
			t.Errorf("call after the Connect context ended: %v", err)
		}
		cs.Close()
	})
}
