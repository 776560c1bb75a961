package transport

import (
	"context"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/internal/authtest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestAFailedRefreshIsNotFinalForTheSession: the go-sdk's client keeps the values
// of the context its Connect was given for the connection's own requests: the
// standalone event stream (and its reconnects), the answers to the server's
// requests (ping, roots/list, sampling), the closing DELETE. Dial gives it the
// dial's record, in which an authorization that failed is final: one refresh
// that got no answer (the authorization server down for a moment) while the
// session answered a ping of the server's left every later answer of the
// session's failed unsent, for good, the authorization server back or not. The
// record's failure is final only while the dial lasts.
func TestAFailedRefreshIsNotFinalForTheSession(t *testing.T) {
	ms := authtest.MCPServer()
	t.Cleanup(func() { authtest.CloseSessions(ms) })
	srv := authtest.New(authtest.Options{}, authtest.Streamable(ms)).Start(t)
	store := loggedIn(t, srv)
	authtest.CloseSessions(ms) // the login's
	s := dial(t, authConfig(srv, &Auth{Store: store}, false), Options{})
	if v := s.ProtocolVersion(); v != "2025-11-25" {
		t.Fatalf("the session speaks %q, want 2025-11-25 (a session of the server's, which can ping)", v)
	}
	var ss *mcp.ServerSession
	for x := range ms.Sessions() {
		ss = x
	}
	if ss == nil {
		t.Fatal("the server has no session")
	}
	ping := func(d time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		return ss.Ping(ctx, nil)
	}
	if err := ping(callTimeout); err != nil {
		t.Fatalf("the server's ping before any refusal: %v", err)
	}
	srv.Expire()
	srv.Outage.Store(true)
	if err := ping(time.Second); err == nil {
		t.Fatal("the session answered a ping with an expired token while the token endpoint was down")
	}
	srv.Outage.Store(false)
	if err := ping(callTimeout); err != nil {
		t.Errorf("the server's ping once the token endpoint is back: %v (the session's answers fail unsent for good)", err)
	}
	if err := authEcho(t, s, "after"); err != nil {
		t.Errorf("a call once the token endpoint is back: %v", err)
	}
}
