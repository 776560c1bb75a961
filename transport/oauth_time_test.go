package transport

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mcpfsm/mcpfsm/internal/authtest"
	"golang.org/x/oauth2"
)

// TestRefreshOutlivesItsCaller: a refresh was bound to the request that needed
// it. A request with little time left (a call with a short deadline, a probe)
// gave up on a slow token endpoint, which made the grant all the same: with
// refresh tokens rotated, the one the client held was dead, the new one never
// read, and the next request needed a login. The refresh now runs to its end
// (bounded by Auth.Timeout) whoever waits for it, and its answer is kept.
func TestRefreshOutlivesItsCaller(t *testing.T) {
	srv := authServer(t, authtest.Options{RotateRefresh: true}, false)
	store := &FileStore{Dir: t.TempDir()}
	s := dial(t, authConfig(srv, &Auth{Fetcher: authtest.Fetcher(nil), RedirectURL: redirect, Store: store}, false), Options{})
	if err := authEcho(t, s, "login"); err != nil {
		t.Fatal(err)
	}
	headless := dial(t, authConfig(srv, &Auth{Store: store}, false), Options{})
	if err := authEcho(t, headless, "stored"); err != nil {
		t.Fatal(err)
	}
	srv.Expire()
	srv.TokenDelay.Store(int64(time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := echo(ctx, headless, "hurried")
	cancel()
	if err == nil {
		t.Fatal("a call of 300ms succeeded through a token endpoint that takes 1s")
	}
	time.Sleep(1500 * time.Millisecond) // the token endpoint has answered
	srv.TokenDelay.Store(0)
	if err := authEcho(t, headless, "later"); err != nil {
		t.Errorf("after a refresh its caller gave up on: %v", err)
	}
	got := map[string]int64{"refreshes": srv.Refreshes.Load(), "refused refreshes": srv.RefreshFails.Load(), "authorizations": srv.Authorizations.Load()}
	want := map[string]int64{"refreshes": 1, "refused refreshes": 0, "authorizations": 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("token endpoint (-want +got):\n%s", diff)
	}
}

// TestShortLivedTokenNotRefreshedPerRequest: a token was refreshed when it had
// 30 s or less to live, whatever its lifetime: a server issuing tokens for 30 s
// or less had every request refresh first (one after another: 20 concurrent
// calls made 20 refreshes). A token is now refreshed within a quarter of its
// lifetime of its expiry (30 s at most), and a request that waited for another's
// refresh uses its token.
func TestShortLivedTokenNotRefreshedPerRequest(t *testing.T) {
	srv := authServer(t, authtest.Options{TokenLifetime: 20 * time.Second}, false)
	s := dial(t, authConfig(srv, &Auth{Fetcher: authtest.Fetcher(nil), RedirectURL: redirect}, false), Options{})
	for i := range 5 {
		if err := authEcho(t, s, "one"); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if err := authEcho(t, s, "many"); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := srv.Refreshes.Load(); n != 0 {
		t.Errorf("%d refreshes of a token with 20s to live, want 0", n)
	}
}

// TestNegativeExpiresInNotRefreshedPerRequest: a token endpoint that states an
// expires_in of 0 or less (a broken one: RFC 6749 says a lifetime in seconds) gave
// tokens already expired as they came, and every request refreshed first. Such a
// token's lifetime is taken as unstated: it is used until the server refuses it.
func TestNegativeExpiresInNotRefreshedPerRequest(t *testing.T) {
	srv := authServer(t, authtest.Options{StatedExpiresIn: -1}, false)
	s := dial(t, authConfig(srv, &Auth{Fetcher: authtest.Fetcher(nil), RedirectURL: redirect}, false), Options{})
	for i := range 5 {
		if err := authEcho(t, s, "one"); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if n := srv.Refreshes.Load(); n != 0 {
		t.Errorf("%d refreshes of a token whose endpoint stated expires_in -1, want 0", n)
	}
}

// TestSharedStoreRefreshTokenRotated: two processes (two OAuth clients) sharing
// one token store, with refresh tokens rotated. The second to find its token
// expired refreshed with the refresh token it had read, which the first had had
// rotated already: a refused refresh, and for an authorization server that takes
// such a reuse for a theft (OAuth 2.1), every token revoked, both processes
// needing a login. A refresh now reads the store first and uses newer
// credentials found there.
func TestSharedStoreRefreshTokenRotated(t *testing.T) {
	const life = 2 * time.Second
	srv := authServer(t, authtest.Options{TokenLifetime: life, RotateRefresh: true, RevokeOnReuse: true}, false)
	store := &FileStore{Dir: t.TempDir()}
	login := dial(t, authConfig(srv, &Auth{Fetcher: authtest.Fetcher(nil), RedirectURL: redirect, Store: store, StoreKey: "shared"}, false), Options{})
	if err := authEcho(t, login, "login"); err != nil {
		t.Fatal(err)
	}
	var procs []*Session
	for range 2 {
		p := dial(t, authConfig(srv, &Auth{Store: store, StoreKey: "shared"}, false), Options{})
		if err := authEcho(t, p, "stored"); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
	}
	time.Sleep(life) // every token has expired, for the clients too
	for i, p := range procs {
		if err := authEcho(t, p, "after expiry"); err != nil {
			t.Errorf("process %d: %v", i, err)
		}
	}
	got := map[string]int64{"refreshes": srv.Refreshes.Load(), "refused refreshes": srv.RefreshFails.Load()}
	want := map[string]int64{"refreshes": 1, "refused refreshes": 0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("token endpoint (-want +got):\n%s", diff)
	}
}

// TestTokenEndpointHangsWithCallsInFlight: the token endpoint stops answering
// as the token expires, with calls in flight: each call returns by its deadline,
// none as a refusal of the credentials (a connection would go unauthorized), no
// new login is tried, and the session closes within its timeout. The close once
// took its timeout and forceGrace and said the teardown was stuck: its DELETE
// waited for the refresh, which the session's end did not stop.
func TestTokenEndpointHangsWithCallsInFlight(t *testing.T) {
	srv := authServer(t, authtest.Options{}, false)
	s := dial(t, authConfig(srv, &Auth{Fetcher: authtest.Fetcher(nil), RedirectURL: redirect}, false), Options{})
	if err := authEcho(t, s, "login"); err != nil {
		t.Fatal(err)
	}
	srv.Expire()
	srv.TokenDelay.Store(int64(time.Minute)) // until the test's end
	const deadline = time.Second
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			start := time.Now()
			_, err := echo(ctx, s, "held")
			if d := time.Since(start); d > deadline+500*time.Millisecond {
				t.Errorf("call %d returned after %v, deadline %v", i, d, deadline)
			}
			var ae *AuthError
			if err == nil || errors.As(err, &ae) || !(errors.Is(err, ErrAuthServerUnavailable) || errors.Is(err, context.DeadlineExceeded)) {
				t.Errorf("call %d: %v, want ErrAuthServerUnavailable or its deadline", i, err)
			}
		})
	}
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	if err := s.Close(ctx); errors.Is(err, errCloseStuck) {
		t.Errorf("Close: %v", err)
	}
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Errorf("Close took %v, its timeout 1s", d)
	}
	if n := srv.Authorizations.Load(); n != 1 {
		t.Errorf("%d authorizations, want 1 (the login)", n)
	}
}

// TestOutageDoesNotSendTheUserToLogIn: with a Fetcher (a client that can log in),
// a token that expired while the token endpoint was down (503) made the request
// that met the server's 401 authorize anew: the user sent to log in for a refresh
// token that was good, and, the code exchange failing at the same endpoint, an
// *AuthError (a connection's cause auth: unauthorized for auth_recheck_interval).
// A refresh that got no answer now fails the request with ErrAuthServerUnavailable,
// as without a Fetcher.
func TestOutageDoesNotSendTheUserToLogIn(t *testing.T) {
	srv := authServer(t, authtest.Options{}, false)
	s := dial(t, authConfig(srv, &Auth{Fetcher: authtest.Fetcher(nil), RedirectURL: redirect}, false), Options{})
	if err := authEcho(t, s, "login"); err != nil {
		t.Fatal(err)
	}
	srv.Expire()
	srv.Outage.Store(true)
	err := authEcho(t, s, "during")
	var ae *AuthError
	if !errors.Is(err, ErrAuthServerUnavailable) || errors.As(err, &ae) {
		t.Errorf("during the outage: %v, want ErrAuthServerUnavailable", err)
	}
	srv.Outage.Store(false)
	if err := authEcho(t, s, "after"); err != nil {
		t.Errorf("after the outage: %v", err)
	}
	got := map[string]int64{"authorizations": srv.Authorizations.Load(), "refreshes": srv.Refreshes.Load()}
	want := map[string]int64{"authorizations": 1, "refreshes": 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("authorization server (-want +got):\n%s", diff)
	}
}

// TestRenewalDoesNotReplaceNewerCredentials: credentials handed over
// (SetCredentials) while a refresh of the old ones was under way were replaced
// by that refresh when it landed, and saved in their place: a login with more
// scope, handed to a running process, was silently undone. They now stay.
func TestRenewalDoesNotReplaceNewerCredentials(t *testing.T) {
	srv := authServer(t, authtest.Options{ClientID: "pre"}, false)
	store := &FileStore{Dir: t.TempDir()}
	o, err := NewOAuth(authConfig(srv, &Auth{Store: store}, false), nil)
	if err != nil {
		t.Fatal(err)
	}
	creds := func(access, refresh string, expiry time.Time) *Credentials {
		return &Credentials{TokenURL: srv.URL + "/token", ClientID: "pre", Token: &oauth2.Token{AccessToken: access, RefreshToken: refresh, Expiry: expiry}}
	}
	access, refresh, _ := srv.Issue("mcp")
	if err := o.SetCredentials(creds(access, refresh, time.Now().Add(-time.Minute))); err != nil {
		t.Fatal(err)
	}
	srv.TokenDelay.Store(int64(time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	if tok, _ := o.bearer(ctx); tok != "" {
		t.Fatal("a token from a refresh that takes 1s, in 200ms")
	}
	cancel()
	newer, newerRefresh, expiry := srv.Issue("mcp", "more")
	if err := o.SetCredentials(creds(newer, newerRefresh, expiry)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // the refresh has landed
	tok, gen := o.bearer(callCtx(t))
	o.worked(context.Background(), gen) // the server took it: saved
	stored, _ := store.Load(context.Background(), "authed")
	got := []bool{tok == newer, stored != nil && stored.Token.AccessToken == newer}
	if diff := cmp.Diff([]bool{true, true}, got); diff != "" {
		t.Errorf("the handed-over token in use, in the store (-want +got):\n%s", diff)
	}
}

// TestFileStoreLargeFile: a store file was read whole, whatever its size, and it
// is read before every refresh: a file of gigabytes in the token directory (a
// mistake, a disk filled by something else) took as much memory each time.
// Past 4 MiB it is an error, as a file that is not JSON is.
func TestFileStoreLargeFile(t *testing.T) {
	store := &FileStore{Dir: t.TempDir()}
	big := make([]byte, maxStoreFile+1)
	for i := range big {
		big[i] = ' '
	}
	if err := os.WriteFile(store.Path("big"), big, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := store.Load(context.Background(), "big")
	if c != nil || err == nil || !strings.Contains(err.Error(), "larger than 4 MiB") {
		t.Errorf("Load of a file of %d bytes: %v, %v", len(big), c, err)
	}
}

// gatedStore is a token store whose saves wait, while gate is set, until it is
// closed (a save held by another process's lock on the store, a slow disk).
type gatedStore struct {
	TokenStore
	mu   sync.Mutex
	gate chan struct{}
}

func (s *gatedStore) Save(ctx context.Context, key string, c *Credentials) error {
	s.mu.Lock()
	gate := s.gate
	s.mu.Unlock()
	if gate != nil {
		<-gate
	}
	return s.TokenStore.Save(ctx, key, c)
}

// TestRenewalSavingIsNotUndoneByTheStore: a refresh its caller gave up on went
// on outside the one-at-a-time rule, and adopted its token before saving it. A
// request refused meanwhile (a 401, a 403) read the store again, found the
// credentials the refresh had just replaced, and took them for a login
// elsewhere: the client went back to a refresh token its authorization server
// had rotated already, whose next use was taken for a theft (every token of the
// grant revoked). A refresh under way is now waited for, to its save, by
// whatever refreshes or authorizes next.
func TestRenewalSavingIsNotUndoneByTheStore(t *testing.T) {
	srv := authServer(t, authtest.Options{ClientID: "pre", RotateRefresh: true, RevokeOnReuse: true}, false)
	store := &gatedStore{TokenStore: &FileStore{Dir: t.TempDir()}}
	access, refresh, _ := srv.Issue("mcp")
	old := &Credentials{Resource: srv.MCPURL(), TokenURL: srv.URL + "/token", ClientID: "pre", Token: &oauth2.Token{AccessToken: access, RefreshToken: refresh, Expiry: time.Now().Add(-time.Minute)}}
	if err := store.Save(context.Background(), "authed", old); err != nil {
		t.Fatal(err)
	}
	o, err := NewOAuth(authConfig(srv, &Auth{Store: store}, false), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.TokenDelay.Store(int64(300 * time.Millisecond))
	gate := make(chan struct{})
	store.mu.Lock()
	store.gate = gate
	store.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	if tok, _ := o.bearer(ctx); tok != "" {
		t.Fatal("a token from a refresh that takes 300ms, in 100ms")
	}
	cancel()
	for !fresh(o.current().Token) { // the refresh has landed; its save waits
		time.Sleep(10 * time.Millisecond)
	}
	srv.TokenDelay.Store(0)
	_, sent := o.bearer(callCtx(t))
	req := httptest.NewRequest(http.MethodPost, srv.MCPURL(), nil)
	resp := &http.Response{StatusCode: http.StatusUnauthorized, Header: http.Header{}, Body: http.NoBody}
	done := make(chan error, 1)
	go func() { done <- o.authorize(callCtx(t), req, resp, sent) }()
	time.Sleep(100 * time.Millisecond)
	close(gate)
	if err := <-done; err != nil {
		t.Fatalf("authorize: %v", err)
	}
	if got := o.current().Token.RefreshToken; got == refresh {
		t.Error("the client holds the refresh token its refresh had rotated")
	}
	// The next refusal refreshes with the refresh token held.
	_, sent = o.bearer(callCtx(t))
	resp = &http.Response{StatusCode: http.StatusUnauthorized, Header: http.Header{}, Body: http.NoBody}
	if err := o.authorize(callCtx(t), req, resp, sent); err != nil {
		t.Errorf("the refresh after: %v", err)
	}
	if n := srv.RefreshFails.Load(); n != 0 {
		t.Errorf("%d refused refreshes, want 0", n)
	}
}

// current returns the credentials o holds.
func (o *OAuth) current() *Credentials {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.creds
}
