package effects

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestJudge: the retry verdict, rule by rule. A read is sent again after any failure
// that broke its session; a tool call only when the server cannot have run it.
func TestJudge(t *testing.T) {
	lost := &transport.Error{Server: "s", Op: transport.OpRequest, Sent: true, Err: io.EOF}
	expiredSent := &transport.Error{Server: "s", Op: transport.OpRequest, Sent: true, HTTPStatus: 404, Err: mcp.ErrSessionMissing}
	expiredUnsent := &transport.Error{Server: "s", Op: transport.OpRequest, HTTPStatus: 404, Err: mcp.ErrSessionMissing}
	refused := &transport.Error{Server: "s", Op: transport.OpRequest, Err: syscall.ECONNREFUSED}
	answered := &transport.Error{Server: "s", Op: transport.OpRequest, Err: &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "no"}}
	// A POST answered 400 (server-everything's answer to a session ID it does not
	// know, as after a restart; the spec says 404): the transport leaves Sent unset.
	badRequest := &transport.Error{Server: "s", Op: transport.OpCallTool, HTTPStatus: 400, Err: errors.New("sending \"tools/call\": Bad Request")}
	badRequestOther := &transport.Error{Server: "s", Op: transport.OpCallTool, Sent: true, HTTPStatus: 400, Err: errors.New("Bad Request")}
	for _, c := range []struct {
		name string
		err  error
		rule Retry
		want Verdict
	}{
		{"read after a broken session", lost, RetrySafe, Verdict{Cause: states.CauseLost, Retry: true}},
		{"call after a broken session", lost, RetryIfNotRun, Verdict{Cause: states.CauseLost, MayHaveRun: true}},
		{"call after an expiry it did not reach", expiredUnsent, RetryIfNotRun, Verdict{Cause: states.CauseExpired, Retry: true}},
		{"call after an expiry another request met", expiredSent, RetryIfNotRun, Verdict{Cause: states.CauseExpired, MayHaveRun: true}},
		{"call refused at connect", refused, RetryIfNotRun, Verdict{Cause: states.CauseLost, Retry: true}},
		{"call whose POST the server refused (4xx)", badRequest, RetryIfNotRun, Verdict{Cause: states.CauseLost, Retry: true}},
		{"call in flight when another request was refused", badRequestOther, RetryIfNotRun, Verdict{Cause: states.CauseLost, MayHaveRun: true}},
		{"an answer is never retried", answered, RetrySafe, Verdict{Cause: states.CauseServer}},
		{"our own close, read", &transport.Error{Op: transport.OpRequest, Err: io.EOF}, RetrySafe, Verdict{Cause: states.CauseLost, Retry: true}},
	} {
		if got := Judge(c.err, false, c.rule); got != c.want {
			t.Errorf("%s: Judge = %+v, want %+v", c.name, got, c.want)
		}
	}
	if got := Judge(io.EOF, true, RetryIfNotRun); got != (Verdict{Cause: states.CauseArtifact, MayHaveRun: true}) {
		t.Errorf("a call caught by our own close: %+v", got)
	}
}

// TestClassifyStatusFirst (issue 17 item 13): a 401 or 403 is auth even when its body is
// a JSON-RPC error, as the SDK hands it back; a dial's 404 or 405 says the URL is no MCP
// endpoint (config); a missing command is config.
func TestClassifyStatusFirst(t *testing.T) {
	rpc := &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "unauthorized"}
	rejected := &jsonrpc.Error{Code: codeRejected}
	body401 := &transport.Error{Server: "s", Op: transport.OpRequest, HTTPStatus: 401, Err: fmt.Errorf("calling: %w: %w: Unauthorized", rpc, rejected)}
	for _, c := range []struct {
		err    error
		want   states.Cause
		ownToo bool
	}{
		{body401, states.CauseAuth, true},
		{&transport.Error{Op: transport.OpDial, HTTPStatus: 403, Err: rpc}, states.CauseAuth, true},
		{&transport.Error{Op: transport.OpDial, HTTPStatus: 404, Err: errors.New("Not Found")}, states.CauseConfig, true},
		{&transport.Error{Op: transport.OpDial, HTTPStatus: 405, Err: errors.New("Method Not Allowed")}, states.CauseConfig, true},
		{&transport.Error{Op: transport.OpRequest, HTTPStatus: 404, Err: errors.New("Not Found")}, states.CauseLost, false},
		{&transport.Error{Op: transport.OpDial, Err: &exec.Error{Name: "nope", Err: exec.ErrNotFound}}, states.CauseConfig, true},
		{&transport.Error{Op: transport.OpDial, Err: fmt.Errorf("fork/exec: %w", syscall.EACCES)}, states.CauseConfig, true},
		{errors.Join(io.EOF, syscall.ENOENT), states.CauseConfig, true},
		{rpc, states.CauseServer, true},
		// The answer came, and the SDK could not read it: the server's.
		{&transport.Error{Op: transport.OpCallTool, Answered: true, Err: fmt.Errorf("calling: %w", errors.New(`unrecognized content type "x"`))}, states.CauseServer, true},
		// The answer came, and then the connection broke: that counts.
		{&transport.Error{Op: transport.OpCallTool, Answered: true, Err: io.EOF}, states.CauseLost, false},
		{&transport.Error{Op: transport.OpCallTool, Answered: true, Err: context.DeadlineExceeded}, states.CauseTimeout, true},
	} {
		for _, own := range []bool{false, true} {
			if own && !c.ownToo {
				continue // opaque text: noise of our own close
			}
			if got := Classify(c.err, own); got != c.want {
				t.Errorf("Classify(%v, %v) = %s, want %s", c.err, own, got, c.want)
			}
		}
	}
	// And a real 401 with a JSON-RPC error body, through the SDK.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"token rejected"}}`)
	}))
	defer srv.Close()
	ctx, cancel := contextWithTimeout(t)
	defer cancel()
	_, err := transport.Dial(ctx, transport.Config{Name: "s", HTTP: &transport.HTTP{URL: srv.URL}}, transport.Options{})
	if got := Classify(err, false); got != states.CauseAuth {
		t.Errorf("a real 401 with a JSON-RPC body: Classify(%v) = %s, want auth", err, got)
	}
}

// TestJitterSaturates (issue 17 item 14): a backoff_max near the longest duration never
// wraps to a zero wait.
func TestJitterSaturates(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	p := policies()
	p.BackoffBase = time.Duration(math.MaxInt64 / 10 * 9)
	p.BackoffMax = p.BackoffBase
	p.BackoffJitter = 0.2
	for _, attempts := range []int{1, 2, 60} {
		v := &machine.Vars{Attempts: attempts}
		for range 1000 {
			d, ok := delays["backoff"].Next(v, p, r)
			if !ok || d < p.BackoffBase/10*8 {
				t.Fatalf("backoff near the longest duration, attempt %d = %s", attempts, d)
			}
		}
	}
	if got := jitter(time.Duration(math.MaxInt64), 1, r); got <= 0 {
		t.Fatalf("jitter(max) = %s", got)
	}
}

func contextWithTimeout(t *testing.T) (context.Context, context.CancelFunc) {
	t.Helper()
	return context.WithTimeout(context.Background(), 10*time.Second)
}

// TestClassifyWhatIsNotMCP (issue 13): an HTTP endpoint that answers, but not as MCP,
// is config (an HTML page); one that says JSON and sends garbage is protocol.
func TestClassifyWhatIsNotMCP(t *testing.T) {
	for _, c := range []struct {
		ct, body string
		want     states.Cause
	}{
		{"text/html", "<html>a login page</html>", states.CauseConfig},
		{"application/json", "this is not json", states.CauseProtocol},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", c.ct)
			_, _ = io.WriteString(w, c.body)
		}))
		ctx, cancel := contextWithTimeout(t)
		_, err := transport.Dial(ctx, transport.Config{Name: "s", HTTP: &transport.HTTP{URL: srv.URL}}, transport.Options{})
		cancel()
		srv.Close()
		if got := Classify(err, false); got != c.want {
			t.Errorf("%s answer: Classify(%v) = %s, want %s", c.ct, err, got, c.want)
		}
	}
}

// TestRegistryIsACopy: a caller that rebinds a name in its registry changes no other
// registry (a test once rebound keepalive for every spec loaded after it).
func TestRegistryIsACopy(t *testing.T) {
	a := Registry()
	delete(a.Delays, "keepalive")
	delete(a.Guards, "tripped")
	b := Registry()
	if _, ok := b.Delays["keepalive"]; !ok {
		t.Error("keepalive deleted from one registry is gone from the next")
	}
	if _, ok := b.Guards["tripped"]; !ok {
		t.Error("tripped deleted from one registry is gone from the next")
	}
}
