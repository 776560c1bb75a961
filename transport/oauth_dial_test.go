package transport

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpfsm/mcpfsm/internal/authtest"
	"github.com/modelcontextprotocol/go-sdk/auth"
)

// promptCounter is an authorization code fetcher that counts the times it asks the
// user to log in; the user refuses the first refuse of them (closes the browser),
// and logs in after that.
type promptCounter struct {
	prompts atomic.Int64
	refuse  int64
}

func (p *promptCounter) fetch(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
	if p.prompts.Add(1) <= p.refuse {
		return nil, errors.New("the user closed the browser")
	}
	return authtest.Fetcher(nil)(ctx, args)
}

// protectedServer starts a protected MCP server on loopback: stateless (it speaks
// protocol 2026-07-28, server/discover), or with sessions (2025-11-25).
func protectedServer(t *testing.T, opts authtest.Options, stateless bool) *authtest.Server {
	ms := authtest.MCPServer()
	t.Cleanup(func() { authtest.CloseSessions(ms) })
	h := authtest.Streamable(ms)
	if stateless {
		h = authtest.Stateless(ms)
	}
	return authtest.New(opts, h).Start(t)
}

// TestOneLoginPromptPerDial: the go-sdk's client sends server/discover first and,
// on any error, falls back to initialize (mcp.Client.Connect). A discover refused
// for its credentials whose authorization failed (the user closed the browser) was
// followed by an initialize refused again, whose authorization asked the user to
// log in a second time, for one connect. An authorization that failed is now final
// for the dial: the initialize is not sent, and the dial fails with that refusal.
func TestOneLoginPromptPerDial(t *testing.T) {
	for _, stateless := range []bool{true, false} {
		name := "2025-11-25 with sessions"
		if stateless {
			name = "2026-07-28"
		}
		t.Run(name, func(t *testing.T) {
			srv := protectedServer(t, authtest.Options{}, stateless)
			user := &promptCounter{refuse: 1 << 30}
			err := dialErr(authConfig(srv, &Auth{Fetcher: user.fetch, RedirectURL: redirect}, false))
			var ae *AuthError
			if !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized || !strings.Contains(err.Error(), "the user closed the browser") {
				t.Errorf("err = %v, want the refusal: an *AuthError, 401, saying why the authorization failed", err)
			}
			if got := [2]int64{user.prompts.Load(), srv.Refused.Load()}; got != [2]int64{1, 1} {
				t.Errorf("one dial asked the user to log in %d times, and sent %d requests the server refused; want 1, 1", got[0], got[1])
			}
		})
	}
}

// TestLoginSpeaksTheNewestProtocol: a server that speaks 2026-07-28 and requires a
// token. Logged in at the first prompt, the session speaks 2026-07-28 (the
// discover is sent again with the new token). A first login the user refused, and
// a second in the same dial that worked (TestOneLoginPromptPerDial), settled the
// session on 2025-11-25: the go-sdk had fallen back to initialize when the
// discover was refused, and the server, stateless, kept no session of it. Now
// that dial fails with the refusal, and the next one, logged in, speaks
// 2026-07-28.
func TestLoginSpeaksTheNewestProtocol(t *testing.T) {
	for _, refuse := range []int64{0, 1} {
		t.Run([]string{"logged in at once", "a login refused first"}[refuse], func(t *testing.T) {
			srv := protectedServer(t, authtest.Options{}, true)
			user := &promptCounter{refuse: refuse}
			cfg := authConfig(srv, &Auth{Fetcher: user.fetch, RedirectURL: redirect, Store: &FileStore{Dir: t.TempDir()}}, false)
			if refuse > 0 {
				ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
				s, err := Dial(ctx, cfg, Options{})
				cancel()
				if err == nil {
					p := s.ProtocolVersion()
					_ = s.Close(context.Background())
					t.Fatalf("the dial whose login the user refused connected, on %s, after %d prompts", p, user.prompts.Load())
				}
			}
			s := dial(t, cfg, Options{})
			if p := s.ProtocolVersion(); p != "2026-07-28" {
				t.Errorf("after the login the session speaks %q, want 2026-07-28", p)
			}
			if err := authEcho(t, s, "in"); err != nil {
				t.Error(err)
			}
			if n := user.prompts.Load(); n != refuse+1 {
				t.Errorf("%d prompts, want %d (one per dial)", n, refuse+1)
			}
		})
	}
}

// TestSlowRefreshSettlesOnNoOlderProtocol: a stored token the server refuses
// (expired early), whose refresh takes longer than the three quarters of the
// dial's time its discover's authorization may take: the discover failed (the
// authorization server gave no answer in time), the go-sdk fell back to
// initialize, whose authorization found the refresh landed, and the dial settled
// on 2025-11-25 with a stateless server that speaks 2026-07-28 and kept nothing
// of the session. Now the dial fails as the discover did (ErrAuthServerUnavailable,
// not a refusal: a connection retries it as a server that is down), the refresh's
// token is saved, and the next dial speaks 2026-07-28 with it.
func TestSlowRefreshSettlesOnNoOlderProtocol(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ms := authtest.MCPServer()
		p := &pipeAuth{srv: authtest.New(authtest.Options{ClientID: "pre", RotateRefresh: true}, authtest.Stateless(ms))}
		p.pipe = authtest.NewPipe(p.srv)
		t.Cleanup(func() {
			p.srv.Close()
			p.pipe.Close()
		})
		store := &heldStore{}
		if err := store.Save(context.Background(), "authed", p.issued(time.Now().Add(time.Hour))); err != nil {
			t.Fatal(err)
		}
		p.srv.Expire()
		p.srv.TokenDelay.Store(int64(2600 * time.Millisecond)) // past 3/4 of the dial's 3s, within it
		cfg := p.config(&Auth{Store: store}, false)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		s, err := Dial(ctx, cfg, Options{})
		cancel()
		if err == nil {
			_ = s.Close(context.Background())
			t.Fatalf("the dial connected on %s (session %q) though its discover failed for want of credentials", s.ProtocolVersion(), s.ID())
		}
		var ae *AuthError
		if !errors.Is(err, ErrAuthServerUnavailable) || errors.As(err, &ae) {
			t.Errorf("err = %v, want ErrAuthServerUnavailable, no refusal", err)
		}
		p.srv.TokenDelay.Store(0)
		ctx, cancel = context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		s, err = Dial(ctx, cfg, Options{})
		if err != nil {
			t.Fatalf("the next dial: %v", err)
		}
		defer s.Close(context.Background())
		if got := s.ProtocolVersion(); got != "2026-07-28" {
			t.Errorf("the next dial speaks %q, want 2026-07-28", got)
		}
		if n := p.srv.Refreshes.Load(); n != 1 {
			t.Errorf("%d refreshes, want 1 (the first dial's, saved)", n)
		}
	})
}
