package transport

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// subscribeServer is a server with one resource, test://a. With slow set, its
// subscribe handler takes that long before the subscription is in force, and it
// refuses any other resource with an error; without a handler (noHandler), it cannot
// take subscriptions, and says so in its acknowledgment.
type subscribeServer struct {
	mu   sync.Mutex
	subs map[string]bool
}

func (ss *subscribeServer) has(uri string) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.subs[uri]
}

func newSubscribeServer(slow time.Duration, noHandler bool) (*mcp.Server, *subscribeServer) {
	rec := &subscribeServer{subs: map[string]bool{}}
	opts := &mcp.ServerOptions{}
	if !noHandler {
		opts.SubscribeHandler = func(_ context.Context, req *mcp.SubscribeRequest) error {
			if req.Params.URI != "test://a" {
				return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "no such resource"}
			}
			time.Sleep(slow)
			rec.mu.Lock()
			rec.subs[req.Params.URI] = true
			rec.mu.Unlock()
			return nil
		}
		opts.UnsubscribeHandler = func(context.Context, *mcp.UnsubscribeRequest) error { return nil }
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "subscribe", Version: "1"}, opts)
	srv.AddResource(&mcp.Resource{URI: "test://a", Name: "a"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "test://a", Text: "a"}}}, nil
	})
	return srv, rec
}

// TestSubscribeWaitsForTheAcknowledgment: on 2026-07-28 a subscription is a
// subscriptions/listen stream that the SDK sends without waiting; Session.Subscribe
// returns only once the server has acknowledged it, so the subscription is in force
// (a restore is complete before calls move to a new session, and an update right
// after Subscribe is not lost). Before 2026-07-28 the request's answer says as much.
func TestSubscribeWaitsForTheAcknowledgment(t *testing.T) {
	const slow = 300 * time.Millisecond
	for _, tc := range []struct{ name, version string }{
		{"in-memory", ""}, {"in-memory 2025-11-25", "2025-11-25"}, {"stateless http", "http"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			version := tc.version
			srv, rec := newSubscribeServer(slow, false)
			cfg := Config{Name: "sub", InMemory: &InMemory{Server: srv}, ProtocolVersion: version}
			if version == "http" {
				// Stateless streamable HTTP: the SDK's send of the listen returns once
				// the response to its POST has begun, after the registration; nothing
				// is waited for beyond it.
				h := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Stateless: true}))
				t.Cleanup(h.Close)
				cfg, version = Config{Name: "sub", HTTP: &HTTP{URL: h.URL}}, ""
			}
			s := dial(t, cfg, Options{})
			if version == "" && !newProtocol(s.cs) {
				t.Fatalf("the in-memory session speaks %s, want 2026-07-28 or later", s.InitializeResult().ProtocolVersion)
			}
			start := time.Now()
			if err := s.Subscribe(callCtx(t), "test://a"); err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			if !rec.has("test://a") {
				t.Errorf("Subscribe returned after %v, before the server had the subscription", took)
			}
			if took >= ackWait {
				t.Errorf("Subscribe took %v: it waited out ackWait rather than for the acknowledgment", took)
			}
			if version == "" {
				// Subscribed already: the SDK sends nothing, and nothing is waited for.
				start = time.Now()
				if err := s.Subscribe(callCtx(t), "test://a"); err != nil || time.Since(start) >= slow {
					t.Errorf("a second Subscribe: %v after %v", err, time.Since(start))
				}
			}
			if err := s.Unsubscribe(callCtx(t), "test://a"); err != nil {
				t.Errorf("Unsubscribe: %v", err)
			}
		})
	}
}

// TestSubscribeRefused: on 2026-07-28 a server refuses a subscription in its
// acknowledgment (it cannot take subscriptions) or by answering the listen with an
// error (the resource is unknown; over HTTP, status 400 with the error); the SDK
// drops both unread, in memory and over HTTP. Subscribe returns the
// refusal at once as the server's error, for several subscriptions in flight at once,
// and again for a second try (the SDK session does not keep a refused one). A refused
// listen, acknowledged and answered at once, is not the end of the session (as a
// listen the server agreed to and ended is over streamable HTTP).
func TestSubscribeRefused(t *testing.T) {
	for _, tc := range []struct {
		name      string
		noHandler bool
		uri       string
	}{
		{"in the acknowledgment", true, "test://a"},
		{"by an error", false, "test://unknown"},
	} {
		for _, link := range []string{"in-memory", "stateless http"} {
			t.Run(tc.name+"/"+link, func(t *testing.T) {
				srv, _ := newSubscribeServer(0, tc.noHandler)
				cfg := Config{Name: "sub", InMemory: &InMemory{Server: srv}}
				if link == "stateless http" {
					// The go-sdk's server refuses with status 400 and the error, or in
					// the acknowledgment on the listen's SSE stream.
					h := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Stateless: true}))
					t.Cleanup(h.Close)
					cfg = Config{Name: "sub", HTTP: &HTTP{URL: h.URL}}
				}
				var ended atomic.Pointer[error]
				s := dial(t, cfg, Options{OnEnd: func(err error) { ended.Store(&err) }})
				if !newProtocol(s.cs) {
					t.Fatalf("the session speaks %s, want 2026-07-28 or later", s.InitializeResult().ProtocolVersion)
				}
				subscribeRefused(t, s, tc.uri)
				// The session still serves.
				if _, err := s.ClientSession().ReadResource(callCtx(t), &mcp.ReadResourceParams{URI: "test://a"}); err != nil {
					t.Errorf("ReadResource after the refusals: %v", err)
				}
				time.Sleep(50 * time.Millisecond) // OnEnd runs on a goroutine of its own
				if p := ended.Load(); p != nil {
					t.Errorf("the refusals ended the session: %v", *p)
				}
			})
		}
	}
}

// subscribeRefused subscribes s to uri three times at once, twice over, and
// expects the server's refusal each time, without waiting out ackWait.
func subscribeRefused(t *testing.T, s *Session, uri string) {
	t.Helper()
	for try := range 2 {
		start := time.Now()
		errs := make(chan error, 3)
		for range 3 {
			go func() { errs <- s.Subscribe(callCtx(t), uri) }()
		}
		for range 3 {
			err := <-errs
			var rpc *jsonrpc.Error
			if !errors.As(err, &rpc) {
				t.Errorf("try %d: Subscribe = %v, want the server's refusal (a *jsonrpc.Error)", try, err)
			}
		}
		if took := time.Since(start); took >= ackWait {
			t.Errorf("try %d: the refusals took %v: they were not read from the server's answer", try, took)
		}
	}
}

// TestToolsChangedAfterListensEnd: a go-sdk server forgets a session's list-changed
// registrations whenever any of its subscriptions/listen ends (relistenRule). After
// 70 Unsubscribes and a refused Subscribe, a change of the server's tools is still
// reported, on every transport.
func TestToolsChangedAfterListensEnd(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			changed := make(chan struct{}, 16)
			s := dial(t, k.start(t, testserver.Options{}), Options{OnToolsChanged: func() {
				select {
				case changed <- struct{}{}:
				default:
				}
			}})
			// More rounds than a session could keep listens open for, one per end.
			for range 70 {
				if err := s.Subscribe(callCtx(t), "test://static/a"); err != nil {
					t.Fatal(err)
				}
				if err := s.Unsubscribe(callCtx(t), "test://static/a"); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Subscribe(callCtx(t), "test://nothing/here"); err == nil {
				t.Error("Subscribe to an unknown resource succeeded")
			}
			// The server ends each listen, and forgets, on its own time: a change
			// made before that would be reported anyway.
			time.Sleep(200 * time.Millisecond)
			// Each listen sent again, once in force, reports the lists changed (a
			// change may have been missed meanwhile: TestToolsChangedWhileRelistening).
			for len(changed) > 0 {
				<-changed
			}
			for range 2 {
				if _, err := s.CallTool(callCtx(t), &mcp.CallToolParams{Name: "change_tools"}); err != nil {
					t.Fatal(err)
				}
				select {
				case <-changed:
				case <-time.After(5 * time.Second):
					t.Fatalf("a change of the tools after the listens ended was not reported (protocol %s)", s.ProtocolVersion())
				}
			}
		})
	}
}

// TestResubscribeAfterUnsubscribe: Unsubscribe then Subscribe of one resource leaves
// the resource subscribed. (A go-sdk server runs the unsubscribe of an ended listen
// keyed by session and resource: run after the new listen registered, it took the
// new subscription away.)
func TestResubscribeAfterUnsubscribe(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			s := dial(t, k.start(t, testserver.Options{}), Options{})
			const uri = "test://static/a"
			lost := 0
			for range 30 {
				for _, step := range []func(context.Context, string) error{s.Subscribe, s.Unsubscribe, s.Subscribe} {
					if err := step(callCtx(t), uri); err != nil {
						t.Fatal(err)
					}
				}
				res, err := s.CallTool(callCtx(t), &mcp.CallToolParams{Name: "touch", Arguments: map[string]any{"uri": uri}})
				if err != nil || res.IsError {
					t.Fatalf("touch: %v %+v", err, res)
				}
				// The number of sessions subscribed: 0 if the subscription was taken
				// away (over stateless HTTP each listen is a session of its own, and
				// the old one may still count until the server sees it cancelled).
				if got := res.Content[0].(*mcp.TextContent).Text; got == "0" {
					lost++
				}
				if err := s.Unsubscribe(callCtx(t), uri); err != nil {
					t.Fatal(err)
				}
			}
			if lost > 0 {
				t.Errorf("after Unsubscribe and Subscribe, the server had no subscription in %d of 30 rounds (protocol %s)", lost, s.ProtocolVersion())
			}
		})
	}
}

// TestSubscribeHTTPListenAnswers: over streamable HTTP, a listen whose answer is
// not an SSE stream: a JSON answer held until the listen ends does not hold
// Subscribe beyond ackWait (nor past its context), and a refusal that is no
// JSON-RPC message (503, plain text) is an error at once. (Each ends the go-sdk's
// connection, the first when the listen is cancelled: each has a session of its own.)
func TestSubscribeHTTPListenAnswers(t *testing.T) {
	for _, answer := range []string{"held", "plain"} {
		t.Run(answer, func(t *testing.T) {
			srv, _ := newSubscribeServer(0, false)
			sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Stateless: true})
			h := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Mcp-Method") != "subscriptions/listen" {
					sdk.ServeHTTP(w, r)
					return
				}
				switch answer {
				case "held":
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusOK)
					w.(http.Flusher).Flush()
					<-r.Context().Done()
				case "plain":
					http.Error(w, "busy", http.StatusServiceUnavailable)
				}
			}))
			t.Cleanup(h.Close)
			s := dial(t, Config{Name: "sub", HTTP: &HTTP{URL: h.URL}}, Options{})
			if !newProtocol(s.cs) {
				t.Fatalf("the session speaks %s, want 2026-07-28 or later", s.InitializeResult().ProtocolVersion)
			}
			start := time.Now()
			err := s.Subscribe(callCtx(t), "test://a")
			took := time.Since(start)
			switch answer {
			case "held":
				if took > ackWait+time.Second {
					t.Errorf("Subscribe with its listen's JSON answer held took %v, want at most about ackWait (%v)", took, ackWait)
				}
				if err != nil {
					t.Errorf("Subscribe with its listen's JSON answer held = %v, want it taken as made", err)
				}
				// Nothing waits on the listen any more: it is not kept for the
				// session's life (one more for each such Subscribe).
				s.listens.mu.Lock()
				kept := len(s.listens.sent)
				s.listens.mu.Unlock()
				if kept != 0 {
					t.Errorf("after Subscribe took its listen as made, %d listens are kept, want 0", kept)
				}
			case "plain":
				// (A 503 answer ends the go-sdk's whole connection.)
				if err == nil {
					t.Error("Subscribe answered 503 = nil, want an error")
				}
				if took >= ackWait {
					t.Errorf("the 503 took %v to be seen", took)
				}
			}
		})
	}
}

// TestSubscribeRacingCloseLeavesNoListen: the go-sdk's Close cancels the
// subscriptions/listen calls its session holds; a Subscribe that registers its
// listen after that (it raced the close) was never cancelled, and its goroutine
// waited for ever, holding the closed session. On 2026-07-28 the SDK's Subscribe of
// a closed session even returns nil (the listen is sent without awaiting), so the
// Subscribe reported success too.
func TestSubscribeRacingCloseLeavesNoListen(t *testing.T) {
	listening := func() int {
		buf := make([]byte, 1<<20)
		return strings.Count(string(buf[:runtime.Stack(buf, true)]), "mcp.callSubscriptionsListen")
	}
	before := listening()
	for range 20 {
		s := dial(t, Config{Name: "mem", InMemory: &InMemory{Server: testserver.New(testserver.Options{})}}, Options{})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		closed := make(chan struct{})
		go func() {
			_ = s.Close(ctx)
			close(closed)
		}()
		<-closed
		if err := s.Subscribe(ctx, testserver.ResourceA); err == nil {
			t.Errorf("Subscribe on a closed session: no error")
		}
		cancel()
	}
	deadline := time.Now().Add(2 * time.Second)
	for listening() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := listening() - before; n > 0 {
		t.Errorf("%d subscriptions/listen goroutines of closed sessions are left", n)
	}
}
