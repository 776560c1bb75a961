package transport

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// subscribeServer is a server with one resource. With slow set, its subscribe handler
// takes that long before the subscription is in force; without a handler (noHandler),
// it cannot take subscriptions, and says so in its acknowledgment.
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
				// Stateless streamable HTTP: the listen is a POST whose event stream
				// carries the acknowledgment.
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

// TestSubscribeRefusedInTheAcknowledgment: a server on 2026-07-28 that cannot take
// subscriptions acknowledges the listen without the resource; Subscribe returns that
// refusal as the server's error, at once.
func TestSubscribeRefusedInTheAcknowledgment(t *testing.T) {
	srv, _ := newSubscribeServer(0, true)
	s := dial(t, Config{Name: "sub", InMemory: &InMemory{Server: srv}}, Options{})
	start := time.Now()
	err := s.Subscribe(callCtx(t), "test://a")
	var rpc *jsonrpc.Error
	if !errors.As(err, &rpc) {
		t.Fatalf("Subscribe = %v, want the server's refusal (a *jsonrpc.Error)", err)
	}
	if took := time.Since(start); took >= ackWait {
		t.Errorf("the refusal took %v: it was not read from the acknowledgment", took)
	}
}
