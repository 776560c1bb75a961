package transport

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mcpfsm/mcpfsm/internal/authtest"
	"golang.org/x/oauth2"
)

// pipeAuth is a protected MCP server on a pipe network inside a synctest bubble
// (authtest.NewPipe), for the OAuth client's tests in virtual time.
type pipeAuth struct {
	srv  *authtest.Server
	pipe *authtest.Pipe
}

func newPipeAuth(t *testing.T, opts authtest.Options, sse bool) *pipeAuth {
	ms := authtest.MCPServer()
	h := authtest.Streamable(ms)
	if sse {
		h = authtest.SSE(ms)
	}
	p := &pipeAuth{srv: authtest.New(opts, h)}
	p.pipe = authtest.NewPipe(p.srv)
	t.Cleanup(func() {
		authtest.CloseSessions(ms)
		p.srv.Close()
		p.pipe.Close()
	})
	return p
}

// config is the server's config with auth a, over the pipe.
func (p *pipeAuth) config(a *Auth, sse bool) Config {
	a.Client = p.pipe.Client()
	h := &HTTP{URL: p.srv.MCPURL(), Client: p.pipe.Client(), Auth: a}
	if sse {
		return Config{Name: "authed", SSE: h}
	}
	return Config{Name: "authed", HTTP: h}
}

// issued returns credentials of the pre-registered client "pre" that the server
// has just issued, their token expiring at expiry (as the client sees it).
func (p *pipeAuth) issued(expiry time.Time) *Credentials {
	access, refresh, _ := p.srv.Issue("mcp")
	return &Credentials{
		Resource: p.srv.MCPURL(), TokenURL: p.srv.URL + "/token", ClientID: "pre", Scopes: []string{"mcp"},
		Token: &oauth2.Token{AccessToken: access, RefreshToken: refresh, Expiry: expiry},
	}
}

// renewalUnderWay reports whether o has a renewal under way.
func (o *OAuth) renewalUnderWay() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.renewing != nil
}

// TestOAuthCloseWaitsForItsRenewal: a refresh whose request gave up goes on (an
// authorization server that rotates refresh tokens has retired the old one), but
// nothing waited for it: it ran past the Close of its session or connection for up
// to Auth.Timeout, without an owner. Close now waits for it, so that its token is
// saved when Close returns, and no renewal starts after Close.
func TestOAuthCloseWaitsForItsRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPipeAuth(t, authtest.Options{ClientID: "pre", RotateRefresh: true}, false)
		store := &heldStore{}
		o, err := NewOAuth(p.config(&Auth{Store: store}, false), nil)
		if err != nil {
			t.Fatal(err)
		}
		old := p.issued(time.Now().Add(-time.Minute))
		if err := o.SetCredentials(old); err != nil {
			t.Fatal(err)
		}
		p.srv.TokenDelay.Store(int64(time.Second))
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		if tok, _ := o.bearer(ctx); tok != "" {
			t.Fatal("a token from a refresh that takes 1s, in 100ms")
		}
		cancel()
		ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		err = o.Close(ctx)
		waited := time.Since(start)
		stored, _ := store.Load(context.Background(), "authed")
		type outcome struct {
			CloseErr       error
			Waited         bool // for the refresh, not for its timeout
			SavedRotated   bool // the refresh's token, with its new refresh token, in the store
			UnderWayAfter  bool
			RefreshesAfter int64
		}
		got := outcome{err, waited > 0 && waited < 5*time.Second,
			stored != nil && stored.Token.RefreshToken != old.Token.RefreshToken && stored.Token.RefreshToken != "",
			o.renewalUnderWay(), 0}
		// Nothing renews after Close.
		if err := o.SetCredentials(p.issued(time.Now().Add(-time.Minute))); err != nil {
			t.Fatal(err)
		}
		if tok, _ := o.bearer(context.Background()); tok != "" {
			t.Error("a closed client gave a token it had to refresh")
		}
		time.Sleep(time.Minute)
		got.RefreshesAfter = p.srv.Refreshes.Load()
		want := outcome{Waited: true, SavedRotated: true, RefreshesAfter: 1}
		if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b error) bool { return (a == nil) == (b == nil) })); diff != "" {
			t.Errorf("Close (-want +got):\n%s", diff)
		}
	})
}

// TestOAuthCloseAbandonsItsRenewal: Close waits for a renewal under way no longer
// than its context: then it cancels it (its request to the token endpoint ends)
// and says so; the renewal's goroutine ends with it, not at Auth.Timeout.
func TestOAuthCloseAbandonsItsRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPipeAuth(t, authtest.Options{ClientID: "pre", RotateRefresh: true}, false)
		o, err := NewOAuth(p.config(&Auth{Store: &heldStore{}, Timeout: time.Hour}, false), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := o.SetCredentials(p.issued(time.Now().Add(-time.Minute))); err != nil {
			t.Fatal(err)
		}
		p.srv.TokenDelay.Store(int64(10 * time.Minute))
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		if tok, _ := o.bearer(ctx); tok != "" {
			t.Fatal("a token from a refresh that takes 10 minutes, in 100ms")
		}
		cancel()
		ctx, cancel = context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		err = o.Close(ctx)
		took := time.Since(start)
		synctest.Wait() // what Close cancelled has unwound
		var te *Error
		type outcome struct {
			Took          time.Duration
			Error         bool // an *Error of Op close, wrapping the deadline
			UnderWayAfter bool
		}
		got := outcome{took, errors.As(err, &te) && te.Op == OpClose && errors.Is(err, context.DeadlineExceeded), o.renewalUnderWay()}
		want := outcome{time.Second, true, false}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Close (-want +got):\n%s\nerror: %v", diff, err)
		}
	})
}

// TestSessionCloseOwnsItsRenewal: the OAuth client that Dial builds for a session
// (Auth's grant fields) is closed with the session: a refresh whose request gave up
// is waited for, its rotated token saved by the time Close returns (over SSE,
// whose close sends no request that would wait for it by chance); one that outlasts
// Close's context is abandoned then, not left running for Auth.Timeout.
func TestSessionCloseOwnsItsRenewal(t *testing.T) {
	for _, tc := range []struct {
		name        string
		delay       time.Duration // of the token endpoint
		closeWithin time.Duration
		saved       bool // the rotated token is in the store when Close returns
	}{
		{"lands", time.Second, time.Minute, true},
		{"abandoned", 10 * time.Minute, time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := newPipeAuth(t, authtest.Options{ClientID: "pre", RotateRefresh: true}, true)
				store := &heldStore{}
				old := p.issued(time.Now().Add(time.Hour))
				if err := store.Save(context.Background(), "authed", old); err != nil {
					t.Fatal(err)
				}
				s, err := Dial(context.Background(), p.config(&Auth{Store: store, Timeout: time.Hour}, true), Options{})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := echo(context.Background(), s, "stored"); err != nil {
					t.Fatal(err)
				}
				p.srv.Expire() // refused from now on: the 401 asks for a refresh
				p.srv.TokenDelay.Store(int64(tc.delay))
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				if _, err := echo(ctx, s, "hurried"); err == nil {
					t.Fatal("a call of 100ms succeeded through a refresh that takes longer")
				}
				cancel()
				if !s.oauth.renewalUnderWay() {
					t.Fatal("no refresh under way after the call gave up")
				}
				ctx, cancel = context.WithTimeout(context.Background(), tc.closeWithin)
				defer cancel()
				_ = s.Close(ctx)
				stored, _ := store.Load(context.Background(), "authed")
				saved := stored != nil && stored.Token.RefreshToken != old.Token.RefreshToken
				synctest.Wait()
				if got := []bool{saved, s.oauth.renewalUnderWay()}; !cmp.Equal(got, []bool{tc.saved, false}) {
					t.Errorf("after Close: rotated token saved, refresh under way = %v, want %v", got, []bool{tc.saved, false})
				}
			})
		})
	}
}

// heldStore is a TokenStore in memory whose Loads, while it is held, wait until
// it is let go, heeding no context: a network store that does not answer.
type heldStore struct {
	mu    sync.Mutex
	creds map[string]Credentials
	held  chan struct{}
	loads atomic.Int64
}

func (s *heldStore) Load(_ context.Context, key string) (*Credentials, error) {
	s.loads.Add(1)
	s.mu.Lock()
	held := s.held
	s.mu.Unlock()
	if held != nil {
		<-held
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.creds[key]
	if !ok {
		return nil, nil
	}
	return &c, nil
}

func (s *heldStore) Save(_ context.Context, key string, c *Credentials) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.creds == nil {
		s.creds = map[string]Credentials{}
	}
	s.creds[key] = *c
	return nil
}

// hold makes Loads wait until let go.
func (s *heldStore) hold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held = make(chan struct{})
}

// letGo answers the Loads that wait, and the later ones at once.
func (s *heldStore) letGo() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held != nil {
		close(s.held)
		s.held = nil
	}
}

// TestStoreThatHangsHoldsNoRequest: the token store was read with the client's
// lock held, by the first request: a store whose Load did not answer (a network
// store; even one that heeds its context, for the requests waiting on the lock
// have none) held every request of the server past its deadline. Each request now
// waits for the read until its own deadline; one read serves them all, and what it
// finds is adopted when it comes. Also the reads made on a 401 (reload) and
// before a refresh (newerStored). In real time: a request held on the lock does
// not let a bubble's clock move.
func TestStoreThatHangsHoldsNoRequest(t *testing.T) {
	const deadline = 200 * time.Millisecond
	const slack = time.Second
	store := &heldStore{}
	url := "http://127.0.0.1:9/mcp" // nothing is sent there
	if err := store.Save(context.Background(), "authed", &Credentials{Resource: url, Token: &oauth2.Token{AccessToken: "stored", Expiry: time.Now().Add(time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	o, err := NewOAuth(Config{Name: "authed", HTTP: &HTTP{URL: url, Auth: &Auth{Store: store}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// within runs each of fs at once, with a context of deadline each, and reports
	// those that returned late (or not within a few seconds, when the store is let
	// go so that they end).
	within := func(what string, fs ...func(ctx context.Context)) {
		t.Helper()
		var wg sync.WaitGroup
		for i, f := range fs {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				defer cancel()
				start := time.Now()
				f(ctx)
				if d := time.Since(start); d > deadline+slack {
					t.Errorf("%s %d returned after %v, its deadline %v", what, i, d, deadline)
				}
			})
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Errorf("%s: held by the store for 5s, deadline %v", what, deadline)
			store.letGo()
			<-done
		}
	}

	// The first read, by two requests at once.
	store.hold()
	var toks [2]string
	within("a request", func(ctx context.Context) { toks[0], _ = o.bearer(ctx) }, func(ctx context.Context) { toks[1], _ = o.bearer(ctx) })
	if toks != [2]string{} {
		t.Errorf("tokens %q before the store answered", toks)
	}
	store.letGo()
	for o.current() == nil { // adopted as it came, though nobody waited
		time.Sleep(time.Millisecond)
	}
	tok, _ := o.bearer(callCtx(t))
	if diff := cmp.Diff([]any{"stored", int64(1)}, []any{tok, store.loads.Load()}); diff != "" {
		t.Errorf("the next request's token, reads of the store (-want +got):\n%s", diff)
	}

	// A 401: the store is read again (a login elsewhere?).
	stale := &Credentials{Resource: url, Token: &oauth2.Token{AccessToken: "stale", Expiry: time.Now().Add(-time.Minute)}}
	if err := store.Save(context.Background(), "authed", stale); err != nil {
		t.Fatal(err)
	}
	store.hold()
	var authErr error
	within("an authorization", func(ctx context.Context) {
		_, gen := o.bearer(ctx)
		req := httptest.NewRequest(http.MethodPost, url, nil)
		resp := &http.Response{StatusCode: http.StatusUnauthorized, Header: http.Header{}, Body: http.NoBody}
		authErr = o.authorize(ctx, req, resp, gen)
	})
	if authErr == nil {
		t.Error("authorize found better credentials in a store that did not answer")
	}
	store.letGo()
	for o.current().Token.AccessToken != "stale" { // the read that came, adopted
		time.Sleep(time.Millisecond)
	}

	// An expired token: the store is read before refreshing (another process's refresh?).
	store.hold()
	within("a request with an expired token", func(ctx context.Context) { toks[0], _ = o.bearer(ctx) })
	store.letGo()
}

// slowStore is a TokenStore in memory whose Loads take delay (heeding their
// context): a network store that answers, but slowly.
type slowStore struct {
	heldStore
	delay time.Duration
}

func (s *slowStore) Load(ctx context.Context, key string) (*Credentials, error) {
	t := time.NewTimer(s.delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	return s.heldStore.Load(ctx, key)
}

// TestSlowStoreOn401: a token store that answers, but more slowly than the calls'
// deadline. A 401 re-reads the store (a login elsewhere?), and that read did not
// answer in time: the request failed as a refusal of the credentials (an *AuthError,
// HTTP 401: a connection's cause auth, unauthorized), and nothing was refreshed;
// each later 401 asked for a fresh read, discarding the one under way, so that
// every call failed so for good though the refresh token was good. Now the store's
// silence fails the call as a server that gave no answer would (not a refusal), and
// the refresh goes on, for the next call.
func TestSlowStoreOn401(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPipeAuth(t, authtest.Options{ClientID: "pre"}, false)
		store := &slowStore{delay: 3 * time.Second}
		if err := store.Save(context.Background(), "authed", p.issued(time.Now().Add(time.Hour))); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s, err := Dial(ctx, p.config(&Auth{Store: store}, false), Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(ctx)
		if _, err := echo(ctx, s, "stored"); err != nil {
			t.Fatal(err)
		}
		p.srv.Expire() // refused from now on
		var errs []error
		for range 5 {
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err := echo(cctx, s, "after")
			cancel()
			errs = append(errs, err)
			if err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		var ae *AuthError
		var te *Error
		first := errs[0]
		if first == nil || errors.As(first, &ae) || (errors.As(first, &te) && te.HTTPStatus != 0) {
			t.Errorf("the first call after the refusal: %v, want a failure that is not a refusal of the credentials", first)
		}
		if errs[len(errs)-1] != nil {
			t.Errorf("no call succeeded after the refusal (refreshes %d): %v", p.srv.Refreshes.Load(), errs)
		}
	})
}

// slowSaveStore is a TokenStore in memory whose Saves take delay (heeding their
// context).
type slowSaveStore struct {
	heldStore
	delay time.Duration
}

func (s *slowSaveStore) Save(ctx context.Context, key string, c *Credentials) error {
	t := time.NewTimer(s.delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	return s.heldStore.Save(ctx, key, c)
}

// TestOAuthCloseWaitsForItsSave: the credentials of a new authorization (a login)
// are saved once the server accepts them, in line with that request. Close, which
// ends the client's life, cancelled that save without waiting for it (the save was
// bound to the client's life, but only a renewal was waited for): a login that
// raced the Close was lost, and the next process sent the user to log in again.
// Close now waits for a save under way within its context, as for a renewal.
func TestOAuthCloseWaitsForItsSave(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPipeAuth(t, authtest.Options{ClientID: "pre"}, false)
		store := &slowSaveStore{delay: time.Second}
		o, err := NewOAuth(p.config(&Auth{Store: store}, false), nil)
		if err != nil {
			t.Fatal(err)
		}
		login := p.issued(time.Now().Add(time.Hour))
		if err := o.SetCredentials(login); err != nil { // as a new authorization's: saved once accepted
			t.Fatal(err)
		}
		_, gen := o.bearer(context.Background())
		accepted := make(chan struct{})
		go func() { defer close(accepted); o.worked(context.Background(), gen) }() // the server accepted them: saving
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		closeErr := o.Close(ctx)
		stored, _ := store.heldStore.Load(context.Background(), "authed")
		<-accepted
		if closeErr != nil || stored == nil || stored.Token.AccessToken != login.Token.AccessToken {
			t.Errorf("when Close returned (%v), the store held %+v; want the login's credentials", closeErr, stored)
		}
	})
}
