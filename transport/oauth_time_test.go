package transport

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mcpfsm/mcpfsm/internal/authtest"
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
