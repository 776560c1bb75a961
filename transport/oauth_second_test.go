package transport

import (
	"context"
	"slices"
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

// TestStepUpRightAfterALogin: a server that names, in the challenge of its 401,
// less scope than it needs, and asks for the rest with a 403 insufficient_scope
// once it sees a token. A dial's server/discover was refused, the user logged in,
// the discover sent again was refused for more scope: that was the end of the
// request's authorizations ("refused again with new credentials"), an
// authorization that failed, final for the dial since an authorization is: its
// initialize was not sent (before that, its own authorization was the step-up),
// and the connect failed as unauthorized, the login's credentials never saved. A
// request refused for more scope right after its login now has the step-up
// asked for (once), and is sent again.
func TestStepUpRightAfterALogin(t *testing.T) {
	for _, stateless := range []bool{true, false} {
		name, want := "2025-11-25 with sessions", "2025-11-25"
		if stateless {
			name, want = "2026-07-28", "2026-07-28"
		}
		t.Run(name, func(t *testing.T) {
			srv := protectedServer(t, authtest.Options{Scopes: []string{"read"}, LaterScopes: []string{"admin"}}, stateless)
			user := &promptCounter{}
			store := &FileStore{Dir: t.TempDir()}
			s := dial(t, authConfig(srv, &Auth{Fetcher: user.fetch, RedirectURL: redirect, Store: store}, false), Options{})
			if v := s.ProtocolVersion(); v != want {
				t.Errorf("the session speaks %q, want %q", v, want)
			}
			if n := user.prompts.Load(); n != 2 {
				t.Errorf("the user was asked to log in %d times, want 2 (the login, the step-up)", n)
			}
			if err := authEcho(t, s, "scoped"); err != nil {
				t.Fatal(err)
			}
			c, err := store.Load(context.Background(), "authed")
			if err != nil || c == nil || !slices.Contains(c.Scopes, "admin") {
				t.Errorf("stored: %v, %v; want the step-up's credentials", c, err)
			}
		})
	}
}
