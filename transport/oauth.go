package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// OAuth is mcpfsm's OAuth client for one server: the auth.OAuthHandler that an
// Auth's grant fields describe. It keeps the server's credentials (in its
// Store, if it has one), refreshes them before they expire and when the server
// refuses them, and authorizes anew when refreshing cannot help: at once for
// client credentials, through Auth.Fetcher for the authorization code flow
// (the go-sdk's auth.AuthorizationCodeHandler: PKCE, client ID metadata
// documents, pre-registered clients, dynamic client registration), or never
// (ErrLoginRequired) without a fetcher. Make one with NewOAuth, and Close it
// when its sessions are done (a Conn closes the one it builds, and a Session
// the one Dial builds for it). Its methods are safe for concurrent use; one
// refresh or authorization runs at a time.
//
// Credentials it obtains by a new authorization are saved once the server has
// accepted them, never before: the stored ones stay until new ones work. A
// refreshed token is saved at once (the authorization server may have
// retired the old refresh token), keeping the old refresh token if the
// answer had none.
type OAuth struct {
	src      Auth // as given
	cfg      Auth // with defaults; Handler and Token unset
	server   string
	resource string // the MCP endpoint: what the tokens are for
	key      string
	client   *http.Client
	log      *slog.Logger
	red      *redactor // the config's secrets and the tokens held: scrubs what the caller's code panicked with (see callerPanicked)

	sem chan struct{} // one refresh or authorization at a time

	// life ends when Close returns: a renewal or a read of the store still
	// under way then is abandoned (see within).
	life context.Context
	end  context.CancelCauseFunc

	mu         sync.Mutex
	closed     bool // Close was called: no renewal, authorization or read of the store starts
	creds      *Credentials
	gen        uint64     // bumped each time creds change
	loaded     bool       // the store was read since the last Reset (or there is none)
	reading    *storeRead // the read of the store under way, if any
	reads      uint64     // counts the reads of the store begun (storeRead.seq)
	stuck      int        // the calls of the store abandoned that have not returned (see storeCall)
	unsaved    bool       // a save was not made while stuck: the credentials held are saved once it is not (see saveUnsaved)
	resets     uint64     // counts the Resets (and reloads): a read begun before the last is not taken for the store's content
	pending    bool       // creds came from a new authorization and are not saved yet
	badRefresh uint64     // gen+1 of the credentials whose refresh failed; 0: none
	refreshErr error      // why
	asked      map[string]bool
	lastErr    error         // why the last refresh or authorization failed
	renewing   *flight       // the renewal under way, if any
	next       *nextSave     // the newest credentials to save, not yet handed to the store (see save)
	saveGen    uint64        // the generation of the newest credentials given to save, or taken from the store
	saved      chan struct{} // closed when the store's writer ends; nil while none runs (see write)
	inner      *auth.AuthorizationCodeHandler
}

var _ auth.OAuthHandler = (*OAuth)(nil)

// NewOAuth returns the OAuth client of cfg's Auth (cfg is an HTTP or SSE
// config whose Auth sets a grant, not Handler or Token). log receives its
// events (never a secret); nil discards them.
func NewOAuth(cfg Config, log *slog.Logger) (*OAuth, error) {
	h := cfg.httpConfig()
	if h == nil || h.Auth == nil {
		return nil, &Error{Server: cfg.Name, Op: OpConfig, Err: errors.New("no auth is configured")}
	}
	if err := validateAuth(h); err != nil {
		return nil, &Error{Server: cfg.Name, Op: OpConfig, Err: err}
	}
	a := *h.Auth
	if a.Handler != nil || a.Token != nil {
		return nil, &Error{Server: cfg.Name, Op: OpConfig, Err: errors.New("auth: a handler or a token source is not an OAuth grant")}
	}
	if a.Grant == "" {
		a.Grant = GrantAuthorizationCode
	}
	if a.Timeout <= 0 {
		a.Timeout = DefaultAuthTimeout
	}
	if log == nil {
		log = discardLogger
	}
	red := newRedactor(cfg)
	o := &OAuth{
		src: *h.Auth, cfg: a, server: cfg.Name, resource: h.URL, key: a.StoreKey, log: log, red: red,
		client: sameOriginClient(a.Client, a.Timeout, log, red),
		sem:    make(chan struct{}, 1), asked: map[string]bool{},
	}
	o.life, o.end = context.WithCancelCause(context.Background())
	if o.key == "" {
		o.key = cfg.Name
	}
	o.loaded = a.Store == nil
	if a.Grant == GrantAuthorizationCode && a.Fetcher != nil {
		inner, err := auth.NewAuthorizationCodeHandler(o.codeConfig())
		if err != nil {
			return nil, &Error{Server: cfg.Name, Op: OpConfig, Err: fmt.Errorf("auth: %w", err)}
		}
		o.inner = inner
	}
	return o, nil
}

// codeConfig is the go-sdk handler's configuration for the authorization code
// flow: the token it obtains comes to adopt, unsaved until it works.
func (o *OAuth) codeConfig() *auth.AuthorizationCodeHandlerConfig {
	a := o.cfg
	cfg := &auth.AuthorizationCodeHandlerConfig{
		RedirectURL:              a.RedirectURL,
		AuthorizationCodeFetcher: a.Fetcher,
		Client:                   o.client,
		RequestRefreshToken:      true,
		ScopeFilter: func(discovered []string) []string {
			o.mu.Lock()
			defer o.mu.Unlock()
			var held []string
			if o.creds != nil {
				held = o.creds.Scopes
			}
			// What was granted is asked for again (a step-up must not lose it),
			// with what the server names and what the config adds.
			return union(held, discovered, a.Scopes)
		},
		NewTokenSource: func(_ context.Context, cfg *oauth2.Config, tok *oauth2.Token) (oauth2.TokenSource, error) {
			o.adopt(&Credentials{
				Resource: o.resource, TokenURL: cfg.Endpoint.TokenURL, AuthStyle: int(cfg.Endpoint.AuthStyle),
				ClientID: cfg.ClientID, ClientSecret: cfg.ClientSecret, Scopes: grantedScopes(tok, cfg.Scopes), Token: received(tok),
			})
			return oauth2.StaticTokenSource(tok), nil
		},
	}
	if a.ClientIDMetadataURL != "" {
		cfg.ClientIDMetadataDocumentConfig = &auth.ClientIDMetadataDocumentConfig{URL: a.ClientIDMetadataURL}
	}
	if a.ClientID != "" {
		pre := &oauthex.ClientCredentials{ClientID: a.ClientID}
		if a.ClientSecret != "" {
			pre.ClientSecretAuth = &oauthex.ClientSecretAuth{ClientSecret: a.ClientSecret}
		}
		cfg.PreregisteredClient = pre
	}
	if !a.NoRegistration {
		meta := a.Registration
		if meta == nil {
			meta = &oauthex.ClientRegistrationMetadata{
				RedirectURIs:            []string{a.RedirectURL},
				GrantTypes:              []string{"authorization_code", "refresh_token"},
				ResponseTypes:           []string{"code"},
				TokenEndpointAuthMethod: "none",
				ClientName:              "mcpfsm",
			}
		} else {
			cp := *meta
			meta = &cp
		}
		cfg.DynamicClientRegistrationConfig = &auth.DynamicClientRegistrationConfig{Metadata: meta}
	}
	return cfg
}

// grantedScopes returns the scopes a token response granted (its scope field),
// or those asked for if it does not say.
func grantedScopes(tok *oauth2.Token, asked []string) []string {
	if s, ok := tok.Extra("scope").(string); ok && s != "" {
		return strings.Fields(s)
	}
	return slices.Clone(asked)
}

// TokenSource implements auth.OAuthHandler: its tokens are the current
// credentials', refreshed when they expire (nil if there are none yet).
func (o *OAuth) TokenSource(ctx context.Context) (oauth2.TokenSource, error) {
	_ = o.load(ctx) // not read in time: no credentials yet
	o.mu.Lock()
	none := o.creds == nil
	o.mu.Unlock()
	if none {
		return nil, nil
	}
	return oauthSource{ctx, o}, nil
}

type oauthSource struct {
	ctx context.Context
	o   *OAuth
}

func (s oauthSource) Token() (*oauth2.Token, error) {
	tok, _ := s.o.bearer(s.ctx)
	if tok == "" {
		return nil, errors.New("no valid token")
	}
	return &oauth2.Token{AccessToken: tok, TokenType: "Bearer"}, nil
}

// Authorize implements auth.OAuthHandler (for use as the go-sdk transport's
// handler): it gets better credentials than the current ones, which the
// server refused with resp.
func (o *OAuth) Authorize(ctx context.Context, req *http.Request, resp *http.Response) error {
	o.mu.Lock()
	gen := o.gen
	o.mu.Unlock()
	err := o.authorize(ctx, req, resp, gen)
	if err != nil {
		return &AuthError{Status: resp.StatusCode, Challenge: ParseChallenge(resp.Header), Err: err}
	}
	return nil
}

// SetCredentials hands the client credentials obtained elsewhere: at least a
// token; with TokenURL (and the client it was issued to) if it can be
// refreshed. They are used at once, and saved in the store once the server has
// accepted them, as obtained now (their Obtained is set: see TokenStore).
func (o *OAuth) SetCredentials(c *Credentials) error {
	if c == nil || c.Token == nil || c.Token.AccessToken == "" {
		return errors.New("mcpfsm: SetCredentials: no token")
	}
	cp := *c
	cp.Scopes = slices.Clone(c.Scopes)
	if cp.Resource == "" {
		cp.Resource = o.resource
	}
	// The store is read first (its refresh token is kept for the same client),
	// for at most storeTimeout: what is handed over is newer in any case.
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	_ = o.load(ctx)
	cancel()
	o.adopt(&cp)
	return nil
}

// Close ends the client's use: no refresh or authorization starts after it. A
// renewal under way (a refresh, which goes on to its end and saves its token
// whether or not its request still waits: see renewFor), and a save to the
// store under way (a login's credentials, once the server accepted them), are
// waited for until ctx ends, and abandoned then: its requests are cancelled, and the token
// they may have been granted is lost (with refresh tokens rotated, the next
// process needs a login). It returns nil, or an *Error (OpClose) wrapping the
// cause of ctx if it abandoned a renewal or a save. A read of the token store
// under way is abandoned. What was abandoned is given unwindGrace to return
// (its requests cancelled, the store's calls given the end of their context):
// Close returns by ctx's end and unwindGrace at most, and none of the
// client's goroutines is left then, but for a call of a store that ignores its
// context (see TokenStore), which is the store's own. Close may be called more
// than once; the client's tokens stay readable (Status), but it renews nothing.
func (o *OAuth) Close(ctx context.Context) error {
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
	err := o.landed(ctx)
	o.end(errOAuthClosed)
	o.unwind()
	return err
}

// landed waits, until ctx ends, for the renewal and the saves under way (see
// Close).
func (o *OAuth) landed(ctx context.Context) error {
	for {
		o.mu.Lock()
		f, saved := o.renewing, o.saved
		o.mu.Unlock()
		var renewed chan struct{}
		switch {
		case f != nil:
			renewed = f.done
		case saved == nil:
			return nil
		}
		// A save under way (the credentials of a login the server has just
		// accepted: see worked) is waited for too. Close once cancelled it
		// without waiting: a login that raced the Close was lost.
		select {
		case <-renewed: // its token saved; renewing is nil now
		case <-saved:
		case <-ctx.Done():
			what := "a token renewal"
			if f == nil {
				what = "a save to the token store"
			}
			err := fmt.Errorf("%s under way was abandoned: %w", what, context.Cause(ctx))
			o.log.Warn("mcpfsm: closing the OAuth client before its renewal or save landed: its token, if one comes, is not saved", "server", o.server, "error", err)
			return &Error{Server: o.server, Op: OpClose, Err: err}
		}
	}
}

// unwindGrace bounds how long Close waits, once the client's life has ended,
// for what it ended (a renewal, a read or a save of the store) to return: each
// does within storeGrace (see storeCall); a request to the authorization
// server at once.
const unwindGrace = 2 * storeGrace

// unwind waits, at most unwindGrace, for the renewal, the read and the saves
// of the store under way to return, the client's life having ended. (A Dial
// that failed once left its renewal running for up to Auth.Timeout, and a
// store's call that hung kept a goroutine of the client's for good.)
func (o *OAuth) unwind() {
	t := time.NewTimer(unwindGrace)
	defer t.Stop()
	for {
		o.mu.Lock()
		var ch chan struct{}
		switch {
		case o.renewing != nil:
			ch = o.renewing.done
		case o.reading != nil:
			ch = o.reading.done
		case o.saved != nil:
			ch = o.saved
		}
		o.mu.Unlock()
		if ch == nil {
			return
		}
		select {
		case <-ch:
		case <-t.C:
			o.log.Error("mcpfsm: the OAuth client's work did not end with it", "server", o.server, "within", unwindGrace)
			return
		}
	}
}

// errOAuthClosed is why a closed OAuth client renews or authorizes nothing.
var errOAuthClosed = errors.New("the OAuth client is closed")

// within returns a context with ctx's values (not its end) that ends after d,
// or when the client's life ends (Close), with its cause.
func (o *OAuth) within(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	owned, abandon := context.WithCancelCause(context.WithoutCancel(ctx))
	stop := context.AfterFunc(o.life, func() { abandon(context.Cause(o.life)) })
	bounded, cancel := context.WithTimeout(owned, d)
	return bounded, func() {
		cancel()
		stop()
		abandon(nil)
	}
}

// Reset forgets what failed (a refresh token refused, the scopes asked for
// once) and reads the store again before the next request: the credentials
// may have changed outside the client (a login by another process).
func (o *OAuth) Reset() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.badRefresh = 0
	o.asked = map[string]bool{}
	o.lastErr = nil
	if o.cfg.Store != nil && !o.pending {
		o.loaded = false
		o.resets++
	}
}

// A TokenStatus says what credentials a client holds, without them.
type TokenStatus struct {
	HasToken   bool      `json:"hasToken"`            // an access token is held
	HasRefresh bool      `json:"hasRefresh"`          // a refresh token is held: the token can be renewed without a user
	Expiry     time.Time `json:"expiry,omitzero"`     // zero: the token does not say
	Scopes     []string  `json:"scopes,omitempty"`    // granted
	Unsaved    bool      `json:"unsaved,omitempty"`   // obtained by a new authorization, not accepted by the server yet
	LastError  string    `json:"lastError,omitempty"` // the client's last failure to get or keep credentials, without secrets
}

// Status returns what credentials the client holds (having read the store
// first, if it has not: for at most storeTimeout).
func (o *OAuth) Status() TokenStatus {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	_ = o.load(ctx)
	cancel()
	o.mu.Lock()
	defer o.mu.Unlock()
	var st TokenStatus
	if c := o.creds; c != nil && c.Token != nil {
		st = c.Status()
	}
	st.Unsaved = o.pending
	if o.lastErr != nil {
		st.LastError = o.lastErr.Error()
	}
	return st
}

// A storeRead is a read of the token store under way. One runs at a time, on
// its own goroutine, within storeTimeout and the client's life; whoever needs
// it waits for it until their own context ends. (The store was once read with
// o.mu held, by the request that came first: a store whose Load did not
// answer held every request of the server, past their deadlines, for as long
// as it did not.)
type storeRead struct {
	done   chan struct{}
	gen    uint64 // o.gen as it began
	resets uint64 // o.resets as it began
	seq    uint64 // o.reads once it began: a later read has a greater one
	c      *Credentials
	err    error // c and err are set once done is closed
}

// load reads the store if it has not been read since the client was made (or
// Reset): it returns nil once it has (or if there is nothing to read, or the
// client is closed), or an error once ctx ends first; the read then goes on,
// and what it finds is adopted when it comes (see read).
func (o *OAuth) load(ctx context.Context) error {
	for {
		o.mu.Lock()
		if o.loaded || o.closed {
			o.mu.Unlock()
			return nil
		}
		r := o.readLocked()
		o.mu.Unlock()
		select {
		case <-r.done:
			// Loaded, unless a Reset came while it read: then read again.
		case <-ctx.Done():
			return fmt.Errorf("reading the token store: no answer within the time the request left it: %w", context.Cause(ctx))
		}
	}
}

// readLocked returns the read of the store under way, beginning one if there
// is none. o.mu is held.
func (o *OAuth) readLocked() *storeRead {
	if o.reading == nil {
		o.reads++
		r := &storeRead{done: make(chan struct{}), gen: o.gen, resets: o.resets, seq: o.reads}
		o.reading = r
		go o.read(r)
	}
	return o.reading
}

// read runs r. If the store has not been read since the last Reset, what it
// holds becomes the current credentials, unless they changed while it was
// read (they are newer), whether or not anyone still waits for it.
func (o *OAuth) read(r *storeRead) {
	c, err := storeCall(o, "Load", func(ctx context.Context) (*Credentials, error) { return o.cfg.Store.Load(ctx, o.key) })
	o.mu.Lock()
	r.c, r.err = c, err
	o.reading = nil
	if !o.loaded && r.resets == o.resets {
		o.loaded = true
		o.adoptStoredLocked(r)
	}
	o.mu.Unlock()
	close(r.done)
}

// adoptStoredLocked makes what r read the current credentials, if it read
// any for this server, unless the credentials changed since r began. o.mu is
// held.
func (o *OAuth) adoptStoredLocked(r *storeRead) {
	c := r.c
	switch {
	case r.err != nil:
		if !errors.Is(r.err, errStoreSilent) { // said once, as it was abandoned
			o.log.Warn("mcpfsm: reading the token store", "server", o.server, "error", r.err)
		}
		return
	case c == nil || c.Token == nil:
		return
	case c.Resource != "" && c.Resource != o.resource:
		// Tokens are for one server: never sent to another URL.
		o.log.Info("mcpfsm: the stored credentials are for another URL: not used", "server", o.server, "stored", safeURL(c.Resource))
		return
	case o.gen != r.gen:
		return // handed over, renewed or authorized while the store was read: newer
	}
	if o.creds == nil || o.creds.Token.AccessToken != c.Token.AccessToken || o.creds.Token.RefreshToken != c.Token.RefreshToken {
		o.creds = c
		o.gen++
	}
}

// storedLocked notes that the current credentials were taken from the store as
// newer than the client's own (newerStored; reload, for a refusal): a save of
// older ones waiting is not made after that (see save), so that what another
// process saved, and the client adopted, is not lost for credentials of the
// client's own that it had replaced. (A read of the store after a Reset, or the
// first, is no such sign: it may have begun before a save of the client's
// landed.) o.mu is held.
func (o *OAuth) storedLocked() {
	o.saveGen = o.gen
}

// reload reads the store again, and reports whether it held other credentials
// than the current ones (a login elsewhere), which are adopted; an error if
// the store gave no answer before ctx ended.
func (o *OAuth) reload(ctx context.Context) (bool, error) {
	if o.cfg.Store == nil {
		return false, nil
	}
	o.mu.Lock()
	if o.pending {
		o.mu.Unlock()
		return false, nil
	}
	gen := o.gen
	o.loaded = false
	o.resets++ // a read under way began before: not the one wanted
	o.mu.Unlock()
	if err := o.load(ctx); err != nil {
		return false, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.gen == gen {
		return false, nil
	}
	o.storedLocked() // (the credentials the server refused are older)
	return true, nil
}

// adopt makes c, credentials of a new authorization (or handed over), the
// current ones, pending: saved once they work (see worked). An answer without
// a refresh token keeps the one held for the same client.
func (o *OAuth) adopt(c *Credentials) {
	o.adoptOver(context.Background(), c, true, nil)
}

// adoptOver is adopt, but if over is not nil only while the current
// credentials are still generation *over (the ones c renews); it reports
// whether c was adopted. c.Obtained is set to now. Unless pending, c is saved at
// once (waited for until ctx ends: see save).
func (o *OAuth) adoptOver(ctx context.Context, c *Credentials, pending bool, over *uint64) bool {
	o.mu.Lock()
	if over != nil && o.gen != *over {
		o.mu.Unlock()
		return false
	}
	if old := o.creds; old != nil && old.Token != nil && c.Token.RefreshToken == "" && old.Token.RefreshToken != "" && sameClient(old, c) {
		t := *c.Token
		t.RefreshToken = old.Token.RefreshToken
		c.Token = &t
	}
	c.Obtained = time.Now() // by the wall clock: compared with other processes' (see TokenStore)
	o.creds, o.pending = c, pending
	o.gen++
	gen := o.gen
	o.loaded = true // newer than what the store held
	o.lastErr = nil
	o.mu.Unlock()
	if !pending {
		o.save(ctx, c, gen)
	}
	return true
}

// sameClient reports whether two credentials were issued to one client by one token endpoint.
func sameClient(a, b *Credentials) bool {
	return a.ClientID == b.ClientID && a.TokenURL == b.TokenURL
}

// storeTimeout bounds a read or a save of the token store.
const storeTimeout = 5 * time.Second

// storeGrace is how long a call of the token store is waited for once its
// context has ended: a store that heeds its context has returned by then.
const storeGrace = 100 * time.Millisecond

// errStoreSilent is wrapped by the error of a call of the token store that
// ignored the end of its context, and of the calls not made while it has not
// returned (see storeCall).
var errStoreSilent = errors.New("the token store ignores the end of its context")

// errNotCalled is wrapped by the error of a call of the token store not made while
// an abandoned one has not returned (see storeCall).
var errNotCalled = errors.New("not called")

// storeCall calls the token store (fn: its method what, Load or Save) on a
// goroutine of its own (a panic there, the caller's store's, is the call's error,
// its stack logged, as for a caller's RoundTripper: it ended the process), under a context that ends within storeTimeout or when the client's life
// ends (Close), and waits for it until then and storeGrace more. A call that
// has not returned by then ignores its context: it is abandoned (its goroutine
// is the store's, for as long as it does not return), said once in the log,
// and the store is not called again until it returns (storeCall fails at once
// meanwhile; a save so refused is made once it returns: see saveUnsaved), so that a store that hangs holds one goroutine, not one per
// request. The caller is a goroutine of the client's (a read, a save, a
// renewal), never a request's, which waits for it until its own deadline only.
// (A store that hung once kept the client's goroutine for good: a read held
// every later read, a save the renewal that made it, and Close's wait.)
func storeCall[T any](o *OAuth, what string, fn func(context.Context) (T, error)) (T, error) {
	type answer struct {
		v   T
		err error
	}
	var zero T
	o.mu.Lock()
	if o.stuck > 0 {
		o.mu.Unlock()
		return zero, fmt.Errorf("token store: %w: an earlier call has not returned, and %w", errNotCalled, errStoreSilent)
	}
	o.mu.Unlock()
	ctx, cancel := o.within(context.Background(), storeTimeout)
	defer cancel()
	done := make(chan answer, 1)
	abandoned := false // under o.mu
	go func() {
		v, err := guarded(o.log, o.red, "Auth.Store", what, func() (T, error) { return fn(ctx) })
		done <- answer{v, err}
		o.mu.Lock()
		if abandoned {
			o.stuck-- // the store is called again once every abandoned call has returned
		}
		o.mu.Unlock()
		if abandoned {
			o.saveUnsaved()
		}
	}()
	select {
	case a := <-done:
		return a.v, a.err
	case <-ctx.Done():
	}
	t := time.NewTimer(storeGrace)
	defer t.Stop()
	select {
	case a := <-done:
		return a.v, a.err
	case <-t.C:
	}
	o.mu.Lock()
	select {
	case a := <-done: // it returned just now
		o.mu.Unlock()
		return a.v, a.err
	default:
	}
	abandoned = true
	o.stuck++
	o.mu.Unlock()
	err := fmt.Errorf("token store: no answer %v after the end of its context (%v): abandoned: %w", storeGrace, context.Cause(ctx), errStoreSilent)
	o.log.Warn("mcpfsm: the token store did not return: its call is abandoned, and the store is not called again until it returns", "server", o.server, "error", err)
	return zero, err
}

// A nextSave is the newest credentials the store's writer is to save next (see
// save).
type nextSave struct {
	c    *Credentials
	gen  uint64        // c's generation
	done chan struct{} // closed once they were handed to the store and it returned (or the writer gave up)
}

// save has c, the credentials of generation gen, saved to the store, if there is
// one, and waits for that until ctx ends: the save goes on after that (within
// storeTimeout), and Close waits for it. The saves go to the store one at a time,
// in the order the credentials were obtained, on one goroutine (write): c waits
// for the save under way, and replaces older credentials waiting to be saved; it
// is not saved at all if newer ones have been given already (save returns at
// once: they are saved instead), or taken from the store (storedLocked: a save
// of c waiting is dropped then). A failure is logged: the credentials work in
// memory all the same. (Each save once ran on a goroutine of its own, as it came:
// with a slow store, two refreshes' saves were in the store at once, and the
// older could land last, leaving the store a refresh token the authorization
// server had retired: the next process needed a login. The save of a login's
// credentials once ran in line with the request the server accepted them on: a
// slow store held that request past its deadline.)
func (o *OAuth) save(ctx context.Context, c *Credentials, gen uint64) {
	if o.cfg.Store == nil || o.cfg.Grant == GrantClientCredentials {
		return // client credentials are had again from the config's secret
	}
	cp := *c
	cp.Server = o.server
	o.mu.Lock()
	switch {
	case o.life.Err() != nil:
		o.mu.Unlock()
		o.log.Warn("mcpfsm: the OAuth client is closed: credentials not saved", "server", o.server)
		return
	case gen < o.saveGen:
		o.mu.Unlock()
		return // newer credentials are saved instead: never an older over a newer
	}
	o.saveGen = gen
	if o.next == nil {
		o.next = &nextSave{done: make(chan struct{})}
	}
	n := o.next
	n.c, n.gen = &cp, gen // replaces older credentials waiting to be saved
	if o.saved == nil {
		o.saved = make(chan struct{})
		go o.write(o.saved)
	}
	o.mu.Unlock()
	select {
	case <-n.done:
	case <-ctx.Done():
	}
}

// write is the store's writer: it saves the credentials save gives it, the
// newest each time, until there are none left (or the client's life has ended),
// then closes saved.
func (o *OAuth) write(saved chan struct{}) {
	for {
		o.mu.Lock()
		n := o.next
		o.next = nil
		if n == nil || o.life.Err() != nil {
			o.saved = nil
			o.mu.Unlock()
			close(saved)
			if n != nil {
				close(n.done)
				o.log.Warn("mcpfsm: the OAuth client is closed: credentials not saved", "server", o.server)
			}
			return
		}
		if n.gen < o.saveGen {
			// Newer credentials were taken from the store meanwhile (another
			// process's): it keeps them.
			o.mu.Unlock()
			close(n.done)
			continue
		}
		o.mu.Unlock()
		c := n.c
		c.Saved = time.Now()
		o.red.remember(c.Token.RefreshToken) // a panic of the store's may quote them
		o.red.remember(c.Token.AccessToken)
		_, err := storeCall(o, "Save", func(ctx context.Context) (struct{}, error) { return struct{}{}, o.cfg.Store.Save(ctx, o.key, c) })
		close(n.done)
		if errors.Is(err, errNotCalled) {
			o.mu.Lock()
			o.unsaved = true
			o.mu.Unlock()
			o.saveUnsaved() // (in case the store returned meanwhile)
		}
		if errors.Is(err, ErrNewerStored) {
			// Another process's credentials, obtained later, landed first: they
			// stay, and are read before the next refresh (newerStored).
			o.log.Info("mcpfsm: the token store holds newer credentials (another process's): kept, not replaced", "server", o.server)
			continue
		}
		if err != nil && !errors.Is(err, errStoreSilent) {
			o.log.Warn("mcpfsm: saving credentials to the token store", "server", o.server, "error", err)
		}
	}
}

// saveUnsaved saves the credentials held, once no call of the store hangs, if a save
// was not made while one did (see storeCall): a refresh while the store hung had
// its save dropped, and once the store came back it held the credentials before
// that refresh, whose refresh token an endpoint that rotates them had retired (the
// next process needed a login), or the older ones a hung save wrote as it
// returned. Credentials not accepted by the server yet (pending) are saved once
// they are (see worked). The save goes on on its own (Close waits for it).
func (o *OAuth) saveUnsaved() {
	o.mu.Lock()
	if o.stuck > 0 || !o.unsaved || o.life.Err() != nil {
		o.mu.Unlock()
		return
	}
	o.unsaved = false
	c, gen, pending := o.creds, o.gen, o.pending
	o.mu.Unlock()
	if c == nil || c.Token == nil || pending {
		return
	}
	o.save(endedContext, c, gen)
}

// endedContext is a context that has ended: a save under it is not waited for.
var endedContext = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// worked implements authorizer: credentials from a new authorization are saved
// once the server accepts them. The request whose answer accepted them waits
// for the save for three quarters of the time it has left (authContext), not
// past that: its answer is there, and a slow store must not fail it.
func (o *OAuth) worked(ctx context.Context, gen uint64) {
	o.mu.Lock()
	if !o.pending || o.gen != gen {
		o.mu.Unlock()
		return
	}
	o.pending = false
	c := o.creds
	o.mu.Unlock()
	o.log.Info("mcpfsm: new credentials accepted by the server: saved", "server", o.server)
	ctx, cancel := authContext(ctx)
	defer cancel()
	o.save(ctx, c, gen)
}

// expiryDelta is how long before its expiry a token is refreshed, at most: a
// token whose answer said its lifetime (expires_in) is refreshed within a
// quarter of it, when that is shorter. (A token of 30 s or less was once never
// fresh: every request refreshed it first.)
const expiryDelta = 30 * time.Second

// fresh reports whether t can be sent without refreshing it first.
func fresh(t *oauth2.Token) bool {
	if t == nil || t.AccessToken == "" {
		return false
	}
	if t.Expiry.IsZero() {
		return true
	}
	margin := expiryDelta
	if t.ExpiresIn > 0 && t.ExpiresIn < int64(4*expiryDelta/time.Second) {
		margin = time.Duration(t.ExpiresIn) * time.Second / 4
	}
	return time.Until(t.Expiry) > margin
}

// unexpired reports whether t has not expired yet (it may be about to).
func unexpired(t *oauth2.Token) bool {
	return t != nil && t.AccessToken != "" && (t.Expiry.IsZero() || time.Now().Before(t.Expiry))
}

// bearer implements authorizer: the current access token, refreshed first if
// it has expired (or about to). Without a valid token the request goes without
// one, and the server's refusal leads to authorize.
func (o *OAuth) bearer(ctx context.Context) (string, uint64) {
	_ = o.load(ctx) // not read in time: the credentials held, if any
	o.mu.Lock()
	c, gen := o.creds, o.gen
	o.mu.Unlock()
	if c == nil || c.Token == nil {
		return "", gen
	}
	if fresh(c.Token) {
		return c.Token.AccessToken, gen
	}
	if !o.acquire(ctx) {
		return "", gen
	}
	defer o.release()
	seen := gen
	o.newerStored(ctx, nil) // another process's refresh: its token, or its refresh token
	o.mu.Lock()
	c, gen = o.creds, o.gen
	bad := o.badRefresh == gen+1
	o.mu.Unlock()
	if fresh(c.Token) || (gen != seen && unexpired(c.Token)) {
		return c.Token.AccessToken, gen // refreshed meanwhile
	}
	if bad || !o.renewable(c) {
		return "", gen
	}
	actx, cancel := authContext(ctx)
	defer cancel()
	if err := o.renewFor(actx, c, gen); err != nil {
		return "", gen
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.creds.Token.AccessToken, o.gen
}

// renewable reports whether c can be renewed without a user.
func (o *OAuth) renewable(c *Credentials) bool {
	if o.cfg.Grant == GrantClientCredentials {
		return c.TokenURL != ""
	}
	return c.Token.RefreshToken != "" && c.TokenURL != ""
}

// A flight is a renewal under way (see renewFor).
type flight struct {
	done chan struct{}
	err  error // once done is closed
}

// renewFor renews c (generation gen) as renew does, waiting for it until ctx
// ends; the renewal itself is not bound to ctx but to Auth.Timeout, and its
// answer is adopted (and saved) whether or not anyone still waits for it. A
// refresh its caller gave up on was once abandoned mid-request: the
// authorization server had granted it all the same, and where it rotates
// refresh tokens the one held was then dead and the new one never read, so
// that the next request needed a login. The caller holds the right to renew
// (acquire), which waited for any renewal under way to land: the renewal it
// starts is the only one, and the next acquire waits for it in turn. The client
// owns it: Close waits for it, within the close's own context, and abandons it
// then (nothing once waited for it: it ran on past the Close of its session or
// connection, for up to Auth.Timeout). None starts once the client is closed.
func (o *OAuth) renewFor(ctx context.Context, c *Credentials, gen uint64) error {
	f := &flight{done: make(chan struct{})}
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return errOAuthClosed
	}
	o.renewing = f
	o.mu.Unlock()
	rctx, cancel := o.within(ctx, o.cfg.Timeout)
	go func() {
		defer close(f.done)
		defer cancel()
		f.err = o.renew(rctx, c, gen)
		o.mu.Lock()
		if o.renewing == f {
			o.renewing = nil
		}
		o.mu.Unlock()
	}()
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		what := "refreshing the token"
		if o.cfg.Grant == GrantClientCredentials {
			what = "client credentials"
		}
		return &tokenError{what, fmt.Errorf("%w (no answer within the time the request left it; the refresh goes on, for the next request)", context.Cause(ctx))}
	}
}

// newerStored reads the store and adopts the credentials it holds if they are
// newer than the current ones (their token expires later: another process
// sharing the store refreshed them), reporting whether it did. It is called
// before a refresh: a refresh token that another process has had rotated is
// not used (an authorization server may take its reuse for a theft, and revoke
// every token of the grant).
//
// With refused, the current credentials whose refresh token the token endpoint
// has just refused, it is called after the refresh: the store is read by a read
// begun then (not one under way, begun maybe before another process saved),
// and what it holds for the same client is adopted if its refresh token is
// another, and its token expires no earlier. Two processes sharing the store
// whose tokens expired together both refreshed; where refresh tokens are
// rotated, the second was refused, and its connection failed as needing a
// login, the first's fresh credentials in the store.
func (o *OAuth) newerStored(ctx context.Context, refused *Credentials) bool {
	if o.cfg.Store == nil || o.cfg.Grant == GrantClientCredentials {
		return false
	}
	o.mu.Lock()
	after := uint64(0)
	if refused != nil {
		after = o.reads
	}
	o.mu.Unlock()
	var r *storeRead
	for r == nil || r.seq <= after {
		o.mu.Lock()
		if o.closed {
			o.mu.Unlock()
			return false
		}
		r = o.readLocked() // the read under way, or a new one: see storeRead
		o.mu.Unlock()
		select {
		case <-r.done:
		case <-ctx.Done():
			return false
		}
	}
	sc, err := r.c, r.err
	if err != nil || sc == nil || sc.Token == nil || sc.Token.AccessToken == "" || (sc.Resource != "" && sc.Resource != o.resource) {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	c := o.creds
	switch {
	case o.pending || c == nil || c.Token == nil:
		return false
	case refused != nil:
		if c != refused || sc.Token.RefreshToken == "" || sc.Token.RefreshToken == refused.Token.RefreshToken || !sameClient(sc, refused) ||
			(!sc.Token.Expiry.IsZero() && sc.Token.Expiry.Before(refused.Token.Expiry)) {
			return false
		}
	case c.Token.Expiry.IsZero() || !sc.Token.Expiry.After(c.Token.Expiry):
		return false
	}
	o.creds = sc
	o.gen++
	o.storedLocked()
	o.log.Debug("mcpfsm: newer credentials in the token store: adopted", "server", o.server)
	return true
}

// renew gets a new access token for c (generation gen) without a user: a
// refresh, or a client credentials grant. A refresh token refused is not tried
// again until the credentials change; one that could not be tried (no answer, a
// 5xx) is tried again by the next request that needs it.
func (o *OAuth) renew(ctx context.Context, c *Credentials, gen uint64) error {
	ctx = context.WithValue(ctx, oauth2.HTTPClient, o.client)
	o.red.remember(c.Token.RefreshToken) // sent in the request's form: a panic of Auth.Client's may quote it
	var tok *oauth2.Token
	var err error
	if o.cfg.Grant == GrantClientCredentials {
		cc := o.clientCredentials(c.TokenURL, c.Scopes, oauth2.AuthStyle(c.AuthStyle))
		tok, err = cc.Token(ctx)
		if err != nil {
			err = &tokenError{"client credentials", err}
		}
	} else {
		cfg := oauth2.Config{ClientID: c.ClientID, ClientSecret: c.ClientSecret, Endpoint: oauth2.Endpoint{TokenURL: c.TokenURL, AuthStyle: oauth2.AuthStyle(c.AuthStyle)}}
		tok, err = cfg.TokenSource(ctx, &oauth2.Token{RefreshToken: c.Token.RefreshToken}).Token()
		if err != nil {
			err = &tokenError{"refreshing the token", err}
		}
	}
	if err != nil {
		if o.cfg.Grant == GrantAuthorizationCode && refusedGrant(err) && o.newerStored(ctx, c) {
			o.log.Info("mcpfsm: the refresh token was refused, and the token store holds newer credentials (another process refreshed them): adopted", "server", o.server)
			return nil
		}
		o.mu.Lock()
		if o.gen == gen && refusedGrant(err) {
			o.badRefresh, o.refreshErr = gen+1, err
		}
		o.lastErr = err
		o.mu.Unlock()
		o.log.Info("mcpfsm: renewing the token failed", "server", o.server, "error", err)
		return err
	}
	n := *c
	n.Token = received(tok)
	n.Scopes = grantedScopes(tok, c.Scopes)
	if !o.adoptOver(ctx, &n, o.cfg.Grant == GrantClientCredentials, &gen) {
		// Credentials handed over (SetCredentials), or found in the store,
		// while the renewal was under way are newer: they stay. (A renewal
		// outlives the request that started it: it once replaced them.)
		o.log.Debug("mcpfsm: token renewed, but the credentials changed meanwhile: the renewed token is dropped", "server", o.server)
		return nil
	}
	o.log.Debug("mcpfsm: token renewed", "server", o.server, "expiry", tok.Expiry)
	return nil
}

// received returns a token the token endpoint has just given as the credentials keep
// it: a lifetime stated as 0 or less (a broken endpoint's: RFC 6749's expires_in is
// the lifetime in seconds) is taken as unstated, the token used until the server
// refuses it. It came already expired, and every request refreshed it first.
func received(tok *oauth2.Token) *oauth2.Token {
	if tok == nil || tok.Expiry.IsZero() || tok.Expiry.After(time.Now()) {
		return tok
	}
	t := *tok
	t.Expiry, t.ExpiresIn = time.Time{}, 0
	return &t
}

// refusedGrant reports whether err is the token endpoint's refusal of a grant (an
// OAuth error answer, 4xx: invalid_grant, invalid_client), which asking again will
// not change; not a failure to get an answer (a network error, a timeout, a 5xx,
// 408 or 429), which it may.
func refusedGrant(err error) bool {
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) || re.Response == nil {
		return false
	}
	st := re.Response.StatusCode
	return st >= 400 && st < 500 && st != http.StatusRequestTimeout && st != http.StatusTooManyRequests
}

func (o *OAuth) clientCredentials(tokenURL string, scopes []string, style oauth2.AuthStyle) *clientcredentials.Config {
	return &clientcredentials.Config{
		ClientID: o.cfg.ClientID, ClientSecret: o.cfg.ClientSecret, TokenURL: tokenURL, Scopes: scopes, AuthStyle: style,
		EndpointParams: url.Values{"resource": {o.resource}},
	}
}

// acquire takes the right to refresh or authorize, waiting for the one under
// way, and for a renewal whose caller gave up on it to land (adopted and
// saved); false if ctx ends first. (A request refused while such a renewal was
// saving read the store again, found the credentials the renewal had just
// replaced, and took them for a login elsewhere: back to a rotated refresh
// token.)
func (o *OAuth) acquire(ctx context.Context) bool {
	select {
	case o.sem <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	o.mu.Lock()
	f := o.renewing
	o.mu.Unlock()
	if f == nil {
		return true
	}
	select {
	case <-f.done:
		return true
	case <-ctx.Done():
		o.release()
		return false
	}
}

func (o *OAuth) release() { <-o.sem }

// authorize implements authorizer.
func (o *OAuth) authorize(ctx context.Context, req *http.Request, resp *http.Response, sent uint64) error {
	drainClose(resp.Body)
	ch := ParseChallenge(resp.Header)
	if !o.acquire(ctx) {
		return fmt.Errorf("waiting for another authorization: %w", context.Cause(ctx))
	}
	defer o.release()
	o.mu.Lock()
	moved, closed := o.gen != sent, o.closed
	o.mu.Unlock()
	if closed {
		return errOAuthClosed
	}
	if moved {
		return nil // other credentials since the request went out: try them
	}
	stored, err := o.reload(ctx)
	if stored {
		return nil // other credentials in the store (a login elsewhere): try them
	}
	if err != nil {
		return o.storeSilent(ctx, resp, sent, err)
	}
	err = o.authorizeLocked(ctx, req, resp, ch, sent)
	if err != nil {
		o.mu.Lock()
		o.lastErr = err
		o.mu.Unlock()
		o.log.Info("mcpfsm: no better credentials", "server", o.server, "status", resp.StatusCode, "error", err)
	}
	return err
}

// storeSilent is authorize's answer to a refusal whose re-read of the store
// (reload) got no answer by the request's deadline (err): nothing says the
// credentials were replaced elsewhere, nor that a login is needed. A refresh
// token is used (its refresh goes on past the request, for the next one), as
// when the store's read fails; no new authorization is begun (a user sent to log
// in for a store that was slow). The request fails as one that got no answer
// (storeUnanswered), not as a refusal. (It once failed as a refusal, an
// *AuthError: a connection's cause auth; and nothing was refreshed, so that with
// a store slower than the requests' deadline every 401 failed so for good, each
// re-read discarding the one under way.)
func (o *OAuth) storeSilent(ctx context.Context, resp *http.Response, sent uint64, err error) error {
	o.mu.Lock()
	c, gen := o.creds, o.gen
	bad := o.badRefresh == gen+1
	o.mu.Unlock()
	if resp.StatusCode == http.StatusUnauthorized && gen == sent && c != nil && c.Token != nil && o.renewable(c) && !bad {
		actx, cancel := authContext(ctx)
		rerr := o.renewFor(actx, c, gen)
		cancel()
		if rerr == nil {
			return nil // it landed in time after all
		}
	}
	return &storeUnanswered{err}
}

func (o *OAuth) authorizeLocked(ctx context.Context, req *http.Request, resp *http.Response, ch Challenge, gen uint64) error {
	ctx, cancel := authContext(ctx)
	defer cancel()
	o.mu.Lock()
	c := o.creds
	var held []string
	if c != nil {
		held = c.Scopes
	}
	o.mu.Unlock()
	if resp.StatusCode == http.StatusForbidden {
		if ch.Error != "insufficient_scope" {
			return errForbidden
		}
		// Step-up: the larger scope is asked for once; a server that asks again
		// for what it was granted is not obliged in a loop.
		want := union(held, ch.Scope, o.cfg.Scopes)
		if o.cfg.Grant == GrantAuthorizationCode && o.inner == nil {
			// Only a user can grant it, and there is none here: a login asking for
			// it is what is needed, each time. (It was counted as asked: the next
			// request said "asked for once: not asking again", no longer a
			// login required, though nothing had been asked.)
			return &loginRequired{hint: o.cfg.LoginHint, scopeHint: o.cfg.LoginScopeHint, scopes: want}
		}
		key := strings.Join(slices.Sorted(slices.Values(want)), " ")
		o.mu.Lock()
		again := o.asked[key]
		o.asked[key] = true
		o.mu.Unlock()
		if again {
			return fmt.Errorf("the server asks for more scope (%q) after it was asked for once: not asking again", strings.Join(want, " "))
		}
		return o.obtain(ctx, req, resp, ch, want)
	}
	var refreshErr error
	if c != nil && c.Token != nil && o.renewable(c) {
		o.mu.Lock()
		bad := o.badRefresh == gen+1
		o.mu.Unlock()
		if !bad {
			if refreshErr = o.renewFor(ctx, c, gen); refreshErr == nil {
				return nil
			}
			if o.cfg.Grant == GrantAuthorizationCode && unanswered(refreshErr) {
				// Nothing refused the refresh token: a new authorization (a
				// user sent to log in, through the same authorization server)
				// is not what is needed. Once took one all the same: a token
				// endpoint's blip had the user log in again, or, the flow
				// failing as the refresh had, the connection unauthorized.
				return &authUnavailable{refreshErr}
			}
		} else {
			o.mu.Lock()
			refreshErr = fmt.Errorf("%w (not tried again)", o.refreshErr)
			o.mu.Unlock()
		}
	}
	err := o.obtain(ctx, req, resp, ch, nil)
	switch {
	case err == nil:
		return nil
	case refreshErr != nil && errors.Is(err, ErrLoginRequired) && unanswered(refreshErr):
		// No user here, and the refresh that would have done without one got no
		// answer: a login is not what is needed.
		return &authUnavailable{refreshErr}
	case o.cfg.Grant == GrantClientCredentials && unanswered(err):
		return &authUnavailable{err}
	case refreshErr != nil:
		return fmt.Errorf("%w; before that, %w", err, refreshErr)
	}
	return err
}

// obtain authorizes anew: client credentials at once; the authorization code
// flow through the fetcher, or ErrLoginRequired without one. scopes, for a
// step-up, are what to ask for.
func (o *OAuth) obtain(ctx context.Context, req *http.Request, resp *http.Response, ch Challenge, scopes []string) error {
	if o.cfg.Grant == GrantClientCredentials {
		return o.obtainClientCredentials(ctx, ch, scopes)
	}
	if o.inner == nil {
		return &loginRequired{hint: o.cfg.LoginHint}
	}
	// The go-sdk handler reads the challenge from the answer; its body was read.
	r := *resp
	r.Body = http.NoBody
	o.log.Info("mcpfsm: authorizing", "server", o.server, "status", resp.StatusCode, "challenge", ch.String())
	// The flow runs the caller's Fetcher, which may not heed ctx: the request (a
	// connect, and so the connection's Close) does not wait past ctx for it. A
	// fetcher that returns later has its goroutine end then; credentials it got are
	// adopted, unsaved until the server accepts them, as any authorization's.
	done := make(chan error, 1)
	// A panic there (the caller's Fetcher's, on this goroutine) is the flow's
	// error, its stack logged: it ended the process.
	go func() {
		done <- guardedErr(o.log, o.red, "Auth.Fetcher", "the authorization code flow", func() error { return o.inner.Authorize(ctx, req, &r) })
	}()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		// A flow that heeds ctx returns at once, saying where it was; it is given
		// flowGrace for that, but not past the request it is for (a dial's ends
		// by the dial's deadline: see Options.Deadline).
		grace := flowGrace
		if d, ok := req.Context().Deadline(); ok {
			grace = max(0, min(grace, time.Until(d)))
		}
		t := time.NewTimer(grace)
		select {
		case err = <-done:
		case <-t.C:
			err = fmt.Errorf("%w (the authorization code fetcher did not return)", context.Cause(ctx))
		}
		t.Stop()
	}
	if err != nil {
		return fmt.Errorf("authorization failed: %w", authFlowError(quietFlow(err), ctx))
	}
	return nil
}

// flowGrace is how long an authorization flow whose context has ended is given to
// return its own error before the request stops waiting for it.
const flowGrace = 200 * time.Millisecond

// authFlowError adds to err why the authorization's context ended, if it did:
// the SDK's errors say "context deadline exceeded" without whose deadline.
func authFlowError(err error, ctx context.Context) error {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return fmt.Errorf("%w (no answer within the time the request left it)", err)
	}
	return err
}

// obtainClientCredentials discovers the token endpoint (protected resource
// metadata, then authorization server metadata) and gets a token with the
// client's own credentials.
func (o *OAuth) obtainClientCredentials(ctx context.Context, ch Challenge, scopes []string) error {
	prm, err := o.resourceMetadata(ctx, ch)
	if err != nil {
		return err
	}
	issuer := prm.AuthorizationServers[0]
	asm, err := auth.GetAuthServerMetadata(ctx, issuer, o.client)
	if err != nil {
		return fmt.Errorf("authorization server metadata: %w", authFlowError(err, ctx))
	}
	tokenURL, style := strings.TrimSuffix(issuer, "/")+"/token", oauth2.AuthStyleAutoDetect
	if asm != nil {
		tokenURL = asm.TokenEndpoint
		switch ms := asm.TokenEndpointAuthMethodsSupported; {
		case slices.Contains(ms, "client_secret_basic"):
			style = oauth2.AuthStyleInHeader
		case slices.Contains(ms, "client_secret_post"):
			style = oauth2.AuthStyleInParams
		}
	}
	if scopes == nil {
		scopes = ch.Scope
		if len(scopes) == 0 {
			scopes = prm.ScopesSupported
		}
		scopes = union(scopes, o.cfg.Scopes)
	}
	cc := o.clientCredentials(tokenURL, scopes, style)
	tok, err := cc.Token(context.WithValue(ctx, oauth2.HTTPClient, o.client))
	if err != nil {
		return &tokenError{"client credentials", authFlowError(err, ctx)}
	}
	o.adopt(&Credentials{Resource: o.resource, TokenURL: tokenURL, AuthStyle: int(style), ClientID: o.cfg.ClientID, Scopes: grantedScopes(tok, scopes), Token: received(tok)})
	return nil
}

// resourceMetadata finds the server's protected resource metadata (RFC 9728):
// at the URL of the challenge, else at the well-known URLs of the endpoint's
// path and of its root. Without any, the server's origin is taken for its
// authorization server (the 2025-03-26 protocol's rule).
func (o *OAuth) resourceMetadata(ctx context.Context, ch Challenge) (*oauthex.ProtectedResourceMetadata, error) {
	ru, err := url.Parse(o.resource)
	if err != nil {
		return nil, errors.New("the server's URL does not parse")
	}
	type try struct{ url, resource string }
	var tries []try
	if ch.ResourceMetadata != "" && !strings.Contains(ch.ResourceMetadata, redacted) {
		tries = append(tries, try{ch.ResourceMetadata, o.resource})
	}
	wk := *ru
	wk.RawQuery, wk.Fragment = "", ""
	wk.Path = "/.well-known/oauth-protected-resource/" + strings.TrimLeft(ru.Path, "/")
	tries = append(tries, try{wk.String(), o.resource})
	wk.Path = "/.well-known/oauth-protected-resource"
	root := *ru
	root.Path, root.RawQuery, root.Fragment = "", "", ""
	tries = append(tries, try{wk.String(), root.String()})
	var errs []error
	for _, t := range tries {
		prm, err := oauthex.GetProtectedResourceMetadata(ctx, t.url, t.resource, o.client)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if prm == nil {
			continue
		}
		if len(prm.AuthorizationServers) == 0 {
			return nil, errors.New("the protected resource metadata names no authorization server")
		}
		return prm, nil
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("protected resource metadata: %w", authFlowError(errors.Join(errs...), ctx))
	}
	return &oauthex.ProtectedResourceMetadata{AuthorizationServers: []string{root.String()}, Resource: o.resource}, nil
}

// For reports whether o is the OAuth client of cfg's auth: built from the same
// auth settings, for the same server and URL.
func (o *OAuth) For(cfg Config) bool {
	h := cfg.httpConfig()
	return h != nil && h.Auth != nil && cfg.Name == o.server && h.URL == o.resource && reflect.DeepEqual(*h.Auth, o.src)
}
