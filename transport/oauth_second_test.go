package transport

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
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

// lateAcks is a TokenStore in memory whose Saves are made at once but return
// only when the test lets them (or their context ends): a remote secret manager
// whose answers are slow.
type lateAcks struct {
	heldStore
	mu    sync.Mutex
	acks  []chan struct{}
	saved []string // the refresh tokens saved, in order
}

func (s *lateAcks) Save(ctx context.Context, key string, c *Credentials) error {
	if err := s.heldStore.Save(ctx, key, c); err != nil {
		return err
	}
	ack := make(chan struct{})
	s.mu.Lock()
	s.acks = append(s.acks, ack)
	s.saved = append(s.saved, c.Token.RefreshToken)
	s.mu.Unlock()
	select {
	case <-ack:
	case <-ctx.Done():
	}
	return nil
}

// ackAll lets every Save that waits return.
func (s *lateAcks) ackAll() int {
	s.mu.Lock()
	acks := s.acks
	s.acks = nil
	s.mu.Unlock()
	for _, a := range acks {
		close(a)
	}
	return len(acks)
}

// TestStoredElsewhereIsNotOverwritten: the store's writer saves the newest
// credentials it is given, and never older ones after newer ones of the client's
// own; but credentials the client took from the store (another process's: a
// login there, or its refresh) were not in that order. A refresh's save waiting
// for the one under way was made after the client had adopted newer ones from
// the store, before a refresh (their token expires later) or for a refusal (a
// login elsewhere): the store lost the other process's credentials for the
// client's older ones. Credentials so taken from the store are now the newest
// saved: a save of older ones waiting is not made.
func TestStoredElsewhereIsNotOverwritten(t *testing.T) {
	for _, how := range []string{"before a refresh", "for a refusal"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { storedElsewhere(t, how == "for a refusal") })
		})
	}
}

func storedElsewhere(t *testing.T, refusal bool) {
	p := newPipeAuth(t, authtest.Options{ClientID: "pre", TokenLifetime: 2 * time.Second}, false)
	store := &lateAcks{}
	o, err := NewOAuth(p.config(&Auth{Store: store, Timeout: 100 * time.Millisecond}, false), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for store.ackAll() > 0 {
			synctest.Wait()
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := o.Close(ctx); err != nil {
			t.Error(err)
		}
	}()
	if err := o.SetCredentials(p.issued(time.Now().Add(-time.Minute))); err != nil { // expired: refreshed by the first request
		t.Fatal(err)
	}
	token := func(what string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		tok, _ := o.bearer(ctx)
		if tok == "" {
			t.Fatalf("%s: no token", what)
		}
		return tok
	}
	token("the first refresh")          // saved, its answer late (within storeTimeout)
	time.Sleep(1600 * time.Millisecond) // the token is about to expire (2s): refreshed again
	token("the second refresh")         // its save waits for the first's
	elsewhere := p.issued(time.Now().Add(time.Hour))
	elsewhere.Server = "authed"
	if err := store.heldStore.Save(context.Background(), "authed", elsewhere); err != nil { // another process's login
		t.Fatal(err)
	}
	if refusal {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.srv.MCPURL(), nil)
		resp := &http.Response{StatusCode: http.StatusUnauthorized, Header: http.Header{}, Body: http.NoBody, Request: req}
		if err := o.Authorize(ctx, req, resp); err != nil {
			t.Fatalf("the refusal: %v", err)
		}
	} else {
		time.Sleep(1600 * time.Millisecond)
	}
	if got := token("the next request"); got != elsewhere.Token.AccessToken {
		t.Fatal("the credentials in the store, newer, were not adopted")
	}
	for store.ackAll() > 0 {
		synctest.Wait()
	}
	stored, _ := store.heldStore.Load(context.Background(), "authed")
	if stored == nil || stored.Token.RefreshToken != elsewhere.Token.RefreshToken {
		store.mu.Lock()
		t.Errorf("the store lost the credentials another process saved, adopted by the client, for older ones of its own (saves: %d)", len(store.saved))
		store.mu.Unlock()
	}
}
