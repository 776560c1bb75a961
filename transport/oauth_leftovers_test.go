package transport

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mcpfsm/mcpfsm/internal/authtest"
	"go.uber.org/goleak"
)

// loggedIn logs in to srv (a fetcher's authorization, one call), closes the session,
// and returns the store that holds its token.
func loggedIn(t *testing.T, srv *authtest.Server) *FileStore {
	t.Helper()
	store := &FileStore{Dir: t.TempDir()}
	login := dial(t, authConfig(srv, &Auth{Fetcher: authtest.Fetcher(nil), RedirectURL: redirect, Store: store}, false), Options{})
	if err := authEcho(t, login, "login"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = login.Close(ctx)
	return store
}

// TestFailedDialOwnsItsRenewal: a Dial whose initialize met a 401 began a refresh,
// which goes on after the request that needed it gave up (three quarters of the
// dial's time); the Dial failed, and nothing owned the refresh: it ran on, with its
// request to the token endpoint, until Auth.Timeout (an hour here). A failed Dial
// now closes the OAuth client it built within its own context: the refresh is
// waited for until then (its token saved, if it lands), and abandoned after it,
// its goroutines gone when Dial returns. (A refresh that lands before the dial's
// context ends is waited for by the dial's next request too, which then succeeds.)
func TestFailedDialOwnsItsRenewal(t *testing.T) {
	srv := authServer(t, authtest.Options{}, false)
	store := loggedIn(t, srv)
	// Checked before the server's cleanup lets the token endpoint go: the
	// server's goroutine that holds it is the server's.
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before, goleak.IgnoreAnyFunction("net/http.(*conn).serve")) })
	srv.Expire()
	srv.TokenDelay.Store(int64(time.Hour)) // until the server's cleanup
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	s, err := Dial(ctx, authConfig(srv, &Auth{Store: store, Timeout: time.Hour}, false), Options{})
	if err == nil {
		_ = s.Close(ctx)
		t.Fatal("the dial succeeded though the token endpoint hangs")
	}
	if d := time.Since(start); d > time.Second+unwindGrace+2*time.Second {
		t.Errorf("the failed Dial returned after %v, its context 1s", d)
	}
}

// hungStore is a TokenStore in memory whose Loads and Saves, while it is held,
// wait until it is let go, heeding no context: a keyring that hangs, a file on
// an NFS mount that went away.
type hungStore struct {
	heldStore
	loads, saves atomic.Int64
	hold         chan struct{} // nil: not held
}

func (s *hungStore) wait() {
	s.heldStore.mu.Lock()
	h := s.hold
	s.heldStore.mu.Unlock()
	if h != nil {
		<-h
	}
}

func (s *hungStore) Load(ctx context.Context, key string) (*Credentials, error) {
	s.loads.Add(1)
	s.wait()
	return s.heldStore.Load(ctx, key)
}

func (s *hungStore) Save(ctx context.Context, key string, c *Credentials) error {
	s.saves.Add(1)
	s.wait()
	return s.heldStore.Save(ctx, key, c)
}

func (s *hungStore) hang() {
	s.heldStore.mu.Lock()
	s.hold = make(chan struct{})
	s.heldStore.mu.Unlock()
}

func (s *hungStore) release() {
	s.heldStore.mu.Lock()
	if s.hold != nil {
		close(s.hold)
		s.hold = nil
	}
	s.heldStore.mu.Unlock()
}

// syncBuffer is a log's destination for a test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestStoreThatHangsIsAbandoned: a token store whose Load and Save ignore their
// context and never return. The save of a login's credentials, once the server
// accepted them, ran in line with the request: the call was held for as long as
// the store, past its deadline. The client's own goroutines (the read, the
// renewal that saves) waited for the store for good, Close or not. Now every call
// returns by its deadline; a store's call is abandoned storeGrace after its
// context ends (said once in the log, without a secret), the store is not called
// again until it returns (one goroutine held, not one per request), and Close
// returns within its context and unwindGrace with none of the client's goroutines
// left.
func TestStoreThatHangsIsAbandoned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPipeAuth(t, authtest.Options{ClientID: "pre"}, false)
		store := &hungStore{}
		var logs syncBuffer
		log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		o, err := NewOAuth(p.config(&Auth{Store: store}, false), log)
		if err != nil {
			t.Fatal(err)
		}
		defer store.release() // the store's goroutines end with the bubble
		if err := o.SetCredentials(p.issued(time.Now().Add(time.Hour))); err != nil {
			t.Fatal(err)
		}
		s, err := Dial(context.Background(), p.config(&Auth{Handler: o}, false), Options{})
		if err != nil {
			t.Fatal(err)
		}
		// A login's credentials, handed over: saved once the server accepts them.
		login := p.issued(time.Now().Add(time.Hour))
		if err := o.SetCredentials(login); err != nil {
			t.Fatal(err)
		}
		store.hang()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		start := time.Now()
		_, err = echo(ctx, s, "accepted")
		took := time.Since(start)
		cancel()
		if err != nil || took > time.Second {
			t.Errorf("the call whose credentials the server accepted returned after %v (its deadline 1s): %v", took, err)
		}
		time.Sleep(storeTimeout + storeGrace) // the save's context ends: abandoned
		synctest.Wait()

		// Stuck: the store is not called again, and a request that needs it does
		// not wait for it.
		o.Reset() // read the store again
		ctx, cancel = context.WithTimeout(context.Background(), time.Second)
		start = time.Now()
		_, err = echo(ctx, s, "stuck")
		took = time.Since(start)
		cancel()
		if err != nil || took > time.Second {
			t.Errorf("a call while the store is stuck returned after %v: %v", took, err)
		}
		if got := [2]int64{store.loads.Load(), store.saves.Load()}; got != [2]int64{1, 2} {
			t.Errorf("store called %d times to load, %d to save; want 1, 2 (before it hung, then the save that hangs): not again while a call hangs", got[0], got[1])
		}

		ctx, cancel = context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start = time.Now()
		_ = s.Close(ctx)
		_ = o.Close(ctx)
		if d := time.Since(start); d > time.Second+unwindGrace {
			t.Errorf("Close returned after %v, its context 1s", d)
		}
		o.mu.Lock()
		left := o.renewing != nil || o.reading != nil || o.saved != nil
		o.mu.Unlock()
		if left {
			t.Error("the client's work goes on after Close")
		}
		out := logs.String()
		if n := strings.Count(out, "the token store did not return"); n != 1 {
			t.Errorf("the abandoned call was logged %d times, want once:\n%s", n, out)
		}
		for _, secret := range []string{login.Token.AccessToken, login.Token.RefreshToken} {
			if strings.Contains(out, secret) {
				t.Errorf("the log holds a token:\n%s", out)
			}
		}

		// Let go: the store's goroutine ends, and the store may be called again.
		store.release()
		synctest.Wait()
		o.mu.Lock()
		stuck := o.stuck
		o.mu.Unlock()
		if stuck != 0 {
			t.Error("still stuck once the store returned")
		}
	})
}

// TestStoreStuckUntilEveryAbandonedCallReturns: two calls of the store that ignore
// their context (a read and a save at once, say) are both abandoned; the store is
// called again only once both have returned, not as soon as the first has (stuck
// was one flag, which the first call's return cleared while the second still hung).
func TestStoreStuckUntilEveryAbandonedCallReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPipeAuth(t, authtest.Options{ClientID: "pre"}, false)
		o, err := NewOAuth(p.config(&Auth{Store: &hungStore{}}, false), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close(context.Background())
		release := []chan struct{}{make(chan struct{}), make(chan struct{})}
		var wg sync.WaitGroup
		for _, r := range release {
			wg.Go(func() {
				_, err := storeCall(o, "Load", func(context.Context) (int, error) { <-r; return 0, nil }) // ignores its context
				if !errors.Is(err, errStoreSilent) {
					t.Errorf("a hung call: %v, want it abandoned", err)
				}
			})
		}
		wg.Wait() // both abandoned, storeTimeout and storeGrace later
		called := func() bool {
			ran := false
			_, err := storeCall(o, "Load", func(context.Context) (int, error) { ran = true; return 0, nil })
			return ran && err == nil
		}
		close(release[0])
		synctest.Wait()
		if called() {
			t.Error("the store was called again while an abandoned call still hangs")
		}
		close(release[1])
		synctest.Wait()
		if !called() {
			t.Error("the store was not called again once every abandoned call returned")
		}
	})
}

// keyedStore wraps a FileStore shared by two connections, and orders what two
// processes racing to refresh would do by chance: once the token endpoint has
// refused a refresh, a Load waits for the other's Save (the rotated token) to
// land first.
type keyedStore struct {
	*FileStore
	srv   *authtest.Server
	once  sync.Once
	saved chan struct{}
}

func (s *keyedStore) Save(ctx context.Context, key string, c *Credentials) error {
	err := s.FileStore.Save(ctx, key, c)
	if s.srv.Refreshes.Load() > 0 {
		s.once.Do(func() { close(s.saved) })
	}
	return err
}

func (s *keyedStore) Load(ctx context.Context, key string) (*Credentials, error) {
	if s.srv.RefreshFails.Load() > 0 {
		select {
		case <-s.saved:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.FileStore.Load(ctx, key)
}

// TestRefreshRefusedRotatedElsewhere: two connections sharing one file store,
// refresh tokens rotated, the server refusing both tokens at once (it expired
// them early): both read the store (nothing newer), both refresh, the token
// endpoint grants the first and refuses the second (its refresh token was
// rotated). The second then failed as needing a login, its connection
// unauthorized, though the store held the first's fresh credentials. After a
// refused refresh the store is now read again, and newer credentials found there
// are used.
func TestRefreshRefusedRotatedElsewhere(t *testing.T) {
	srv := authServer(t, authtest.Options{RotateRefresh: true}, false)
	files := &FileStore{Dir: t.TempDir()}
	login := dial(t, authConfig(srv, &Auth{Fetcher: authtest.Fetcher(nil), RedirectURL: redirect, Store: files, StoreKey: "shared"}, false), Options{})
	if err := authEcho(t, login, "login"); err != nil {
		t.Fatal(err)
	}
	store := &keyedStore{FileStore: files, srv: srv, saved: make(chan struct{})}
	var conns []*Session
	for range 2 {
		s := dial(t, authConfig(srv, &Auth{Store: store, StoreKey: "shared"}, false), Options{})
		if err := authEcho(t, s, "stored"); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, s)
	}
	srv.Expire()
	srv.TokenDelay.Store(int64(300 * time.Millisecond)) // both refreshes under way at once
	errs := make([]error, len(conns))
	var wg sync.WaitGroup
	for i, s := range conns {
		wg.Go(func() { errs[i] = authEcho(t, s, "after") })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("connection %d: %v", i, err)
		}
	}
	got := map[string]int64{"refreshes": srv.Refreshes.Load(), "refused refreshes": srv.RefreshFails.Load()}
	want := map[string]int64{"refreshes": 1, "refused refreshes": 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("token endpoint (-want +got):\n%s", diff)
	}
}

// TestScopeStepUpWithoutAUser: a server answering 403 insufficient_scope for a
// call. With client credentials the larger scope is had at once, without a user,
// and the call succeeds. Without a user to log in (the authorization code flow,
// headless), the call fails with ErrLoginRequired naming the scopes the login
// must ask for; the next one said instead "asked for once: not asking again" (no
// longer ErrLoginRequired, though nothing had been asked). A refresh cannot
// widen a grant (RFC 6749 §6): none is tried.
func TestScopeStepUpWithoutAUser(t *testing.T) {
	t.Run("client credentials", func(t *testing.T) {
		srv := authServer(t, authtest.Options{Scopes: []string{"read"}, CallScopes: []string{"write"}, ClientID: "svc", ClientSecret: "s3cret"}, false)
		s := dial(t, authConfig(srv, &Auth{Grant: GrantClientCredentials, ClientID: "svc", ClientSecret: "s3cret"}, false), Options{})
		if err := authEcho(t, s, "write"); err != nil {
			t.Fatal(err)
		}
		if n := srv.Credentials.Load(); n != 2 {
			t.Errorf("%d client credentials grants, want 2 (the session's, the step-up's)", n)
		}
	})
	t.Run("headless", func(t *testing.T) {
		srv := authServer(t, authtest.Options{Scopes: []string{"read"}, CallScopes: []string{"write"}}, false)
		store := &FileStore{Dir: t.TempDir()}
		login := dial(t, authConfig(srv, &Auth{Fetcher: authtest.Fetcher(nil), RedirectURL: redirect, Store: store}, false), Options{})
		closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = login.Close(closeCtx)
		cancel()
		stored, err := store.Load(context.Background(), "authed")
		if err != nil || stored == nil {
			t.Fatalf("stored %v, %v", stored, err)
		}
		s := dial(t, authConfig(srv, &Auth{Store: store, LoginHint: "mcpfsm auth login servers.yaml authed"}, false), Options{})
		for i := range 3 {
			err := authEcho(t, s, "write")
			var ae *AuthError
			if !errors.Is(err, ErrLoginRequired) || !errors.As(err, &ae) || ae.Status != http.StatusForbidden {
				t.Fatalf("call %d: %v; want an *AuthError (403) wrapping ErrLoginRequired", i, err)
			}
			msg := err.Error()
			for _, want := range []string{`login required for more scope: the server asks for "read write"`, "run mcpfsm auth login servers.yaml authed"} {
				if !strings.Contains(msg, want) {
					t.Errorf("call %d: %q does not say %q", i, msg, want)
				}
			}
			for _, secret := range []string{stored.Token.AccessToken, stored.Token.RefreshToken} {
				if strings.Contains(msg, secret) {
					t.Errorf("call %d: the error holds a token", i)
				}
			}
		}
		if got := [2]int64{srv.Refreshes.Load(), srv.Authorizations.Load()}; got != [2]int64{0, 1} {
			t.Errorf("refreshes, authorizations = %v, want [0 1]: nothing asked of the authorization server for the step-up", got)
		}
	})
}
