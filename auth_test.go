package mcpfsm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpfsm/mcpfsm/internal/authtest"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"
)

const testRedirect = "http://127.0.0.1:3000/callback"

// authBubble is a protected MCP server on a pipe network inside a synctest bubble,
// and a connection to it with the given auth (its Client set to the pipe's).
type authBubble struct {
	srv   *authtest.Server
	ms    *mcp.Server
	pipe  *authtest.Pipe
	c     *Conn
	mu    sync.Mutex
	trs   []machine.Transition
	store *transport.FileStore
}

func newAuthBubble(t *testing.T, opts authtest.Options, a *transport.Auth, pol *machine.Policies) *authBubble {
	b := &authBubble{ms: authtest.MCPServer(), store: &transport.FileStore{Dir: t.TempDir()}}
	b.srv = authtest.New(opts, authtest.Streamable(b.ms))
	b.pipe = authtest.NewPipe(b.srv)
	a.Client = b.pipe.Client()
	if a.Store == nil {
		a.Store = b.store
	}
	if pol == nil {
		p := DefaultSpec().Defaults()
		pol = &p
	}
	var err error
	b.c, err = Open(transport.Config{Name: "remote", HTTP: &transport.HTTP{URL: b.srv.MCPURL(), Client: b.pipe.Client(), Auth: a}},
		Options{Logger: quietLogger(), Policies: pol, Observer: func(tr machine.Transition) {
			b.mu.Lock()
			b.trs = append(b.trs, tr)
			b.mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// close closes the connection and the network; the bubble's goroutines end.
func (b *authBubble) close(t *testing.T) {
	if err := b.c.Close(context.Background()); err != nil {
		t.Error(err)
	}
	authtest.CloseSessions(b.ms)
	b.pipe.Close()
}

func (b *authBubble) count(to states.State) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, tr := range b.trs {
		if tr.To == to {
			n++
		}
	}
	return n
}

func (b *authBubble) timeline() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var s strings.Builder
	for _, tr := range b.trs {
		fmt.Fprintf(&s, "  %v\n", tr)
	}
	return s.String()
}

func (b *authBubble) echo(ctx context.Context, text string) error {
	res, err := b.c.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": text}})
	if err != nil {
		return err
	}
	if got := res.Content[0].(*mcp.TextContent).Text; got != text {
		return fmt.Errorf("echo = %q, want %q", got, text)
	}
	return nil
}

// creds are credentials of the pre-registered client.
// login gives the connection credentials the server just issued (scope mcp), waits
// for it to be ready, and returns the tokens.
func (b *authBubble) login(t *testing.T) (access, refresh string) {
	t.Helper()
	access, refresh, expiry := b.srv.Issue("mcp")
	if err := b.c.SetCredentials(context.Background(), b.creds(access, refresh, expiry, "mcp")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, b.c, states.Ready)
	return access, refresh
}

func (b *authBubble) creds(access, refresh string, expiry time.Time, scopes ...string) *transport.Credentials {
	return &transport.Credentials{
		TokenURL: b.srv.URL + "/token", ClientID: "pre", Scopes: scopes,
		Token: &oauth2.Token{AccessToken: access, RefreshToken: refresh, Expiry: expiry},
	}
}

func waitFor(t *testing.T, c *Conn, want states.State) {
	t.Helper()
	if _, err := c.WaitState(context.Background(), func(st states.State) bool { return st == want }); err != nil {
		t.Fatalf("waiting for %s: %v", want, err)
	}
}

// TestScenario_ExpiredTokenRefreshedWithoutDrop: a token that expires mid-session is
// refreshed before the next request; calls every ten minutes over two virtual hours all
// succeed, the server saw one refresh per expiry and one login, and the session was
// never replaced.
func TestScenario_ExpiredTokenRefreshedWithoutDrop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newAuthBubble(t, authtest.Options{TokenLifetime: time.Hour, RotateRefresh: true, ClientID: "pre"},
			&transport.Auth{RedirectURL: testRedirect}, nil)
		// A login by another process (`mcpfsm auth login`) writes the store; the
		// connection, headless, is told.
		access, refresh, expiry := b.srv.Issue()
		if err := b.store.Save(context.Background(), "remote", &transport.Credentials{
			Resource: b.srv.MCPURL(), TokenURL: b.srv.URL + "/token", ClientID: "pre",
			Token: &oauth2.Token{AccessToken: access, RefreshToken: refresh, Expiry: expiry},
		}); err != nil {
			t.Fatal(err)
		}
		b.c.CredentialsChanged()
		waitFor(t, b.c, states.Ready)
		ctx := context.Background()
		for i := range 12 {
			if err := b.echo(ctx, fmt.Sprint(i)); err != nil {
				t.Fatalf("call %d at %v: %v\n%s", i, time.Now(), err, b.timeline())
			}
			time.Sleep(10 * time.Minute)
		}
		if n := b.srv.Refreshes.Load(); n != 2 {
			t.Errorf("%d refreshes in two hours of one-hour tokens, want 2", n)
		}
		if n := b.srv.RefreshFails.Load(); n != 0 {
			t.Errorf("%d refused refreshes (the rotated refresh token was not kept?)", n)
		}
		if n := b.count(states.TearingDown) + b.count(states.Replacing); n != 0 {
			t.Errorf("the session was dropped or replaced\n%s", b.timeline())
		}
		if st := b.c.Status(); st.Failures != 0 {
			t.Errorf("failures counted: %+v", st)
		}
		stored, _ := b.store.Load(ctx, "remote")
		if stored == nil || stored.Token.RefreshToken == refresh {
			t.Errorf("the store does not hold the rotated refresh token")
		}
		b.close(t)
	})
}

// TestScenario_RevokedTokenParksUnauthorized: the server revokes the token; the call
// that meets it fails with ErrUnauthorized and the server's challenge, and the
// connection reaches unauthorized right after; over a virtual hour it tries no more
// often than auth_recheck_interval allows, spending no budget and never opening the
// breaker; calls meanwhile fail fast saying what to run; a new token brings it to
// ready at once.
func TestScenario_RevokedTokenParksUnauthorized(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newAuthBubble(t, authtest.Options{ClientID: "pre", Scopes: []string{"mcp"}},
			&transport.Auth{RedirectURL: testRedirect, LoginHint: "mcpfsm auth login servers.yaml remote"}, nil)
		ctx := context.Background()
		access, refresh := b.login(t)
		if err := b.echo(ctx, "before"); err != nil {
			t.Fatal(err)
		}
		b.srv.Revoke()
		err := b.echo(ctx, "revoked")
		var ce *CallError
		var ae *transport.AuthError
		if !errors.As(err, &ce) || ce.Cause != states.CauseAuth || !errors.Is(err, ErrUnauthorized) || !errors.As(err, &ae) {
			t.Fatalf("the call that met the revocation: %v", err)
		}
		waitFor(t, b.c, states.Unauthorized)
		connects := b.count(states.Connecting)
		start := time.Now()
		err = b.echo(ctx, "meanwhile")
		if time.Since(start) != 0 || !errors.Is(err, ErrUnauthorized) || !errors.Is(err, ErrUnavailable) || !errors.Is(err, transport.ErrLoginRequired) ||
			!errors.As(err, &ae) || !strings.HasSuffix(ae.Challenge.ResourceMetadata, "/.well-known/oauth-protected-resource/mcp") ||
			!strings.Contains(err.Error(), "run mcpfsm auth login servers.yaml remote") {
			t.Errorf("a call while unauthorized: %v", err)
		}
		for _, secret := range []string{access, refresh} {
			if strings.Contains(err.Error(), secret) || strings.Contains(b.timeline(), secret) {
				t.Errorf("a token shows in an error or a transition")
			}
		}
		time.Sleep(time.Hour)
		synctest.Wait() // a re-check due now has run
		recheck := b.c.Policies().AuthRecheckInterval
		if n := b.count(states.Connecting) - connects; n > int(time.Hour/recheck) {
			t.Errorf("%d attempts in a virtual hour, want at most %d (auth_recheck_interval %v)\n%s", n, time.Hour/recheck, recheck, b.timeline())
		}
		if b.count(states.BreakerOpen) != 0 || b.c.Status().Failures != 0 {
			t.Errorf("budget spent or breaker opened\n%s", b.timeline())
		}
		if b.c.State() != states.Unauthorized {
			t.Errorf("state %s after an hour", b.c.State())
		}
		start = time.Now()
		access, _ = b.login(t)
		if d := time.Since(start); d != 0 {
			t.Errorf("ready after %v of virtual time, want at once", d)
		}
		if err := b.echo(ctx, "after"); err != nil {
			t.Fatal(err)
		}
		if stored, _ := b.store.Load(ctx, "remote"); stored == nil || stored.Token.AccessToken != access {
			t.Errorf("the new token, which works, was not saved")
		}
		b.close(t)
	})
}

// TestScenario_TokenStoreSurvivesRestart: tokens a Manager obtained (and refreshed,
// with a rotating refresh token) are used by the next Manager on the same config
// without a login, and refreshed again with the rotated refresh token.
func TestScenario_TokenStoreSurvivesRestart(t *testing.T) {
	ms := authtest.MCPServer()
	t.Cleanup(func() { authtest.CloseSessions(ms) })
	srv := authtest.New(authtest.Options{RotateRefresh: true, ClientID: "pre"}, authtest.Streamable(ms)).Start(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "servers.yaml")
	text := fmt.Sprintf("version: 1\nservers:\n  remote:\n    url: %s\n    auth:\n      store: tokens\n      redirect_url: %s\n", srv.MCPURL(), testRedirect)
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	manager := func() *Manager {
		cfg, err := LoadConfig(file)
		if err != nil {
			t.Fatal(err)
		}
		m, err := NewManager(cfg, ManagerOptions{Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	call := func(m *Manager, text string) error {
		res, err := m.Call(ctx, "remote.echo", map[string]any{"text": text})
		if err != nil {
			return err
		}
		if got := res.Content[0].(*mcp.TextContent).Text; got != text {
			return fmt.Errorf("echo = %q", got)
		}
		return nil
	}
	// The first process logs in (here: the login's token, handed over).
	m1 := manager()
	if _, err := m1.Conn("remote").WaitState(ctx, func(st states.State) bool { return st == states.Unauthorized }); err != nil {
		t.Fatalf("without a token: %v", err)
	}
	access, refresh, expiry := srv.Issue()
	if err := m1.Conn("remote").SetCredentials(ctx, &transport.Credentials{
		TokenURL: srv.URL + "/token", ClientID: "pre", Token: &oauth2.Token{AccessToken: access, RefreshToken: refresh, Expiry: expiry},
	}); err != nil {
		t.Fatal(err)
	}
	if err := call(m1, "one"); err != nil {
		t.Fatal(err)
	}
	srv.Expire()
	if err := call(m1, "two"); err != nil { // refreshed; the refresh token rotated
		t.Fatal(err)
	}
	if err := m1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The next process: no login, the stored tokens.
	m2 := manager()
	defer m2.Close(ctx)
	if err := call(m2, "three"); err != nil {
		t.Fatal(err)
	}
	srv.Expire()
	if err := call(m2, "four"); err != nil {
		t.Fatal(err)
	}
	if a, r, f := srv.Authorizations.Load(), srv.Refreshes.Load(), srv.RefreshFails.Load(); a != 0 || r != 2 || f != 0 {
		t.Errorf("%d logins, %d refreshes, %d refused refreshes; want 0, 2, 0", a, r, f)
	}
	info, err := os.Stat(filepath.Join(dir, "tokens", "remote.json"))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("token file: %v, %v", info, err)
	}
}

// TestScenario_TokenEndpointOutageRecovers: the token expires while the token
// endpoint is down (503). Nothing refused the credentials: the call fails as one
// whose server is down would (ErrAuthServerUnavailable, cause lost, not
// ErrUnauthorized), and once the endpoint is back the connection recovers by itself,
// within a breaker cooldown. It once went to unauthorized, saying "login required",
// and waited out auth_recheck_interval (30 minutes) for a refresh token that was
// good all along; and, the refresh having failed once, never refreshed again.
func TestScenario_TokenEndpointOutageRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newAuthBubble(t, authtest.Options{ClientID: "pre", Scopes: []string{"mcp"}},
			&transport.Auth{RedirectURL: testRedirect, LoginHint: "mcpfsm auth login servers.yaml remote"}, nil)
		ctx := context.Background()
		b.login(t)
		// The connection may have gone unauthorized before the credentials were
		// set (it starts without them): only what follows the outage counts.
		before := b.count(states.Unauthorized)
		b.srv.Outage.Store(true)
		b.srv.Expire()
		err := b.echo(ctx, "during")
		var ce *CallError
		if !errors.As(err, &ce) || ce.Cause != states.CauseLost || !errors.Is(err, transport.ErrAuthServerUnavailable) ||
			errors.Is(err, ErrUnauthorized) || errors.Is(err, transport.ErrLoginRequired) {
			t.Errorf("the call during the outage: %v", err)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		b.srv.Outage.Store(false)
		back := time.Now()
		waitFor(t, b.c, states.Ready)
		if d, bound := time.Since(back), b.c.Policies().BreakerCooldownMax+b.c.Policies().ConnectTimeout; d > bound {
			t.Errorf("ready %v after the token endpoint came back, want within %v\n%s", d, bound, b.timeline())
		}
		if n := b.count(states.Unauthorized) - before; n != 0 {
			t.Errorf("went unauthorized %d times after the outage began\n%s", n, b.timeline())
		}
		if err := b.echo(ctx, "after"); err != nil {
			t.Fatal(err)
		}
		if n := b.srv.Refreshes.Load(); n != 1 {
			t.Errorf("%d refreshes, want 1", n)
		}
		b.close(t)
	})
}

// TestConnCloseEndsItsRenewal: a refresh whose call gave up goes on, for the next
// request (the authorization server may have rotated the refresh token). The
// connection's OAuth client is now closed with it: Close waits for that refresh
// within teardown_timeout and abandons it then. It once ran on past Close, with no
// owner, for up to the auth timeout.
func TestConnCloseEndsItsRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newAuthBubble(t, authtest.Options{ClientID: "pre", RotateRefresh: true},
			&transport.Auth{RedirectURL: testRedirect, Timeout: time.Hour}, nil)
		b.login(t)
		b.srv.Expire() // refused from now on: the 401 asks for a refresh
		b.srv.TokenDelay.Store(int64(10 * time.Minute))
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		if err := b.echo(ctx, "hurried"); err == nil {
			t.Fatal("a call of 100ms succeeded through a refresh that takes 10 minutes")
		}
		cancel()
		start := time.Now()
		if err := b.c.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		synctest.Wait() // what Close cancelled has unwound
		// Closing the client again with no time to wait says whether a renewal is
		// still under way (an *Error: it abandons it).
		done, stop := context.WithCancel(context.Background())
		stop()
		underWay := oauthOf(b.c.cfg.Load().cfg).Close(done) != nil
		if teardown := b.c.Policies().TeardownTimeout; took > teardown || underWay {
			t.Errorf("Close took %v (teardown_timeout %v); a renewal under way after it: %v", took, teardown, underWay)
		}
		authtest.CloseSessions(b.ms)
		b.srv.Close()
		b.pipe.Close()
	})
}
