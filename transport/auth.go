package transport

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"
)

// Auth says how the sessions of an HTTP or SSE server authorize their requests
// (HTTP.Auth). Set one of Handler, Token, or the OAuth fields (Grant and what
// it needs).
//
// The requests to the server's origin carry "Authorization: Bearer TOKEN".
// When the server answers one with 401 or 403, the session asks for better
// credentials once (it refreshes the token, or authorizes anew) and, if it got
// them, sends the request again (the server did not run it); otherwise the
// request fails with an *AuthError carrying the server's challenge. A 403
// whose challenge is not insufficient_scope is final: the credentials are
// good, the request is not allowed.
//
// The OAuth client (the Grant fields) runs one authorization or refresh at a
// time, and keeps its tokens for every session of a connection: a Conn builds
// it once per config and shares it (Dial alone builds one per session, which
// the session's Close closes, or a failed Dial within its context; use
// NewOAuth and Handler to share one yourself,
// and OAuth.Close once its sessions are closed). With a Store the tokens
// outlive the process.
type Auth struct {
	// Handler, if set, authorizes the requests and every other field is
	// ignored: a go-sdk auth.OAuthHandler (such as auth.AuthorizationCodeHandler,
	// or the *OAuth that NewOAuth returns), used as the go-sdk's streamable
	// transport uses it.
	Handler auth.OAuthHandler

	// Token, if set, gives the bearer tokens: oauth2.StaticTokenSource for a
	// fixed token, or any golang.org/x/oauth2 token source (which refreshes as
	// it does). A token the server refuses is asked for once more; if the
	// source gives the same one, the refusal stands. The OAuth fields below
	// are ignored.
	Token oauth2.TokenSource

	// Grant is the OAuth grant: GrantAuthorizationCode (the default) or
	// GrantClientCredentials.
	Grant Grant
	// ClientID and ClientSecret are a client registered in advance with the
	// authorization server: required for client credentials; for the
	// authorization code flow, used when set (the secret may be empty for a
	// public client). ClientSecret is a secret.
	ClientID     string
	ClientSecret string
	// ClientIDMetadataURL, if set, is the client's ID as a client ID metadata
	// document (an https URL with a path), used when the authorization server
	// supports them.
	ClientIDMetadataURL string
	// Registration is the metadata of dynamic client registration (RFC 7591),
	// used when the authorization server offers it and no ClientID is set;
	// nil: the redirect URL, the authorization_code and refresh_token grants,
	// and no client secret (a public client, as a native app is).
	// NoRegistration turns it off.
	Registration   *oauthex.ClientRegistrationMetadata
	NoRegistration bool
	// RedirectURL is where the authorization server sends the user back with
	// the code (the authorization code flow): the URL that Fetcher, or
	// `mcpfsm auth login` listening on a loopback address, receives.
	RedirectURL string
	// Scopes are asked for besides those the server names (in its challenge,
	// or its metadata's scopes_supported).
	Scopes []string
	// Fetcher plays the user in the authorization code flow: it sends the user
	// to the authorization URL and returns the code the redirect brings back.
	// Nil in a headless process: a new authorization then fails at once with
	// ErrLoginRequired (and LoginHint), never waiting for a user. It runs
	// within the time of the request that needs it (see Timeout).
	Fetcher auth.AuthorizationCodeFetcher
	// Store keeps the tokens across restarts; nil keeps them in memory.
	Store TokenStore
	// StoreKey is the server's key in Store; Config.Name if empty.
	StoreKey string
	// LoginHint says how to log in, for errors that need a login ("run
	// `mcpfsm auth login servers.yaml files`").
	LoginHint string
	// LoginScopeHint, if set, says how to log in asking for more scope, for the
	// errors of a step-up (403 insufficient_scope) that only a user can grant:
	// the command is LoginScopeHint[0], the scopes (one argument, quoted for a
	// POSIX shell), then LoginScopeHint[1]. ("mcpfsm auth login --scope ",
	// " servers.yaml files".) Without it such errors say LoginHint.
	LoginScopeHint [2]string
	// Client makes the requests to the authorization server (metadata,
	// registration, tokens); nil: a private client. It never follows a
	// redirect to another origin. A panic in its RoundTripper fails the
	// request, as HTTP.Client's does.
	Client *http.Client
	// Timeout bounds each request to the authorization server (DefaultAuthTimeout
	// if 0). An authorization as a whole, the user's part included, gets at most
	// three quarters of the time left to the request that needs it, so that a
	// hanging authorization server fails it as a refusal, with its reason,
	// before the request's own deadline.
	Timeout time.Duration
}

// DefaultAuthTimeout bounds a request to an authorization server when
// Auth.Timeout is 0.
const DefaultAuthTimeout = 10 * time.Second

// A Grant is an OAuth grant type.
type Grant string

// The grants of Auth.Grant.
const (
	// GrantAuthorizationCode is the authorization code flow with PKCE: a user
	// logs in (Fetcher, or `mcpfsm auth login`), and the tokens are refreshed
	// without the user after that.
	GrantAuthorizationCode Grant = "authorization_code"
	// GrantClientCredentials is the client credentials flow: a service
	// authenticates as itself (ClientID, ClientSecret), with no user.
	GrantClientCredentials Grant = "client_credentials"
)

// ErrLoginRequired is wrapped by the error of a request that needs a new
// authorization with a user, made where no user can be asked (Auth.Fetcher is
// nil).
var ErrLoginRequired = errors.New("login required")

// ErrAuthServerUnavailable is wrapped by the error of a request whose
// credentials had to be renewed (they had expired, or the server refused
// them) and could not be, because the authorization server gave no answer (a
// network error, a timeout, a 5xx): nothing was refused, and asking again
// later may work without a user. Such a request fails as one whose server
// could not be reached does (its HTTP status is not kept, and it is not an
// *AuthError), so that a connection retries it as a server that is down, not
// as refused credentials.
var ErrAuthServerUnavailable = errors.New("the authorization server gave no answer")

// authUnavailable is the error of an authorization whose grant (a refresh, a
// client credentials grant) got no answer: see ErrAuthServerUnavailable.
type authUnavailable struct{ err error }

func (e *authUnavailable) Error() string {
	return "the credentials could not be renewed: " + ErrAuthServerUnavailable.Error() + ": " + e.err.Error()
}

func (e *authUnavailable) Unwrap() []error { return []error{ErrAuthServerUnavailable, e.err} }

// storeUnanswered is the error of a request the server refused whose re-read
// of the token store (a login elsewhere?) got no answer by its deadline: like
// authUnavailable, nothing was refused for good, and the request fails as one
// that got no answer (see storeSilent).
type storeUnanswered struct{ err error }

func (e *storeUnanswered) Error() string {
	return "the server refused the credentials held, and " + e.err.Error()
}

func (e *storeUnanswered) Unwrap() error { return e.err }

// unanswered reports whether err, the failure of a token request (a
// *tokenError), is a failure to get an answer rather than a refusal.
func unanswered(err error) bool {
	var te *tokenError
	return errors.As(err, &te) && !refusedGrant(err)
}

// unavailableError is what a session's HTTP client returns for a request
// whose credentials could not be renewed for want of an answer (see
// ErrAuthServerUnavailable), marked rejected by the transport for the SDK.
type unavailableError struct{ err error }

func (e *unavailableError) Error() string   { return e.err.Error() }
func (e *unavailableError) Unwrap() []error { return []error{e.err, errRejected} }

// An AuthError is the error of a request the server refused for its
// credentials (HTTP 401 or 403) when no better ones could be had. Its text
// never holds a token or a client secret.
type AuthError struct {
	Status    int       // 401 or 403
	Challenge Challenge // what the server's WWW-Authenticate said
	Err       error     // why no better credentials: ErrLoginRequired, the token endpoint's answer...
}

// Error says why no better credentials could be had, first (what to do, when
// it is a login), then the server's refusal and what it asked for.
func (e *AuthError) Error() string {
	var b strings.Builder
	if e.Err != nil {
		b.WriteString(e.Err.Error())
		b.WriteString(" (")
	} else {
		b.WriteString("the server refused our credentials (")
	}
	fmt.Fprintf(&b, "HTTP %d", e.Status)
	if s := e.Challenge.String(); s != "" {
		b.WriteString("; ")
		b.WriteString(s)
	}
	b.WriteString(")")
	return b.String()
}

// Unwrap returns why no better credentials could be had.
func (e *AuthError) Unwrap() error { return e.Err }

// A Challenge is what a server's WWW-Authenticate header asked for (RFC 6750,
// RFC 9728). Its fields are the server's own words, never our credentials.
type Challenge struct {
	Scheme           string   // "bearer"
	Error            string   // invalid_token, insufficient_scope...
	Description      string   // error_description, cut at 200 bytes
	Scope            []string // the scopes the server asks for
	ResourceMetadata string   // the URL of its protected resource metadata (its query and userinfo redacted)
	Realm            string   // the realm it named, if any
}

// String describes the challenge in one line, or "" if it says nothing.
func (c Challenge) String() string {
	var parts []string
	if c.Error != "" {
		p := c.Error
		if c.Description != "" {
			p += ": " + c.Description
		}
		parts = append(parts, p)
	}
	if len(c.Scope) > 0 {
		parts = append(parts, fmt.Sprintf("scope %q", strings.Join(c.Scope, " ")))
	}
	if c.ResourceMetadata != "" {
		parts = append(parts, "resource metadata "+c.ResourceMetadata)
	}
	return strings.Join(parts, "; ")
}

// ParseChallenge reads the Bearer challenge of a 401 or 403 answer's
// WWW-Authenticate headers (the first one, if there are several; the zero
// Challenge if there is none or they do not parse).
func ParseChallenge(h http.Header) Challenge {
	cs, err := oauthex.ParseWWWAuthenticate(h.Values("WWW-Authenticate"))
	if err != nil {
		return Challenge{}
	}
	for _, c := range cs {
		if c.Scheme != "bearer" {
			continue
		}
		ch := Challenge{
			Scheme: c.Scheme, Error: capText(c.Params["error"], 64), Description: capText(c.Params["error_description"], 200),
			Scope: strings.Fields(c.Params["scope"]), Realm: capText(c.Params["realm"], 64),
		}
		if u := c.Params["resource_metadata"]; u != "" {
			ch.ResourceMetadata = safeURL(u)
		}
		return ch
	}
	return Challenge{}
}

// capText cuts s at n bytes (at a rune boundary), marking the cut.
func capText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xc0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}

// loginRequired is ErrLoginRequired with what to run; scopes, for a step-up,
// are what the login must ask for (the server's challenge, with what was
// granted).
type loginRequired struct {
	hint      string
	scopeHint [2]string
	scopes    []string
}

func (e *loginRequired) Error() string {
	msg := "login required"
	if len(e.scopes) > 0 {
		msg = fmt.Sprintf("login required for more scope: the server asks for %q, more than was granted", strings.Join(e.scopes, " "))
	}
	if cmd := e.scopeCommand(); cmd != "" {
		return msg + ": run " + cmd
	}
	if e.hint != "" {
		if len(e.scopes) > 0 {
			return msg + ": run " + e.hint + ", asking for that scope"
		}
		return msg + ": run " + e.hint
	}
	return msg + ", and no user to ask here (no Auth.Fetcher)"
}

// LoginCommand returns the command an error wrapping ErrLoginRequired says to
// run (Auth.LoginHint, or for more scope Auth.LoginScopeHint with the scopes),
// or "" if it says none: for a command line, which may cut the error's text
// short, to show it whole on a line of its own.
func LoginCommand(err error) string {
	var e *loginRequired
	if !errors.As(err, &e) {
		return ""
	}
	if cmd := e.scopeCommand(); cmd != "" {
		return cmd
	}
	return e.hint
}

// scopeCommand is the login command asking for e.scopes (Auth.LoginScopeHint with
// them), or "" if e names no scope or has no such hint.
func (e *loginRequired) scopeCommand() string {
	if len(e.scopes) == 0 || e.scopeHint == [2]string{} {
		return ""
	}
	return e.scopeHint[0] + shellQuote(strings.Join(e.scopes, " ")) + e.scopeHint[1]
}

// ShellWord is s as one word of a POSIX shell's command line, for the commands
// errors tell a user to run (Auth.LoginHint's config file and server): as it is if
// it needs no quoting (a plain path or name), else quoted as shellQuote does.
func ShellWord(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_./:@%+=,-", r))
	}) < 0 {
		return s
	}
	return shellQuote(s)
}

// shellQuote quotes s as one argument for a POSIX shell: in single quotes, a
// quote in it written '\”; a character that is not printable ASCII (scopes come
// from the server's challenge) is written as \uXXXX, not sent to a terminal.
func shellQuote(s string) string {
	var b strings.Builder
	b.WriteByte('\'')
	for _, r := range s {
		switch {
		case r == '\'':
			b.WriteString(`'\''`)
		case r < 0x20 || r > 0x7e:
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

func (e *loginRequired) Is(target error) bool { return target == ErrLoginRequired }

// An authorizer sets the credentials of a session's requests and gets better
// ones when the server refuses them. Each credential it hands out has a
// generation: authorize is told the one a refused request carried, so that
// requests refused together cause one authorization, not one each.
type authorizer interface {
	// bearer returns the token to send ("" for none) and its generation.
	bearer(ctx context.Context) (string, uint64)
	// authorize gets better credentials than generation gen, which the server
	// refused with resp; it must close resp.Body. nil: send the request again.
	authorize(ctx context.Context, req *http.Request, resp *http.Response, gen uint64) error
	// worked says that a request with generation gen's token was accepted; it
	// returns by ctx's end (the request's).
	worked(ctx context.Context, gen uint64)
}

// authorizerFor returns the authorizer of cfg's HTTP requests, or nil; and
// the OAuth client it built for them (Auth's grant fields), which the caller
// owns and closes, or nil (a Handler is its giver's).
func authorizerFor(cfg Config, log *slog.Logger, red *redactor) (authorizer, *OAuth, error) {
	h := cfg.httpConfig()
	if h == nil || h.Auth == nil {
		return nil, nil, nil
	}
	a := h.Auth
	switch {
	case a.Handler != nil:
		if o, ok := a.Handler.(*OAuth); ok {
			return o, nil, nil
		}
		return &handlerAuth{h: a.Handler, log: log, red: red}, nil, nil
	case a.Token != nil:
		return &tokenAuth{ts: a.Token, log: log, red: red}, nil, nil
	}
	o, err := NewOAuth(cfg, log)
	if err != nil {
		return nil, nil, err
	}
	return o, o, nil
}

// tokenGen is the generation of a token: a hash of it (0 for none).
func tokenGen(tok string) uint64 {
	if tok == "" {
		return 0
	}
	h := fnv.New64a()
	_, _ = io.WriteString(h, tok)
	return h.Sum64() | 1
}

// tokenAuth is Auth.Token: bearer tokens from a source.
type tokenAuth struct {
	ts  oauth2.TokenSource
	log *slog.Logger // where a panic of the source's is logged (see guarded)
	red *redactor
}

func (a *tokenAuth) bearer(context.Context) (string, uint64) {
	t, err := guarded(a.log, a.red, "Auth.Token", "Token", a.ts.Token)
	if err != nil || t == nil {
		return "", 0
	}
	return t.AccessToken, tokenGen(t.AccessToken)
}

func (a *tokenAuth) authorize(ctx context.Context, _ *http.Request, resp *http.Response, gen uint64) error {
	drainClose(resp.Body)
	if resp.StatusCode == http.StatusForbidden {
		return errForbidden
	}
	t, err := guarded(a.log, a.red, "Auth.Token", "Token", a.ts.Token)
	switch {
	case err != nil:
		return fmt.Errorf("the token source failed: %w", err)
	case t == nil || t.AccessToken == "":
		return errors.New("the token source gave no token")
	case tokenGen(t.AccessToken) != gen:
		return nil // a new token: try it
	}
	return errors.New("the configured bearer token was refused, and its source has no other")
}

func (a *tokenAuth) worked(context.Context, uint64) {}

// handlerAuth is Auth.Handler: a go-sdk OAuthHandler, used as the go-sdk's
// streamable transport uses it.
type handlerAuth struct {
	h   auth.OAuthHandler
	log *slog.Logger // where a panic of the handler's is logged (see guarded)
	red *redactor
}

func (a *handlerAuth) bearer(ctx context.Context) (string, uint64) {
	ts, err := guarded(a.log, a.red, "Auth.Handler", "TokenSource", func() (oauth2.TokenSource, error) { return a.h.TokenSource(ctx) })
	if err != nil || ts == nil {
		return "", 0
	}
	t, err := guarded(a.log, a.red, "Auth.Handler", "a TokenSource's Token", ts.Token)
	if err != nil || t == nil {
		return "", 0
	}
	return t.AccessToken, tokenGen(t.AccessToken)
}

func (a *handlerAuth) authorize(ctx context.Context, req *http.Request, resp *http.Response, gen uint64) error {
	if now, _ := a.bearer(ctx); now != "" && tokenGen(now) != gen {
		drainClose(resp.Body)
		return nil // the handler has a new token already
	}
	return guardedErr(a.log, a.red, "Auth.Handler", "Authorize", func() error { return a.h.Authorize(ctx, req, resp) })
}

// guarded calls f, the caller's code (field names it in the config; where, the
// method), and returns a panic in it as its error, logged with its stack, as
// callerTripper does for a caller's RoundTripper: the authorizer runs on the
// request's goroutine (a caller's, where the panic wedged the go-sdk's
// connection; or the go-sdk's own, where it ended the process).
func guarded[T any](log *slog.Logger, red *redactor, field, where string, f func() (T, error)) (v T, err error) {
	defer func() {
		if p := recover(); p != nil {
			var zero T
			v, err = zero, callerPanicked(log, red, field, where, "", p)
		}
	}()
	return f()
}

// guardedErr is guarded for the caller's code that returns only an error (or
// nothing: f returns nil).
func guardedErr(log *slog.Logger, red *redactor, field, where string, f func() error) error {
	_, err := guarded(log, red, field, where, func() (struct{}, error) { return struct{}{}, f() })
	return err
}

func (a *handlerAuth) worked(context.Context, uint64) {}

// errForbidden is why a 403 that does not ask for more scope is final.
var errForbidden = errors.New("the server forbids this request with these credentials (not a matter of scope)")

// drainClose reads a little of a body, so its connection can be reused, and closes it.
func drainClose(b io.ReadCloser) {
	if b == nil {
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(b, 64<<10))
	_ = b.Close()
}

// rejectedCode is the JSON-RPC code the SDK gives a request its transport
// refused (jsonrpc2.ErrRejected): a write failing so does not break the
// connection, and the call fails alone.
const rejectedCode = -32005

// refusedError is the error a session's HTTP client returns for a request
// the server refused for its credentials: the *AuthError, marked rejected by
// the transport for the SDK (see rejectedCode).
type refusedError struct{ err *AuthError }

var errRejected = &jsonrpc.Error{Code: rejectedCode, Message: "rejected by transport"}

func (e *refusedError) Error() string   { return e.err.Error() }
func (e *refusedError) Unwrap() []error { return []error{e.err, errRejected} }

// authContext bounds an authorization or refresh made for a request with ctx:
// three quarters of the time ctx has left (a dial's ctx ends by its deadline:
// see Options.Deadline), so that it fails as a refusal, with its reason, before
// the request (a connect) runs out of time.
func authContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok {
		return context.WithDeadline(ctx, time.Now().Add(time.Until(d)*3/4))
	}
	return context.WithCancel(ctx)
}

// sameOriginClient returns a copy of c (or a private client) that makes each
// request within timeout and follows no redirect to another origin: an
// authorization server's redirect elsewhere is refused, not followed with our
// client's credentials. c's code is called guarded (see callersClient; its
// panics logged to log, scrubbed by red).
func sameOriginClient(c *http.Client, timeout time.Duration, log *slog.Logger, red *redactor) *http.Client {
	var out http.Client
	if c != nil {
		out = *callersClient(c, "Auth.Client", log, red)
	} else {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		// Authorization requests are rare: no idle connection is kept for them.
		tr.DisableKeepAlives = true
		out.Transport = tr
	}
	if out.Timeout == 0 {
		out.Timeout = timeout
	}
	next := out.CheckRedirect
	out.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		if from := via[len(via)-1].URL; originOf(req.URL) != originOf(from) {
			return fmt.Errorf("a redirect from %s to another origin (%s) was refused", safeURL(from.String()), originOf(req.URL))
		}
		if next != nil {
			return next(req, via)
		}
		return nil
	}
	return &out
}

// union returns the scopes of every list, each once, in order of appearance.
func union(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		for _, s := range l {
			if s != "" && !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out
}

// tokenError describes a failed token request without the response body the
// oauth2 package quotes (an authorization server's error page may echo what
// it was sent).
type tokenError struct {
	what string
	err  error
}

func (e *tokenError) Error() string {
	var re *oauth2.RetrieveError
	if errors.As(e.err, &re) && re.Response != nil {
		return e.what + ": " + retrieveText(re)
	}
	var ue *url.Error
	if errors.As(e.err, &ue) {
		return fmt.Sprintf("%s: %s %s: %v", e.what, ue.Op, safeURL(ue.URL), ue.Err)
	}
	return e.what + ": " + e.err.Error()
}

func (e *tokenError) Unwrap() error { return e.err }

// retrieveText describes a token endpoint's refusal without its body.
func retrieveText(re *oauth2.RetrieveError) string {
	msg := "the token endpoint answered " + re.Response.Status
	if re.ErrorCode != "" {
		msg += ": " + capText(re.ErrorCode, 64)
		if re.ErrorDescription != "" {
			msg += " (" + capText(re.ErrorDescription, 200) + ")"
		}
	}
	return msg
}

// flowError is an error of the go-sdk's authorization code flow whose text
// quotes a token endpoint's refusal as retrieveText does: the oauth2 package
// quotes the whole response body (up to 1 MB), and an authorization server's
// error page may echo what it was sent (the code, the PKCE verifier, the
// client secret). It wraps the error unchanged.
type flowError struct {
	text string
	err  error
}

func (e *flowError) Error() string { return e.text }
func (e *flowError) Unwrap() error { return e.err }

// quietFlow returns err, with the text of a token endpoint's refusal in it
// replaced by retrieveText's (see flowError).
func quietFlow(err error) error {
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) || re.Response == nil {
		return err
	}
	text := err.Error()
	if full := re.Error(); strings.Contains(text, full) {
		text = strings.Replace(text, full, retrieveText(re), 1)
	} else {
		text = retrieveText(re) // quoted some other way: say only what is safe
	}
	return &flowError{text: text, err: err}
}

// kind names how a describes its credentials, for Config.String.
func (a *Auth) kind() string {
	switch {
	case a.Handler != nil:
		return "handler"
	case a.Token != nil:
		return "bearer token"
	case a.Grant == GrantClientCredentials:
		return "oauth client_credentials"
	}
	return "oauth authorization_code"
}

// validateAuth reports the first problem of h.Auth, without quoting a secret.
func validateAuth(h *HTTP) error {
	a := h.Auth
	if a == nil {
		return nil
	}
	for k := range h.Headers {
		if strings.EqualFold(k, "Authorization") {
			return errors.New("auth: the Authorization header is set too: give one")
		}
	}
	if a.Handler != nil || a.Token != nil {
		if a.Handler != nil && a.Token != nil {
			return errors.New("auth: both a handler and a token source are set: give one")
		}
		return nil
	}
	switch a.Grant {
	case "", GrantAuthorizationCode:
		if a.Fetcher != nil && a.RedirectURL == "" {
			return errors.New("auth: the authorization code flow needs a redirect URL")
		}
		if a.ClientIDMetadataURL != "" {
			if u, err := url.Parse(a.ClientIDMetadataURL); err != nil || u.Scheme != "https" || strings.Trim(u.Path, "/") == "" {
				return errors.New("auth: the client ID metadata URL must be an https URL with a path")
			}
		}
		if a.ClientID == "" && a.ClientIDMetadataURL == "" && a.NoRegistration {
			return errors.New("auth: no way to identify the client: set a client ID, a client ID metadata URL, or allow registration")
		}
	case GrantClientCredentials:
		if a.ClientID == "" || a.ClientSecret == "" {
			return errors.New("auth: client credentials need a client ID and a client secret")
		}
	default:
		return fmt.Errorf("auth: unknown grant %q (authorization_code or client_credentials)", capText(string(a.Grant), 40))
	}
	if a.RedirectURL != "" {
		if u, err := url.Parse(a.RedirectURL); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return errors.New("auth: the redirect URL is not an http or https URL")
		}
	}
	if a.Timeout < 0 {
		return errors.New("auth: the timeout is negative")
	}
	return nil
}
