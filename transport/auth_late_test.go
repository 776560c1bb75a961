package transport

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/internal/authtest"
	"github.com/modelcontextprotocol/go-sdk/auth"
)

// dialFaults shape the server of lateServer.
type dialFaults struct {
	holdInitialize time.Time // each POST of an initialize is held until then
	failAuthorize  int       // /authorize visits after this many answer 500 (0: none)
	garbledInit    bool      // an initialize with a bearer token is answered 200 with what is not JSON
	forbidDiscover bool      // a server/discover is answered 403 (no challenge: not a matter of scope)
}

// lateServer serves srv with f's faults. held counts the initializes held.
func lateServer(t *testing.T, srv *authtest.Server, f dialFaults, held *atomic.Int64) {
	t.Helper()
	h := srv.Handler()
	var visits atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/authorize" && visits.Add(1) > int64(f.failAuthorize) && f.failAuthorize > 0 {
			http.Error(w, "the authorization server failed", http.StatusInternalServerError)
			return
		}
		if r.Method == http.MethodPost && r.URL.Path == "/mcp" {
			body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			r.Body = io.NopCloser(bytes.NewReader(body))
			if f.forbidDiscover && strings.Contains(string(body), `"method":"server/discover"`) {
				http.Error(w, "forbidden", http.StatusForbidden)
				return
			}
			if strings.Contains(string(body), `"method":"initialize"`) {
				if f.garbledInit && r.Header.Get("Authorization") != "" {
					w.Header().Set("Content-Type", "application/json")
					_, _ = io.WriteString(w, "<html>not JSON</html>")
					return
				}
				held.Add(1)
				tm := time.NewTimer(time.Until(f.holdInitialize))
				select {
				case <-tm.C:
				case <-r.Context().Done():
				}
				tm.Stop()
			}
		}
		h.ServeHTTP(w, r)
	}))
	srv.URL = ts.URL
	t.Cleanup(func() {
		srv.Close()
		ts.CloseClientConnections()
		ts.Close()
	})
}

// TestDialReportsItsFirstRefusal: the dial's server/discover is refused and its
// authorization fails (the token endpoint hangs: "token exchange failed", within
// three quarters of the dial's deadline); the go-sdk falls back to initialize,
// which is refused too.
//
// After the deadline: the initialize's refusal came once the dial's deadline
// (Options.Deadline, 1 s; the caller's context 10 s) had passed, as on a loaded
// machine. That authorization took the passed deadline as bounding nothing and got
// three quarters of the caller's context: the dial returned 7.8 s late (in a full
// run TestAuthWithinDialDeadline and TestFetcherIgnoringItsContext, contexts of 20
// s, returned after 15 s). The dial now ends by its deadline, and fails with its
// first refusal (not with the deadline, which cut the initialize short).
//
// Before the deadline: the initialize's authorization failed at once (at
// /authorize, as one begun with none of the dial's time left does), and that later
// refusal was the dial's error. The dial fails with its first refusal.
//
// Since 2026-11-28 ("OAuth, read again") an authorization that failed is final for
// the dial: the initialize is not sent at all (TestOneLoginPromptPerDial), in
// either case, and the dial still fails with its first refusal, by its deadline.
func TestDialReportsItsFirstRefusal(t *testing.T) {
	const within = time.Second
	for _, tc := range []struct {
		name  string
		hold  time.Duration // the initialize held until the deadline and this
		fail  int           // /authorize visits after this many fail
		later string        // what the later refusal says, which must not show
	}{
		{"refused after the deadline", 100 * time.Millisecond, 0, ""},
		{"refused again before the deadline", -300 * time.Millisecond, 1, "500"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms := authtest.MCPServer()
			t.Cleanup(func() { authtest.CloseSessions(ms) })
			srv := authtest.New(authtest.Options{HangToken: true}, authtest.Streamable(ms))
			start := time.Now()
			deadline := start.Add(within)
			var held atomic.Int64
			lateServer(t, srv, dialFaults{holdInitialize: deadline.Add(tc.hold), failAuthorize: tc.fail}, &held)
			cfg := authConfig(srv, &Auth{Fetcher: authtest.Fetcher(nil), RedirectURL: redirect, Timeout: time.Minute}, false)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := Dial(ctx, cfg, Options{Deadline: deadline})
			took := time.Since(start)
			if err == nil {
				_ = s.Close(ctx)
				t.Fatal("dial succeeded")
			}
			if n := held.Load(); n != 0 {
				t.Errorf("%d initializes sent after the dial's authorization failed (err %v), want none", n, err)
			}
			if took > within+time.Second {
				t.Errorf("the dial returned after %v, its deadline %v", took, within)
			}
			var ae *AuthError
			var e *Error
			if !errors.As(err, &ae) || !strings.Contains(err.Error(), "token exchange failed") {
				t.Errorf("err = %v, want the first refusal: an *AuthError saying the token exchange failed", err)
			} else if tc.later != "" && strings.Contains(err.Error(), tc.later) {
				t.Errorf("err = %v, which quotes the later refusal", err)
			}
			if !errors.As(err, &e) || e.HTTPStatus != http.StatusUnauthorized {
				t.Errorf("err = %#v, want HTTP status 401", e)
			}
			if srv.Authorizations.Load() != 1 {
				t.Errorf("%d authorizations answered, want 1 (none after the first failed)", srv.Authorizations.Load())
			}
		})
	}
}

// TestDialRefusalResolved: a dial whose first request was refused (server/discover
// forbidden: 403, not a matter of scope) and whose next was authorized (the
// initialize of the go-sdk's fallback, refused 401, then the fetcher's login) fails
// for what came after it (an answer to the initialize that is not JSON), not for
// the refusal, which no longer stands. (It was once a first authorization that
// failed and a second that worked; since 2026-11-28 an authorization that failed
// is final for the dial: TestOneLoginPromptPerDial. A 403 that is not a matter of
// scope tries no authorization.)
func TestDialRefusalResolved(t *testing.T) {
	ms := authtest.MCPServer()
	t.Cleanup(func() { authtest.CloseSessions(ms) })
	srv := authtest.New(authtest.Options{}, authtest.Streamable(ms))
	var held atomic.Int64
	lateServer(t, srv, dialFaults{garbledInit: true, forbidDiscover: true}, &held)
	var visits atomic.Int64
	fetcher := authtest.Fetcher(nil)
	cfg := authConfig(srv, &Auth{Fetcher: func(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
		visits.Add(1)
		return fetcher(ctx, args)
	}, RedirectURL: redirect}, false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Dial(ctx, cfg, Options{Deadline: time.Now().Add(5 * time.Second)})
	if err == nil {
		_ = s.Close(ctx)
		t.Fatal("dial succeeded")
	}
	var ae *AuthError
	var e *Error
	if visits.Load() != 1 || errors.As(err, &ae) || !errors.As(err, &e) || !e.NotJSON {
		t.Errorf("err = %v (%d authorizations), want the initialize's answer that is not JSON, no refusal", err, visits.Load())
	}
}

// TestDialDeadlineWhileARefreshHangs: a dial whose stored token has expired begins
// a refresh for its server/discover, and the token endpoint hangs; the refresh goes
// on (within Auth.Timeout, an hour here) after the request gives up on it at three
// quarters of the dial's deadline. The initialize's authorization then waited for
// that refresh, and the failed dial for it again as it closed its OAuth client, both
// bounded only by the caller's context (10 s here, where the deadline is 1 s). The
// dial now ends by its deadline, whatever it waits for.
func TestDialDeadlineWhileARefreshHangs(t *testing.T) {
	srv := authServer(t, authtest.Options{}, false)
	store := loggedIn(t, srv)
	srv.Expire()
	srv.TokenDelay.Store(int64(time.Hour)) // until the server's cleanup
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const within = time.Second
	start := time.Now()
	s, err := Dial(ctx, authConfig(srv, &Auth{Store: store, Timeout: time.Hour}, false), Options{Deadline: start.Add(within)})
	took := time.Since(start)
	if err == nil {
		_ = s.Close(ctx)
		t.Fatal("the dial succeeded though the token endpoint hangs")
	}
	if took > within+time.Second {
		t.Errorf("the dial returned after %v (%v), its deadline %v", took, err, within)
	}
}

// TestDialDeadlineNotTheSessions: a session outlives its dial's deadline
// (Options.Deadline): its event stream (the SSE transport's, which lives on the
// session's life) and its calls go on past it.
func TestDialDeadlineNotTheSessions(t *testing.T) {
	for _, sse := range []bool{false, true} {
		srv := authServer(t, authtest.Options{}, sse)
		ended := make(chan error, 1)
		start := time.Now()
		const within = 2 * time.Second
		s := dial(t, authConfig(srv, &Auth{Fetcher: authtest.Fetcher(nil), RedirectURL: redirect}, sse), Options{
			Deadline: start.Add(within),
			OnEnd:    func(err error) { ended <- err },
		})
		select {
		case err := <-ended:
			t.Fatalf("sse %v: the session ended past its dial's deadline: %v", sse, err)
		case <-time.After(time.Until(start.Add(within + 300*time.Millisecond))):
		}
		if err := authEcho(t, s, "after"); err != nil {
			t.Errorf("sse %v: a call past the dial's deadline: %v", sse, err)
		}
	}
}
