package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/internal/authtest"
	"github.com/mcpfsm/mcpfsm/internal/testutil"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"
)

const redirect = "http://127.0.0.1:3000/callback"

// authServer starts a protected MCP server (streamable HTTP, or SSE) on loopback.
func authServer(t *testing.T, opts authtest.Options, sse bool) *authtest.Server {
	ms := authtest.MCPServer()
	t.Cleanup(func() { authtest.CloseSessions(ms) })
	h := authtest.Streamable(ms)
	if sse {
		h = authtest.SSE(ms)
	}
	return authtest.New(opts, h).Start(t)
}

func authConfig(s *authtest.Server, a *Auth, sse bool) Config {
	h := &HTTP{URL: s.MCPURL(), Auth: a}
	if sse {
		return Config{Name: "authed", SSE: h}
	}
	return Config{Name: "authed", HTTP: h}
}

func authEcho(t *testing.T, s *Session, text string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": text}})
	if err != nil {
		return err
	}
	if got := res.Content[0].(*mcp.TextContent).Text; got != text {
		t.Errorf("echo = %q, want %q", got, text)
	}
	return nil
}

func dialErr(cfg Config) error {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	s, err := Dial(ctx, cfg, Options{})
	if err == nil {
		_ = s.Close(ctx)
		return errors.New("dial succeeded")
	}
	return err
}

// The authorization code flow over both HTTP transports: discovery, dynamic
// registration, PKCE, the code from the fetcher; the token is saved once the
// server took it, and a later session (even in another process: a new client
// on the same store) uses it without a login.
func TestAuthorizationCodeFlow(t *testing.T) {
	for _, sse := range []bool{false, true} {
		name := "streamable"
		if sse {
			name = "sse"
		}
		t.Run(name, func(t *testing.T) {
			srv := authServer(t, authtest.Options{Scopes: []string{"mcp"}}, sse)
			store := &FileStore{Dir: t.TempDir()}
			s := dial(t, authConfig(srv, &Auth{Fetcher: authtest.Fetcher(nil), RedirectURL: redirect, Store: store}, sse), Options{})
			if err := authEcho(t, s, "hello"); err != nil {
				t.Fatal(err)
			}
			if n := srv.Authorizations.Load(); n != 1 {
				t.Errorf("%d authorizations, want 1", n)
			}
			c, err := store.Load(context.Background(), "authed")
			if err != nil || c == nil || c.Token.RefreshToken == "" || c.Resource != srv.MCPURL() {
				t.Fatalf("stored credentials %v, %v", c, err)
			}
			info, err := os.Stat(store.Path("authed"))
			if err != nil || info.Mode().Perm() != 0o600 {
				t.Errorf("store file: %v, %v", info, err)
			}
			// A headless client (no fetcher) on the same store.
			s2 := dial(t, authConfig(srv, &Auth{Store: store}, sse), Options{})
			if err := authEcho(t, s2, "again"); err != nil {
				t.Fatal(err)
			}
			if n := srv.Authorizations.Load(); n != 1 {
				t.Errorf("%d authorizations after a restart, want still 1", n)
			}
		})
	}
}

// Without a fetcher and without a token, a session fails at once with an
// *AuthError that says what to run and carries the server's challenge; no user
// is waited for.
func TestHeadlessLoginRequired(t *testing.T) {
	srv := authServer(t, authtest.Options{Scopes: []string{"mcp", "files"}}, false)
	start := time.Now()
	err := dialErr(authConfig(srv, &Auth{LoginHint: "mcpfsm auth login servers.yaml authed"}, false))
	var ae *AuthError
	if !errors.As(err, &ae) || !errors.Is(err, ErrLoginRequired) {
		t.Fatalf("err = %v, want an *AuthError wrapping ErrLoginRequired", err)
	}
	var te *Error
	if !errors.As(err, &te) || te.HTTPStatus != http.StatusUnauthorized {
		t.Errorf("the *Error does not carry 401: %+v", te)
	}
	if ae.Status != 401 || strings.Join(ae.Challenge.Scope, " ") != "mcp files" || !strings.HasSuffix(ae.Challenge.ResourceMetadata, "/.well-known/oauth-protected-resource/mcp") {
		t.Errorf("challenge %+v", ae)
	}
	if !strings.Contains(err.Error(), "run mcpfsm auth login servers.yaml authed") {
		t.Errorf("the error does not say what to run: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
}

// A token that expired is refreshed before the request goes, on the same
// session; a refresh answer without a refresh token keeps the old one, in
// memory and in the store.
func TestRefreshKeepsRefreshToken(t *testing.T) {
	srv := authServer(t, authtest.Options{NoRefreshInAnswer: true}, false)
	store := &FileStore{Dir: t.TempDir()}
	s := dial(t, authConfig(srv, &Auth{Fetcher: authtest.Fetcher(nil), RedirectURL: redirect, Store: store}, false), Options{})
	if err := authEcho(t, s, "one"); err != nil {
		t.Fatal(err)
	}
	before, _ := store.Load(context.Background(), "authed")
	srv.Expire() // the server says the token expired; the client still thinks it good
	if err := authEcho(t, s, "two"); err != nil {
		t.Fatal(err)
	}
	if n := srv.Refreshes.Load(); n != 1 {
		t.Errorf("%d refreshes, want 1", n)
	}
	after, _ := store.Load(context.Background(), "authed")
	if after.Token.AccessToken == before.Token.AccessToken || after.Token.RefreshToken != before.Token.RefreshToken {
		t.Errorf("store after refresh: new access %v, refresh token kept %v",
			after.Token.AccessToken != before.Token.AccessToken, after.Token.RefreshToken == before.Token.RefreshToken)
	}
}

// A revoked token whose refresh fails: the request fails with an AuthError, the
// old credentials stay in the store (a failed login never erases them), and
// the refresh is not tried again for the same credentials.
func TestRevokedStaysStored(t *testing.T) {
	srv := authServer(t, authtest.Options{}, false)
	store := &FileStore{Dir: t.TempDir()}
	s := dial(t, authConfig(srv, &Auth{Store: store, Fetcher: authtest.Fetcher(nil), RedirectURL: redirect}, false), Options{})
	if err := authEcho(t, s, "one"); err != nil {
		t.Fatal(err)
	}
	stored, _ := store.Load(context.Background(), "authed")
	s2 := dial(t, authConfig(srv, &Auth{Store: store}, false), Options{})
	srv.Revoke()
	err := authEcho(t, s2, "two")
	var ae *AuthError
	if !errors.As(err, &ae) || !errors.Is(err, ErrLoginRequired) || !strings.Contains(err.Error(), "invalid_grant") {
		t.Fatalf("err = %v", err)
	}
	if err := authEcho(t, s2, "three"); err == nil {
		t.Fatal("a revoked token worked")
	}
	if n := srv.RefreshFails.Load(); n != 1 {
		t.Errorf("%d refused refreshes, want 1 (not tried again)", n)
	}
	now, _ := store.Load(context.Background(), "authed")
	if now == nil || now.Token.RefreshToken != stored.Token.RefreshToken {
		t.Errorf("the stored credentials changed after a failure")
	}
}

// Client credentials: no user, no store; an expired token is had again.
func TestClientCredentials(t *testing.T) {
	srv := authServer(t, authtest.Options{ClientID: "svc", ClientSecret: "svc-secret-value", Scopes: []string{"mcp"}}, false)
	s := dial(t, authConfig(srv, &Auth{Grant: GrantClientCredentials, ClientID: "svc", ClientSecret: "svc-secret-value"}, false), Options{})
	if err := authEcho(t, s, "one"); err != nil {
		t.Fatal(err)
	}
	srv.Expire()
	if err := authEcho(t, s, "two"); err != nil {
		t.Fatal(err)
	}
	if n := srv.Credentials.Load(); n != 2 {
		t.Errorf("%d client credentials grants, want 2", n)
	}
	err := dialErr(authConfig(srv, &Auth{Grant: GrantClientCredentials, ClientID: "svc", ClientSecret: "wrong-secret-value"}, false))
	if !strings.Contains(err.Error(), "invalid_client") || strings.Contains(err.Error(), "wrong-secret-value") {
		t.Errorf("err = %v", err)
	}
}

// Static bearer tokens: sent; refused for good when the source has no other.
func TestStaticToken(t *testing.T) {
	srv := authServer(t, authtest.Options{ClientID: "pre"}, false)
	access, _, _ := srv.Issue()
	s := dial(t, authConfig(srv, &Auth{Token: oauth2.StaticTokenSource(&oauth2.Token{AccessToken: access})}, false), Options{})
	if err := authEcho(t, s, "one"); err != nil {
		t.Fatal(err)
	}
	srv.Revoke()
	err := authEcho(t, s, "two")
	var ae *AuthError
	if !errors.As(err, &ae) || strings.Contains(err.Error(), access) {
		t.Fatalf("err = %v", err)
	}
}

// Step-up: a call that needs more scope is authorized again with the union,
// once, and retried on the same session.
func TestScopeStepUp(t *testing.T) {
	srv := authServer(t, authtest.Options{Scopes: []string{"read"}, CallScopes: []string{"write"}}, false)
	s := dial(t, authConfig(srv, &Auth{Fetcher: authtest.Fetcher(nil), RedirectURL: redirect}, false), Options{})
	if err := authEcho(t, s, "one"); err != nil {
		t.Fatal(err)
	}
	if n := srv.Authorizations.Load(); n != 2 {
		t.Errorf("%d authorizations, want 2 (login, step-up)", n)
	}
}

// Bad input from the authorization side ends in a refusal with a reason, within
// the request's time, with no secret in the error or the log.
func TestAuthBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts authtest.Options
		want string
	}{
		{"malformed metadata", authtest.Options{MalformedMetadata: true}, "authorization server metadata"},
		{"hanging token endpoint", authtest.Options{HangToken: true}, "token exchange failed"},
		{"redirect to another host", authtest.Options{RedirectMetadata: "http://127.0.0.2:1/elsewhere-metadata"}, "another origin"},
		{"insufficient scope loop", authtest.Options{NeverGrant: "admin"}, "refused the request again"},
		{"token endpoint echoing the form", authtest.Options{EchoToken: true}, "token exchange failed: the token endpoint answered 400 Bad Request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := authServer(t, tc.opts, false)
			var log testutil.SyncBuffer
			cfg := authConfig(srv, &Auth{Fetcher: authtest.Fetcher(nil), RedirectURL: redirect, ClientSecret: "", Timeout: time.Second}, false)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			start := time.Now()
			s, err := Dial(ctx, cfg, Options{Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			if err == nil {
				_ = s.Close(ctx)
				t.Fatal("dial succeeded")
			}
			if d := time.Since(start); d > 2*time.Second+500*time.Millisecond {
				t.Errorf("took %v", d)
			}
			var ae *AuthError
			if !errors.As(err, &ae) || ctx.Err() != nil {
				t.Fatalf("err = %v (ctx %v), want an *AuthError before the deadline", err, ctx.Err())
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
			for _, secret := range []string{"access_token", "refresh_token", "code_verifier"} {
				if strings.Contains(err.Error(), secret) || strings.Contains(log.String(), secret) {
					t.Errorf("%s shows in the error or log", secret)
				}
			}
		})
	}
}

// TestAuthWithinDialDeadline: a caller whose context does not say when it ends (a
// machine's effect) gives the dial's deadline in Options.Deadline; an authorization
// that hangs (here the token endpoint, with Auth.Timeout far longer) fails as a
// refusal within three quarters of it, not at the caller's timeout.
func TestAuthWithinDialDeadline(t *testing.T) {
	srv := authServer(t, authtest.Options{HangToken: true}, false)
	cfg := authConfig(srv, &Auth{Fetcher: authtest.Fetcher(nil), RedirectURL: redirect, Timeout: time.Minute}, false)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // later than the dial's
	defer cancel()
	const within = 1500 * time.Millisecond
	start := time.Now()
	s, err := Dial(ctx, cfg, Options{Deadline: start.Add(within)})
	took := time.Since(start)
	if err == nil {
		_ = s.Close(ctx)
		t.Fatal("dial succeeded")
	}
	var ae *AuthError
	if !errors.As(err, &ae) || !strings.Contains(err.Error(), "token exchange failed") {
		t.Errorf("err = %v, want an *AuthError saying the token exchange failed", err)
	}
	// The first authorization fails at three quarters of the deadline; the go-sdk's
	// fallback to initialize, refused again, has the rest, and the dial ends at its
	// deadline at the latest (on a loaded machine), then unwinds.
	if took > within+500*time.Millisecond {
		t.Errorf("the dial failed after %v, want by its deadline %v (the authorization takes three quarters)", took, within)
	}
}

// The file store: 0600 in a 0700 directory, atomic, keys that are not names
// get a file of their own.
func TestFileStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tokens")
	s := &FileStore{Dir: dir}
	ctx := context.Background()
	if c, err := s.Load(ctx, "none"); c != nil || err != nil {
		t.Fatalf("Load of nothing = %v, %v", c, err)
	}
	c := &Credentials{Resource: "https://h/mcp", ClientID: "c", TokenURL: "https://h/token", Token: &oauth2.Token{AccessToken: "a1", RefreshToken: "r1"}}
	if err := s.Save(ctx, "srv", c); err != nil {
		t.Fatal(err)
	}
	// A refresh answer without a refresh token keeps the old one.
	if err := s.Save(ctx, "srv", &Credentials{ClientID: "c", TokenURL: "https://h/token", Token: &oauth2.Token{AccessToken: "a2"}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load(ctx, "srv")
	if err != nil || got.Token.AccessToken != "a2" || got.Token.RefreshToken != "r1" {
		t.Fatalf("Load = %+v, %v", got, err)
	}
	if info, _ := os.Stat(dir); info.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v", info.Mode().Perm())
	}
	if a, b := s.Path("a/b"), s.Path("a_b"); a == b || filepath.Dir(a) != dir {
		t.Errorf("paths %s and %s", a, b)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temporary file left: %s", e.Name())
		}
	}
	if err := os.WriteFile(s.Path("bad"), []byte("{not json: secret-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(ctx, "bad"); err == nil || strings.Contains(err.Error(), "secret-token") {
		t.Errorf("Load of a bad file: %v", err)
	}
	if strings.Contains(got.String(), "a2") || strings.Contains(got.String(), "r1") {
		t.Errorf("String shows a token: %s", got)
	}
}

// TestBearerTokenRedacted: a server that quotes the bearer token it was sent (an OAuth
// token, which the config does not hold) in its error does not get it printed.
func TestBearerTokenRedacted(t *testing.T) {
	const token = "tok-SEKRIT-0123456789"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"bad header %s"}}`, r.Header.Get("Authorization"))
	}))
	defer srv.Close()
	cfg := Config{Name: "echo-token", HTTP: &HTTP{URL: srv.URL, Auth: &Auth{Token: oauth2.StaticTokenSource(&oauth2.Token{AccessToken: token})}}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := Dial(ctx, cfg, Options{})
	if err == nil {
		t.Fatal("dial succeeded")
	}
	if strings.Contains(err.Error(), token) || !strings.Contains(err.Error(), "REDACTED") {
		t.Errorf("the error quotes the bearer token: %v", err)
	}
}

// A refresh that fails for a reason of the token endpoint's (a 503 here; a timeout,
// a network error) is tried again by the next request that needs it: only a refusal
// of the grant (invalid_grant) is not. It once counted as a refusal: after a blip of
// the token endpoint, a good refresh token was never used again, and a headless
// session needed a login.
func TestRefreshAfterTokenEndpointOutage(t *testing.T) {
	srv := authServer(t, authtest.Options{}, false)
	store := &FileStore{Dir: t.TempDir()}
	s := dial(t, authConfig(srv, &Auth{Fetcher: authtest.Fetcher(nil), RedirectURL: redirect, Store: store}, false), Options{})
	if err := authEcho(t, s, "one"); err != nil {
		t.Fatal(err)
	}
	headless := dial(t, authConfig(srv, &Auth{Store: store}, false), Options{})
	srv.Expire()
	srv.Outage.Store(true)
	if err := authEcho(t, headless, "two"); err == nil {
		t.Fatal("a call succeeded with an expired token while the token endpoint was down")
	}
	srv.Outage.Store(false)
	if err := authEcho(t, headless, "three"); err != nil {
		t.Errorf("the token endpoint is back and the refresh token good: %v", err)
	}
	if n := srv.Refreshes.Load(); n != 1 {
		t.Errorf("%d refreshes, want 1", n)
	}
}

// TestFetcherIgnoringItsContext: an Auth.Fetcher that does not heed its context (a
// user's code waiting for a browser) held the request that needed it, and with it a
// connect (past connect_timeout) and the connection's Close, for as long as it
// pleased. The request now ends with its context: an *AuthError, in time.
func TestFetcherIgnoringItsContext(t *testing.T) {
	srv := authServer(t, authtest.Options{}, false)
	release := make(chan struct{})
	defer close(release)
	deaf := func(context.Context, *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
		<-release
		return nil, errors.New("the user went away")
	}
	cfg := authConfig(srv, &Auth{Fetcher: deaf, RedirectURL: redirect}, false)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // as a machine's effect: the dial's deadline is Options.Deadline
	defer cancel()
	const within = 1500 * time.Millisecond
	start := time.Now()
	s, err := Dial(ctx, cfg, Options{Deadline: start.Add(within)})
	if err == nil {
		_ = s.Close(ctx)
		t.Fatal("dial succeeded")
	}
	if d := time.Since(start); d > within+500*time.Millisecond {
		t.Errorf("the dial returned after %v, want by its deadline (%v)", d, within)
	}
	var ae *AuthError
	if !errors.As(err, &ae) {
		t.Errorf("err = %v, want an *AuthError", err)
	}
}
