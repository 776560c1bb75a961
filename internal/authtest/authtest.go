package authtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Options shape a Server.
type Options struct {
	// TokenLifetime is how long an access token lasts; 1h if 0.
	TokenLifetime time.Duration
	// StatedExpiresIn, if not 0, is the expires_in the token endpoint states
	// instead of the token's lifetime (a broken server's: 0 or less).
	StatedExpiresIn int
	// Scopes are what every MCP request needs (named in the challenge).
	Scopes []string
	// CallScopes are what tools/call needs besides Scopes: a step-up mid-session.
	CallScopes []string
	// LaterScopes are what every MCP request needs besides Scopes, named only
	// in the 403 insufficient_scope of a request with a token (not in the 401's
	// challenge): a step-up right after the first login.
	LaterScopes []string
	// ScopesSupported is the protected resource metadata's scopes_supported.
	ScopesSupported []string
	// RotateRefresh issues a new refresh token with each refresh (the old one
	// dies); NoRefreshInAnswer answers a refresh without one (the old one lives).
	RotateRefresh, NoRefreshInAnswer bool
	// RevokeOnReuse, with RotateRefresh, takes the use of a refresh token that
	// was rotated already for a theft, as OAuth 2.1 allows: every token of its
	// client is revoked.
	RevokeOnReuse bool
	// NoRegistration: no dynamic client registration.
	NoRegistration bool
	// ClientID and ClientSecret are a client registered in advance (for client
	// credentials, or the authorization code flow).
	ClientID, ClientSecret string

	// Faults.
	HangToken         bool   // the token endpoint never answers (until Close)
	MalformedMetadata bool   // the authorization server's metadata is not JSON
	RedirectMetadata  string // the authorization server's metadata redirects to this URL (another host)
	NeverGrant        string // a scope every MCP request needs that the server never grants
	EchoToken         bool   // the token endpoint answers 400 with a text page that quotes the form it was sent
}

// Server is the authorization server and the protected MCP endpoint on one
// origin: /mcp is the endpoint, /authorize, /token and /register the
// authorization server's.
type Server struct {
	URL string // the origin, "http://127.0.0.1:PORT"

	opts  Options
	inner http.Handler
	mux   *http.ServeMux
	hang  chan struct{}
	once  sync.Once

	mu       sync.Mutex
	clients  map[string]client // by client ID
	codes    map[string]codeGrant
	access   map[string]*grant
	refresh  map[string]*grant
	revoked  bool
	retired  map[string]string // refresh tokens rotated, to their client
	nclients int

	// Outage, while set, makes the token endpoint answer 503 (a transient failure,
	// not a refusal of the grant).
	Outage atomic.Bool
	// TokenDelay, while set (a time.Duration), makes the token endpoint wait that
	// long before it grants anything, whether or not its client is still there (as
	// a slow authorization server does: the grant is made, rotating the refresh
	// token, even if nobody reads the answer).
	TokenDelay atomic.Int64

	// Counters.
	Authorizations atomic.Int64 // /authorize visits
	CodeExchanges  atomic.Int64 // authorization_code grants
	Refreshes      atomic.Int64 // refresh_token grants answered with a token
	RefreshFails   atomic.Int64 // refresh_token grants refused
	Credentials    atomic.Int64 // client_credentials grants
	Registrations  atomic.Int64 // dynamic client registrations
	Refused        atomic.Int64 // MCP requests answered 401 or 403
	Served         atomic.Int64 // MCP requests let through
}

type client struct {
	secret   string
	method   string // token_endpoint_auth_method
	redirect []string
}

type codeGrant struct {
	client, redirect, challenge, resource string
	scopes                                []string
}

type grant struct {
	client  string
	scopes  []string
	expiry  time.Time
	refresh string
}

// New returns a server protecting mcp (an MCP endpoint's handler). Serve it
// with Start or NewPipe, which set URL.
func New(opts Options, mcp http.Handler) *Server {
	if opts.TokenLifetime == 0 {
		opts.TokenLifetime = time.Hour
	}
	s := &Server{
		opts: opts, inner: mcp, hang: make(chan struct{}),
		clients: map[string]client{}, codes: map[string]codeGrant{},
		access: map[string]*grant{}, refresh: map[string]*grant{}, retired: map[string]string{},
	}
	if opts.ClientID != "" {
		s.clients[opts.ClientID] = client{secret: opts.ClientSecret, method: "client_secret_basic"}
	}
	m := http.NewServeMux()
	m.HandleFunc("/.well-known/oauth-protected-resource/mcp", s.resourceMeta)
	m.HandleFunc("/.well-known/oauth-authorization-server", s.serverMeta)
	m.HandleFunc("/elsewhere-metadata", s.serverMeta)
	m.HandleFunc("/authorize", s.authorize)
	m.HandleFunc("/token", s.token)
	m.HandleFunc("/register", s.register)
	m.Handle("/mcp", s.protect(mcp))
	s.mux = m
	return s
}

// Handler serves everything.
func (s *Server) Handler() http.Handler { return s.mux }

// MCPURL is the protected MCP endpoint.
func (s *Server) MCPURL() string { return s.URL + "/mcp" }

// Start serves s on a loopback port until the test ends.
func (s *Server) Start(t testing.TB) *Server {
	ts := httptest.NewServer(s.mux)
	s.URL = ts.URL
	t.Cleanup(func() {
		s.Close()
		ts.CloseClientConnections()
		ts.Close()
	})
	return s
}

// Close releases a hanging token endpoint.
func (s *Server) Close() { s.once.Do(func() { close(s.hang) }) }

// Revoke revokes every token issued so far, access and refresh.
func (s *Server) Revoke() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.access = map[string]*grant{}
	s.refresh = map[string]*grant{}
}

// revokeLocked revokes every token of client. s.mu is held.
func (s *Server) revokeLocked(client string) {
	for k, g := range s.access {
		if g.client == client {
			delete(s.access, k)
		}
	}
	for k, g := range s.refresh {
		if g.client == client {
			delete(s.refresh, k)
		}
	}
}

// Issue issues a token to the pre-registered client (as a login elsewhere
// would): access token, refresh token.
func (s *Server) Issue(scopes ...string) (access, refresh string, expiry time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.issueLocked(s.opts.ClientID, scopes)
	return s.tokenOf(g), g.refresh, g.expiry
}

func (s *Server) tokenOf(g *grant) string {
	for k, v := range s.access {
		if v == g {
			return k
		}
	}
	return ""
}

// Expire makes every access token issued so far expire now (their refresh
// tokens live on).
func (s *Server) Expire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range s.access {
		g.expiry = time.Now().Add(-time.Second)
	}
}

func (s *Server) resourceMeta(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, map[string]any{
		"resource":                 s.MCPURL(),
		"authorization_servers":    []string{s.URL},
		"scopes_supported":         s.opts.ScopesSupported,
		"bearer_methods_supported": []string{"header"},
	})
}

func (s *Server) serverMeta(w http.ResponseWriter, r *http.Request) {
	switch {
	case s.opts.MalformedMetadata:
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"issuer": "`+s.URL+`", "token_endpoint": [}`)
		return
	case s.opts.RedirectMetadata != "" && r.URL.Path != "/elsewhere-metadata":
		http.Redirect(w, r, s.opts.RedirectMetadata, http.StatusFound)
		return
	}
	meta := map[string]any{
		"issuer":                                s.URL,
		"authorization_endpoint":                s.URL + "/authorize",
		"token_endpoint":                        s.URL + "/token",
		"response_types_supported":              []string{"code"},
		"grant_types_supported":                 []string{"authorization_code", "refresh_token", "client_credentials"},
		"code_challenge_methods_supported":      []string{"S256"},
		"token_endpoint_auth_methods_supported": []string{"client_secret_basic", "none"},
	}
	if !s.opts.NoRegistration {
		meta["registration_endpoint"] = s.URL + "/register"
	}
	writeJSON(w, meta)
}

func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	if s.opts.NoRegistration {
		http.NotFound(w, r)
		return
	}
	var req struct {
		RedirectURIs []string `json:"redirect_uris"`
		Method       string   `json:"token_endpoint_auth_method"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&req); err != nil || len(req.RedirectURIs) == 0 {
		oauthError(w, http.StatusBadRequest, "invalid_client_metadata")
		return
	}
	s.Registrations.Add(1)
	s.mu.Lock()
	s.nclients++
	id := fmt.Sprintf("dyn-%d", s.nclients)
	c := client{method: req.Method, redirect: req.RedirectURIs}
	if c.method == "" {
		c.method = "client_secret_basic"
	}
	if c.method != "none" {
		c.secret = random()
	}
	s.clients[id] = c
	s.mu.Unlock()
	w.WriteHeader(http.StatusCreated)
	writeJSON(w, map[string]any{
		"client_id": id, "client_secret": c.secret, "redirect_uris": c.redirect,
		"token_endpoint_auth_method": c.method,
	})
}

func (s *Server) authorize(w http.ResponseWriter, r *http.Request) {
	s.Authorizations.Add(1)
	q := r.URL.Query()
	s.mu.Lock()
	c, known := s.clients[q.Get("client_id")]
	s.mu.Unlock()
	switch {
	case !known:
		http.Error(w, "unknown client", http.StatusBadRequest)
		return
	case q.Get("response_type") != "code" || q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "":
		http.Error(w, "PKCE S256 is required", http.StatusBadRequest)
		return
	case len(c.redirect) > 0 && !slices.Contains(c.redirect, q.Get("redirect_uri")):
		http.Error(w, "unregistered redirect", http.StatusBadRequest)
		return
	}
	code := random()
	s.mu.Lock()
	s.codes[code] = codeGrant{
		client: q.Get("client_id"), redirect: q.Get("redirect_uri"), challenge: q.Get("code_challenge"),
		resource: q.Get("resource"), scopes: strings.Fields(q.Get("scope")),
	}
	s.mu.Unlock()
	to, err := url.Parse(q.Get("redirect_uri"))
	if err != nil {
		http.Error(w, "bad redirect", http.StatusBadRequest)
		return
	}
	v := to.Query()
	v.Set("code", code)
	v.Set("state", q.Get("state"))
	to.RawQuery = v.Encode()
	http.Redirect(w, r, to.String(), http.StatusFound)
}

func (s *Server) token(w http.ResponseWriter, r *http.Request) {
	if s.Outage.Load() {
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
		return
	}
	if d := time.Duration(s.TokenDelay.Load()); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-s.hang:
		}
		t.Stop()
	}
	if s.opts.HangToken {
		select {
		case <-s.hang:
		case <-r.Context().Done():
		}
		return
	}
	if s.opts.EchoToken {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write(append([]byte("bad request: "), body...))
		return
	}
	if err := r.ParseForm(); err != nil {
		oauthError(w, http.StatusBadRequest, "invalid_request")
		return
	}
	id, secret, basic := r.BasicAuth()
	if !basic {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, known := s.clients[id]
	if !known || c.secret != secret {
		oauthError(w, http.StatusUnauthorized, "invalid_client")
		return
	}
	switch r.PostForm.Get("grant_type") {
	case "authorization_code":
		cg, ok := s.codes[r.PostForm.Get("code")]
		delete(s.codes, r.PostForm.Get("code"))
		sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
		if !ok || cg.client != id || cg.redirect != r.PostForm.Get("redirect_uri") ||
			base64.RawURLEncoding.EncodeToString(sum[:]) != cg.challenge {
			oauthError(w, http.StatusBadRequest, "invalid_grant")
			return
		}
		s.CodeExchanges.Add(1)
		s.answer(w, s.issueLocked(id, grantable(cg.scopes, s.opts.NeverGrant)), true)
	case "refresh_token":
		g, ok := s.refresh[r.PostForm.Get("refresh_token")]
		if !ok || g.client != id {
			s.RefreshFails.Add(1)
			if s.opts.RevokeOnReuse && s.retired[r.PostForm.Get("refresh_token")] == id {
				s.revokeLocked(id)
			}
			oauthError(w, http.StatusBadRequest, "invalid_grant")
			return
		}
		s.Refreshes.Add(1)
		for k, v := range s.access {
			if v == g {
				delete(s.access, k)
			}
		}
		n := &grant{client: id, scopes: g.scopes, expiry: time.Now().Add(s.opts.TokenLifetime), refresh: g.refresh}
		s.access[random()] = n
		if s.opts.RotateRefresh {
			delete(s.refresh, g.refresh)
			s.retired[g.refresh] = id
			n.refresh = random()
		}
		s.refresh[n.refresh] = n
		s.answer(w, n, !s.opts.NoRefreshInAnswer)
	case "client_credentials":
		s.Credentials.Add(1)
		g := &grant{client: id, scopes: grantable(strings.Fields(r.PostForm.Get("scope")), s.opts.NeverGrant), expiry: time.Now().Add(s.opts.TokenLifetime)}
		s.access[random()] = g
		s.answer(w, g, false)
	default:
		oauthError(w, http.StatusBadRequest, "unsupported_grant_type")
	}
}

func grantable(scopes []string, never string) []string {
	return slices.DeleteFunc(slices.Clone(scopes), func(s string) bool { return s == never })
}

// issueLocked issues an access token and a refresh token. s.mu is held.
func (s *Server) issueLocked(client string, scopes []string) *grant {
	g := &grant{client: client, scopes: scopes, expiry: time.Now().Add(s.opts.TokenLifetime), refresh: random()}
	s.access[random()] = g
	s.refresh[g.refresh] = g
	return g
}

// answer writes a token response for g. s.mu is held.
func (s *Server) answer(w http.ResponseWriter, g *grant, withRefresh bool) {
	resp := map[string]any{
		"access_token": s.tokenOf(g), "token_type": "Bearer",
		"expires_in": int(time.Until(g.expiry).Seconds()), "scope": strings.Join(g.scopes, " "),
	}
	if s.opts.StatedExpiresIn != 0 {
		resp["expires_in"] = s.opts.StatedExpiresIn
	}
	if withRefresh && g.refresh != "" {
		resp["refresh_token"] = g.refresh
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, resp)
}

// protect checks the bearer token of every MCP request.
func (s *Server) protect(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		need := append(slices.Clone(s.opts.Scopes), s.opts.LaterScopes...)
		if s.opts.NeverGrant != "" {
			need = append(need, s.opts.NeverGrant)
		}
		if len(s.opts.CallScopes) > 0 && r.Method == http.MethodPost {
			body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			r.Body = io.NopCloser(strings.NewReader(string(body)))
			if strings.Contains(string(body), `"tools/call"`) {
				need = append(need, s.opts.CallScopes...)
			}
		}
		meta := fmt.Sprintf("resource_metadata=%q", s.URL+"/.well-known/oauth-protected-resource/mcp")
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		s.mu.Lock()
		g := s.access[tok]
		s.mu.Unlock()
		switch {
		case !ok || tok == "":
			s.Refused.Add(1)
			h := "Bearer " + meta
			if len(s.opts.Scopes) > 0 {
				h += fmt.Sprintf(", scope=%q", strings.Join(s.opts.Scopes, " "))
			}
			w.Header().Set("WWW-Authenticate", h)
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		case g == nil || time.Now().After(g.expiry):
			s.Refused.Add(1)
			w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token", `+meta)
			http.Error(w, "invalid token", http.StatusUnauthorized)
			return
		}
		for _, sc := range need {
			if !slices.Contains(g.scopes, sc) {
				s.Refused.Add(1)
				w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer error="insufficient_scope", scope=%q, %s`, strings.Join(union(g.scopes, need), " "), meta))
				http.Error(w, "insufficient scope", http.StatusForbidden)
				return
			}
		}
		s.Served.Add(1)
		next.ServeHTTP(w, r)
	})
}

func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, s := range b {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func oauthError(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": code})
}

func random() string { return rand.Text() }

// Fetcher plays the user: it visits the authorization URL with c (nil: a
// client of its own) and reads the code and state from the redirect without
// following it.
func Fetcher(c *http.Client) auth.AuthorizationCodeFetcher {
	return func(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
		nc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		if c != nil {
			nc.Transport = c.Transport
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, args.URL, nil)
		if err != nil {
			return nil, err
		}
		resp, err := nc.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		loc, err := url.Parse(resp.Header.Get("Location"))
		if err != nil || resp.StatusCode != http.StatusFound {
			return nil, fmt.Errorf("the authorization endpoint answered %s", resp.Status)
		}
		q := loc.Query()
		return &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}, nil
	}
}

// A Pipe is an in-process network for HTTP: connections are net.Pipe pairs,
// so a server and its clients work inside a testing/synctest bubble (a real
// socket is never durably blocked, and would stop the bubble's clock).
type Pipe struct {
	srv    *http.Server
	conns  chan net.Conn
	done   chan struct{}
	once   sync.Once
	client *http.Transport
}

// NewPipe serves s on a pipe network (s.URL becomes "http://localhost": a
// loopback name, as the SDK's discovery requires of plain http) and returns
// it; Close it before the bubble ends.
func NewPipe(s *Server) *Pipe {
	p := &Pipe{conns: make(chan net.Conn), done: make(chan struct{})}
	s.URL = "http://localhost"
	p.srv = &http.Server{Handler: s.mux}
	p.client = &http.Transport{DialContext: p.dial}
	go func() { _ = p.srv.Serve(pipeListener{p}) }()
	return p
}

// Client returns an HTTP client on the pipe network.
func (p *Pipe) Client() *http.Client { return &http.Client{Transport: p.client} }

func (p *Pipe) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	a, b := net.Pipe()
	select {
	case p.conns <- b:
		return a, nil
	case <-p.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops the network, its server and its client's idle connections.
func (p *Pipe) Close() error {
	_ = p.srv.Close() // closes the listener too
	p.client.CloseIdleConnections()
	return nil
}

// pipeListener is the server's side of a Pipe.
type pipeListener struct{ *Pipe }

// Accept implements net.Listener.
func (l pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener.
func (l pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr implements net.Listener.
func (l pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe.test:80" }

// MCPServer is an MCP server with one tool, echo, that returns its "text"
// argument.
func MCPServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "authtest", Version: "0"}, nil)
	s.AddTool(&mcp.Tool{Name: "echo", InputSchema: map[string]any{"type": "object"}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args struct {
				Text string `json:"text"`
			}
			_ = json.Unmarshal(req.Params.Arguments, &args)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: args.Text}}}, nil
		})
	return s
}

// Streamable serves s over streamable HTTP; SSE over the legacy SSE transport.
func Streamable(s *mcp.Server) http.Handler {
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
}

// Stateless serves s over streamable HTTP without sessions: the server speaks
// protocol 2026-07-28 (answers server/discover), and older ones without a session.
func Stateless(s *mcp.Server) http.Handler {
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true})
}

// SSE serves s over the legacy HTTP+SSE transport.
func SSE(s *mcp.Server) http.Handler {
	return mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return s }, nil)
}

// CloseSessions closes every session of s: a test's cleanup, since a client
// whose credentials were revoked cannot end its session itself.
func CloseSessions(s *mcp.Server) {
	for ss := range s.Sessions() {
		_ = ss.Close()
	}
}
