package transport

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/internal/authtest"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"golang.org/x/oauth2"
)

// panickyTripper is a caller's http.RoundTripper with a bug: once armed, it
// panics on the request that makes its count reach zero (and, with always, on
// every one after), or, with inBody, that request's response body panics when
// read.
type panickyTripper struct {
	base   http.RoundTripper
	left   atomic.Int64 // requests until the panic; 0 or less: disarmed
	always bool
	inBody bool
	panics atomic.Int64
}

func (p *panickyTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	n := p.left.Add(-1)
	if p.inBody {
		resp, err := p.base.RoundTrip(req)
		if n == 0 && err == nil {
			resp.Body = panickyBody{resp.Body, p}
		}
		return resp, err
	}
	if n == 0 || (p.always && n < 0 && p.panics.Load() > 0) {
		p.panics.Add(1)
		callersBug()
	}
	return p.base.RoundTrip(req)
}

// panickyBody is a response body whose Read panics.
type panickyBody struct {
	io.ReadCloser
	p *panickyTripper
}

func (b panickyBody) Read([]byte) (int, error) {
	b.p.panics.Add(1)
	callersBug()
	return 0, io.EOF
}

// callersBug panics as a real bug does: with a runtime error.
func callersBug() {
	var m map[string]int
	m["the caller's bug"]++ // a nil map
}

// TestPanickingRoundTripper: a caller's HTTP.Client whose RoundTripper panics. On
// the call's POST the panic went up the caller's goroutine through the go-sdk's
// jsonrpc2 write, past the line that takes the call off the connection's calls
// in flight; package transport's innermost sending middleware (unreadable)
// recovered it as the call's error, but the connection held the call in flight
// for ever: its Close waited for it, and the session's Close returned only at its
// context's end, forced, a goroutine left. On a request of the go-sdk's own
// goroutines (the event stream's GET, the DELETE at close), and in a response's
// body (read on the go-sdk's goroutines), nothing recovered it: the process died.
// Now the caller's RoundTripper (and the bodies it returns) is called through
// callerTripper, which turns a panic into the request's error, naming it: the
// call fails by its deadline, the panic's stack is logged, and Close returns, not
// forced.
func TestPanickingRoundTripper(t *testing.T) {
	for _, proto := range []string{"", "2025-11-25", "sse"} {
		for _, mode := range []string{"one request", "every request", "a body"} {
			name := "newest"
			if proto != "" {
				name = proto
			}
			if proto == "sse" && mode == "a body" {
				continue // the answer comes on the event stream, not the POST's body
			}
			t.Run(name+"/"+mode, func(t *testing.T) { panickingRoundTripper(t, proto, mode) })
		}
	}
}

func panickingRoundTripper(t *testing.T, proto, mode string) {
	h := testserver.StartHTTP(t, testserver.Options{SSE: proto == "sse"})
	rt := &panickyTripper{base: http.DefaultTransport.(*http.Transport).Clone(), always: mode == "every request", inBody: mode == "a body"}
	t.Cleanup(rt.base.(*http.Transport).CloseIdleConnections)
	cfg := httpConfig(h)
	if proto == "sse" {
		cfg = sseConfig(h)
	} else {
		cfg.ProtocolVersion = proto
	}
	cfg.httpConfig().Client = &http.Client{Transport: rt}
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	var logs syncBuffer
	s, err := Dial(ctx, cfg, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = s.Close(ctx)
		}
	}()
	if _, err := echo(callCtx(t), s, "before"); err != nil {
		t.Fatalf("a call before: %v", err)
	}

	rt.left.Store(1) // the next request, the call's POST, panics
	cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer ccancel()
	start := time.Now()
	_, err = echo(cctx, s, "during")
	if err == nil {
		t.Fatal("a call whose request panicked succeeded")
	}
	if d := time.Since(start); d > 5*time.Second+time.Second {
		t.Errorf("the call returned after %v, its deadline 5s", d)
	}
	if rt.panics.Load() == 0 {
		t.Fatal("the RoundTripper did not panic")
	}
	if mode != "a body" && (!strings.Contains(err.Error(), "RoundTripper of HTTP.Client panicked") || !strings.Contains(err.Error(), "assignment to entry in nil map")) {
		t.Errorf("the call's error does not name the panic: %v", err)
	}
	if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "callersBug") {
		t.Errorf("the panic's stack was not logged:\n%s", l)
	}

	closeCtx, closeCancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer closeCancel()
	start = time.Now()
	err = s.Close(closeCtx)
	closed = true
	if errors.Is(err, ErrForcedClose) || closeCtx.Err() != nil {
		t.Errorf("Close after %v (its context 5s): %v; want a graceful close", time.Since(start), err)
	}
}

// TestPanickingAuthClient: an OAuth client whose Auth.Client's RoundTripper
// panics. The refresh runs on a goroutine of the OAuth client's (it outlives the
// request that needs it): nothing recovered the panic there, and the process
// died. Now the refresh fails with an error that names the panic (the client's
// last error; the request goes without a token), its stack logged, and Close
// returns.
func TestPanickingAuthClient(t *testing.T) {
	p := newPipeAuth(t, authtest.Options{ClientID: "pre"}, false)
	rt := &panickyTripper{base: p.pipe.Client().Transport, always: true}
	rt.left.Store(1) // the refresh's requests panic (oauth2 tries a second way to send the client's ID)
	st, logs, _ := refreshThroughAPanic(t, p, rt, rt.panics.Load)
	if !strings.Contains(st.LastError, "RoundTripper of Auth.Client panicked") {
		t.Errorf("the client's last error does not name the panic: %q", st.LastError)
	}
	if !strings.Contains(logs, "level=ERROR") || !strings.Contains(logs, "callersBug") {
		t.Errorf("the panic's stack was not logged:\n%s", logs)
	}
}

// refreshThroughAPanic makes an OAuth client of p's whose Auth.Client's
// RoundTripper is rt (panics counts its panics), gives it expired credentials,
// and asks for a token, which must fail: the refresh's request panics. It checks
// that rt did panic and that the client closes, and returns the client's status,
// its log and the credentials whose refresh failed.
func refreshThroughAPanic(t *testing.T, p *pipeAuth, rt http.RoundTripper, panics func() int64) (TokenStatus, string, *Credentials) {
	t.Helper()
	cfg := p.config(&Auth{}, false)
	cfg.HTTP.Auth.Client = &http.Client{Transport: rt}
	var logs syncBuffer
	o, err := NewOAuth(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	creds := p.issued(time.Now().Add(-time.Minute)) // expired: refreshed by the first request
	if err := o.SetCredentials(creds); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if tok, _ := o.bearer(ctx); tok != "" {
		t.Error("a token from a refresh whose request panicked")
	}
	if panics() == 0 {
		t.Fatal("the RoundTripper did not panic")
	}
	st := o.Status()
	if err := o.Close(ctx); err != nil {
		t.Errorf("close: %v", err)
	}
	return st, logs.String(), creds
}

// panickySource is a caller's oauth2.TokenSource (and auth.OAuthHandler) with a
// bug: once armed, every Token panics.
type panickySource struct {
	armed  atomic.Bool
	panics atomic.Int64
}

func (p *panickySource) Token() (*oauth2.Token, error) {
	if p.armed.Load() {
		p.panics.Add(1)
		callersBug()
	}
	return &oauth2.Token{AccessToken: "tok"}, nil
}

func (p *panickySource) TokenSource(context.Context) (oauth2.TokenSource, error) { return p, nil }

func (p *panickySource) Authorize(context.Context, *http.Request, *http.Response) error {
	return errors.New("no")
}

// TestPanickingTokenSource: a caller's Auth.Token source, or Auth.Handler's token
// source, that panics. It is called on the request's goroutine, for the bearer
// of every request: on a call's POST the panic wedged the go-sdk's connection as
// a panicking RoundTripper did (Close forced at its context's end), and on the
// go-sdk's own goroutines (the DELETE at close) it ended the process. Now it is
// the token source's failure (the request goes without a token), its stack
// logged, and Close is graceful.
func TestPanickingTokenSource(t *testing.T) {
	for _, field := range []string{"Auth.Token", "Auth.Handler"} {
		t.Run(field, func(t *testing.T) {
			h := testserver.StartHTTP(t, testserver.Options{})
			src := &panickySource{}
			cfg := httpConfig(h)
			if field == "Auth.Token" {
				cfg.HTTP.Auth = &Auth{Token: src}
			} else {
				cfg.HTTP.Auth = &Auth{Handler: src}
			}
			// The server asks for no token: the call goes without one.
			servedThroughAPanic(t, cfg, field, func() { src.armed.Store(true) }, src.panics.Load)
		})
	}
}

// servedThroughAPanic dials cfg, arms the caller's code that panics (what names it
// in the log), and checks that a call is answered nonetheless, that the code did
// panic (panics counts), that the panic's stack was logged, and that Close is
// graceful.
func servedThroughAPanic(t *testing.T, cfg Config, what string, arm func(), panics func() int64) {
	t.Helper()
	var logs syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	s, err := Dial(ctx, cfg, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	arm()
	cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer ccancel()
	if got, err := echo(cctx, s, "during"); err != nil || got != "during" {
		t.Errorf("a call while %s panicked = %q, %v", what, got, err)
	}
	if panics() == 0 {
		t.Fatalf("%s did not panic", what)
	}
	if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "callersBug") || !strings.Contains(l, what+" panicked") {
		t.Errorf("the panic's stack was not logged:\n%s", l)
	}
	closeCtx, closeCancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer closeCancel()
	start := time.Now()
	if err := s.Close(closeCtx); errors.Is(err, ErrForcedClose) || closeCtx.Err() != nil {
		t.Errorf("Close after %v (its context 5s): %v; want a graceful close", time.Since(start), err)
	}
}

// panickyStore is a caller's TokenStore with a bug: its Load, or its Save,
// panics.
type panickyStore struct {
	load, save bool
	panics     atomic.Int64
}

func (s *panickyStore) Load(context.Context, string) (*Credentials, error) {
	if s.load {
		s.panics.Add(1)
		callersBug()
	}
	return nil, nil
}

func (s *panickyStore) Save(context.Context, string, *Credentials) error {
	if s.save {
		s.panics.Add(1)
		callersBug()
	}
	return nil
}

// TestPanickingStore: a caller's Auth.Store whose Load or Save panics. The OAuth
// client calls its store on a goroutine of its own (storeCall): nothing
// recovered the panic there, and the process died (the test binary is killed
// without the guard). Now it is that call's error (a read that found nothing, a
// save not made), its stack logged, and the client goes on with the
// credentials it holds.
func TestPanickingStore(t *testing.T) {
	for _, which := range []string{"Load", "Save"} {
		t.Run(which, func(t *testing.T) {
			p := newPipeAuth(t, authtest.Options{ClientID: "pre"}, false)
			store := &panickyStore{load: which == "Load", save: which == "Save"}
			cfg := p.config(&Auth{Store: store}, false)
			var logs syncBuffer
			o, err := NewOAuth(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			if err := o.SetCredentials(p.issued(time.Now().Add(-time.Minute))); err != nil { // expired: refreshed, and saved, by the first request
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if tok, _ := o.bearer(ctx); tok == "" {
				t.Error("no token: the refresh failed")
			}
			if err := o.Close(ctx); err != nil {
				t.Errorf("close: %v", err)
			}
			if store.panics.Load() == 0 {
				t.Fatal("the store did not panic")
			}
			if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "callersBug") || !strings.Contains(l, "Auth.Store panicked (in "+which+")") {
				t.Errorf("the panic's stack was not logged:\n%s", l)
			}
		})
	}
}

// TestPanickingFetcher: a caller's Auth.Fetcher that panics. The authorization
// code flow, which calls it, runs on a goroutine of the OAuth client's (so that
// a fetcher that does not heed its context does not hold the request): nothing
// recovered the panic there, and the process died (the test binary is killed
// without the guard). Now the authorization fails with an error naming the
// panic, its stack logged.
func TestPanickingFetcher(t *testing.T) {
	srv := protectedServer(t, authtest.Options{}, true)
	var panics atomic.Int64
	fetch := func(context.Context, *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
		panics.Add(1)
		callersBug()
		return nil, nil
	}
	var logs syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	_, err := Dial(ctx, authConfig(srv, &Auth{Fetcher: fetch, RedirectURL: redirect}, false), Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err == nil {
		t.Fatal("a dial whose login panicked succeeded")
	}
	if panics.Load() == 0 {
		t.Fatal("the fetcher did not panic")
	}
	if !strings.Contains(err.Error(), "Auth.Fetcher panicked") || !strings.Contains(err.Error(), "assignment to entry in nil map") {
		t.Errorf("the dial's error does not name the panic: %v", err)
	}
	if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "callersBug") {
		t.Errorf("the panic's stack was not logged:\n%s", l)
	}
}

// quotingTripper is a caller's RoundTripper whose bug quotes the request it
// could not send: its form (a refresh token), padded to a large text.
type quotingTripper struct{ panics atomic.Int64 }

func (q *quotingTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	body, _ := io.ReadAll(req.Body)
	q.panics.Add(1)
	panic("cannot send " + string(body) + strings.Repeat(" and more", 100_000))
}

// TestPanickingAuthClientRedacted: an Auth.Client's RoundTripper that panics
// with a value quoting the refresh request's form. The OAuth client scrubbed
// nothing of it (its callerTripper had no redactor, and its errors are not an
// *Error's, scrubbed where shown): the refresh token was in the log, twice (the
// panic's record, the failed refresh's), and in Status's LastError, which says
// it is without secrets; and the text, a megabyte here, was each time whole.
// Now a panic's text is scrubbed (the config's secrets, and the tokens the
// OAuth client uses) and capped (MaxErrorText) where the panicError is made.
func TestPanickingAuthClientRedacted(t *testing.T) {
	p := newPipeAuth(t, authtest.Options{ClientID: "pre"}, false)
	rt := &quotingTripper{}
	st, l, creds := refreshThroughAPanic(t, p, rt, rt.panics.Load)
	secret := creds.Token.RefreshToken
	if !strings.Contains(st.LastError, "RoundTripper of Auth.Client panicked") || !strings.Contains(st.LastError, "cannot send") {
		t.Errorf("the client's last error does not name the panic: %.300q", st.LastError)
	}
	if strings.Contains(st.LastError, secret) {
		t.Errorf("the client's last error shows the refresh token: %.300q", st.LastError)
	}
	if len(st.LastError) > 2*MaxErrorText {
		t.Errorf("the client's last error is %d bytes long", len(st.LastError))
	}
	if !strings.Contains(l, "callersBug") && !strings.Contains(l, "quotingTripper") {
		t.Errorf("the panic's stack was not logged:\n%.2000s", l)
	}
	if strings.Contains(l, secret) {
		t.Errorf("the log shows the refresh token")
	}
	if len(l) > 8*MaxErrorText+64<<10 {
		t.Errorf("the log is %d bytes long", len(l))
	}
}

// panickyJar is a caller's cookie jar with a bug: once armed, its Cookies
// (asked for every request's cookies) panics.
type panickyJar struct {
	http.CookieJar
	armed  atomic.Bool
	panics atomic.Int64
}

func (j *panickyJar) Cookies(u *url.URL) []*http.Cookie {
	if j.armed.Load() {
		j.panics.Add(1)
		callersBug()
	}
	return j.CookieJar.Cookies(u)
}

// TestPanickingJar: a caller's HTTP.Client whose Jar panics. net/http's Client
// asks its Jar for each request's cookies, above the RoundTripper that
// callerTripper guards: on a call's POST the panic wedged the connection, and on
// the go-sdk's own goroutines (the event stream's GET, the DELETE at close) it
// ended the process. Now the request goes without the jar's cookies (the Jar's
// methods return nothing to fail with), the panic's stack logged, and the call
// and Close are as usual.
func TestPanickingJar(t *testing.T) {
	h := testserver.StartHTTP(t, testserver.Options{})
	base, _ := cookiejar.New(nil)
	jar := &panickyJar{CookieJar: base}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	cfg := httpConfig(h)
	cfg.HTTP.Client = &http.Client{Transport: tr, Jar: jar}
	servedThroughAPanic(t, cfg, "HTTP.Client.Jar", func() { jar.armed.Store(true) }, jar.panics.Load)
}

// TestPanickingCheckRedirect: a caller's client (HTTP.Client, Auth.Client) whose
// CheckRedirect panics, called by net/http's Client above the RoundTripper:
// nothing recovered it (on an OAuth client's renewal, or the go-sdk's
// goroutines, the process died). Now the redirect is refused with an error
// naming the panic, its stack logged.
func TestPanickingCheckRedirect(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/from" {
			http.Redirect(w, r, "/to", http.StatusFound)
			return
		}
		_, _ = io.WriteString(w, "here")
	}))
	defer srv.Close()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	var logs syncBuffer
	c := callersClient(&http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error {
		callersBug()
		return nil
	}}, "Auth.Client", slog.New(slog.NewTextHandler(&logs, nil)), nil)
	resp, err := c.Get(srv.URL + "/from")
	if err == nil {
		resp.Body.Close()
		t.Fatal("a redirect whose CheckRedirect panicked was followed")
	}
	if !strings.Contains(err.Error(), "Auth.Client.CheckRedirect panicked") {
		t.Errorf("the error does not name the panic: %v", err)
	}
	if l := logs.String(); !strings.Contains(l, "callersBug") {
		t.Errorf("the panic's stack was not logged:\n%s", l)
	}
}
