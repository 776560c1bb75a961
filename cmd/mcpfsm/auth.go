package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/modelcontextprotocol/go-sdk/auth"
)

func runAuth(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "login":
			return runAuthLogin(ctx, args[1:], stdout, stderr)
		case "status":
			return runAuthStatus(args[1:], stdout, stderr)
		case "-h", "--help", "help":
			fmt.Fprint(stdout, authUsage)
			return 0
		}
		fmt.Fprintf(stderr, "mcpfsm auth: unknown subcommand %q (want login or status)\n\n", args[0])
	}
	fmt.Fprint(stderr, authUsage)
	return 2
}

const authUsage = `Usage: mcpfsm auth login [--force] [--scope "a b"] [--timeout 5m] CONFIG SERVER
       mcpfsm auth status [--json] CONFIG

login   log in to a server of a config (the OAuth authorization code flow): prints
        the URL to open, receives the redirect on the config's loopback redirect_url,
        and saves the token in the config's token store once the server accepted it
status  each server's credentials: the kind, and for OAuth the stored token's
        state (expiry, scopes, refresh token); never a token

Run "mcpfsm auth login --help" or "mcpfsm auth status --help" for their flags.
`

func runAuthLogin(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("auth login", "[--force] [--scope \"a b\"] [--timeout 5m] CONFIG SERVER", `
Log in to SERVER of a servers config with the OAuth authorization code flow (PKCE),
as its auth block says: print the authorization URL to open in a browser, listen on
the redirect_url (a loopback address: http://127.0.0.1:8976/callback by default) for
the redirect, exchange the code, and connect once with the token. The token is saved
in the config's token store once the server has accepted it; the credentials stored
before are kept until then. A running mcpfsm picks the new token up at its next
re-check (auth_recheck_interval), or at once through Conn.CredentialsChanged.

If the stored token works already, nothing is done (--force logs in anew).

--scope "a b" asks for these scopes (separated by spaces) besides the auth block's
scopes, for this login: what a server answering 403 insufficient_scope asks for
(its error names the command to run). The stored credentials then carry them, and
keep them when refreshed. A stored token that was not granted them all is not
taken for a working one: the login is made anew, as with --force.
Exits 0 when logged in (or already), 1 when the login failed, 2 on a usage error.`, stderr)
	force := fs.Bool("force", false, "log in even if the stored token works")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up after this long, the user's part included")
	scope := fs.String("scope", "", "ask for these scopes (space-separated) besides the auth block's")
	if code, done := parse(fs, args, stdout); done {
		return code
	}
	extra := strings.Fields(*scope)
	if *scope != "" && len(extra) == 0 {
		fmt.Fprintln(stderr, "mcpfsm auth login: --scope is empty: give the scopes to ask for, separated by spaces")
		return 2
	}
	if fs.NArg() != 2 {
		fmt.Fprintln(stderr, "mcpfsm auth login: want CONFIG SERVER")
		return 2
	}
	cfgPath, server := fs.Arg(0), fs.Arg(1)
	sc, code := loadServer("auth login", cfgPath, server, stderr)
	if code != 0 {
		return code
	}
	h := httpOf(sc.Transport)
	if h == nil || h.Auth == nil || h.Auth.Token != nil || h.Auth.Handler != nil || h.Auth.Grant == transport.GrantClientCredentials {
		fmt.Fprintf(stderr, "mcpfsm auth login: server %s has no auth block with the authorization code flow: nothing to log in to\n", machine.Quote(server))
		return 1
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	lb, err := listenLoopback(h.Auth.RedirectURL, stdout, server)
	if err != nil {
		fmt.Fprintf(stderr, "mcpfsm auth login: %v\n", err)
		return 1
	}
	defer lb.close()

	a := *h.Auth
	a.RedirectURL = lb.redirect
	a.Fetcher = lb.fetch
	if a.Store == nil {
		fmt.Fprintf(stderr, "mcpfsm auth login: server %s keeps its tokens in memory (store: memory): a login would be lost\n", machine.Quote(server))
		return 1
	}
	store := a.Store
	if len(extra) > 0 {
		a.Scopes = slices.Clone(a.Scopes)
		for _, x := range extra {
			if !slices.Contains(a.Scopes, x) {
				a.Scopes = append(a.Scopes, x)
			}
		}
		// A stored token without them works for what it was granted, and the
		// login would have done nothing.
		if c, _ := store.Load(ctx, keyOf(sc.Transport, &a)); c == nil || !holds(c.Scopes, extra) {
			*force = true
		}
	}
	if *force {
		a.Store = freshStore{store}
	}
	hc := *h
	hc.Auth = &a
	cfg := sc.Transport
	if cfg.HTTP != nil {
		cfg.HTTP = &hc
	} else {
		cfg.SSE = &hc
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := transport.Dial(ctx, cfg, transport.Options{Logger: log})
	if err != nil {
		fmt.Fprintf(stderr, "mcpfsm auth login: %s\n", errorText(err))
		return 1
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = s.Close(cctx)
	ccancel()
	c, _ := store.Load(context.Background(), keyOf(sc.Transport, &a))
	if !lb.used() {
		fmt.Fprintf(stdout, "%s: already logged in (%s); --force logs in anew\n", server, describeCreds(c))
		return 0
	}
	if c == nil {
		fmt.Fprintf(stderr, "mcpfsm auth login: logged in to %s, but the token could not be saved (see the warnings above)\n", server)
		return 1
	}
	fmt.Fprintf(stdout, "%s: logged in; %s\n", server, describeCreds(c))
	return 0
}

func runAuthStatus(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("auth status", "[--json] CONFIG", `
Show the credentials of each server of a servers config: how it authorizes
(none, a bearer token from the environment, OAuth), and for OAuth what the token
store holds: whether there is a token, when it expires, its scopes, whether it can
be refreshed. Tokens and secrets are never shown.`, stderr)
	asJSON := fs.Bool("json", false, "print a JSON array")
	if code, done := parse(fs, args, stdout); done {
		return code
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "mcpfsm auth status: want CONFIG")
		return 2
	}
	cfg, err := mcpfsm.LoadConfig(fs.Arg(0))
	if err != nil {
		fmt.Fprintln(stderr, errorText(err))
		return 1
	}
	type row struct {
		Server string                 `json:"server"`
		Auth   string                 `json:"auth"`
		Store  string                 `json:"store,omitempty"`
		Token  *transport.TokenStatus `json:"token,omitempty"`
		Error  string                 `json:"error,omitempty"`
	}
	var rows []row
	for _, sc := range cfg.Servers {
		r := row{Server: sc.Name, Auth: "none"}
		h := httpOf(sc.Transport)
		switch {
		case h == nil || h.Auth == nil:
		case h.Auth.Token != nil:
			r.Auth = "bearer token"
		case h.Auth.Grant == transport.GrantClientCredentials:
			// Its tokens are had again from the config's secret, never stored,
			// and there is no login to run.
			r.Auth = "oauth " + string(h.Auth.Grant)
		default:
			r.Auth = "oauth " + string(orDefault(h.Auth.Grant))
			if fsStore, ok := h.Auth.Store.(*transport.FileStore); ok {
				r.Store = fsStore.Path(keyOf(sc.Transport, h.Auth))
			} else if h.Auth.Store == nil {
				r.Store = "memory"
			}
			if h.Auth.Store != nil {
				c, err := h.Auth.Store.Load(context.Background(), keyOf(sc.Transport, h.Auth))
				st := c.Status()
				r.Token = &st
				if err != nil {
					r.Error = err.Error()
				} else if c != nil && c.Resource != "" && c.Resource != h.URL {
					r.Error = "the stored token is for another URL: log in again"
				}
			}
		}
		rows = append(rows, r)
	}
	if *asJSON {
		data, _ := json.MarshalIndent(rows, "", "  ")
		fmt.Fprintf(stdout, "%s\n", data)
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tAUTH\tTOKEN\tSCOPES\tSTORE")
	for _, r := range rows {
		tok, scopes := "-", "-"
		if r.Token != nil {
			tok = tokenState(*r.Token)
			if len(r.Token.Scopes) > 0 {
				scopes = strings.Join(r.Token.Scopes, " ")
			}
		}
		if r.Error != "" {
			tok += " (" + printable(r.Error, 80) + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Server, r.Auth, tok, printable(scopes, 60), orDash(r.Store))
	}
	_ = tw.Flush()
	return 0
}

// tokenState says what a stored token is worth, in a few words.
func tokenState(st transport.TokenStatus) string {
	var s string
	switch {
	case !st.HasToken:
		return "none: run mcpfsm auth login"
	case st.Expiry.IsZero():
		s = "valid (no expiry given)"
	case time.Until(st.Expiry) > 0:
		s = fmt.Sprintf("valid until %s (%s)", st.Expiry.Format(time.RFC3339), time.Until(st.Expiry).Round(time.Second))
	default:
		s = fmt.Sprintf("expired at %s", st.Expiry.Format(time.RFC3339))
	}
	if st.HasRefresh {
		s += ", refreshable"
	} else if !st.Expiry.IsZero() {
		s += ", no refresh token"
	}
	return s
}

func describeCreds(c *transport.Credentials) string {
	if c == nil {
		return "no stored token"
	}
	s := "token " + tokenState(c.Status())
	if len(c.Scopes) > 0 {
		s += ", scopes " + strings.Join(c.Scopes, " ")
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func orDefault(g transport.Grant) transport.Grant {
	if g == "" {
		return transport.GrantAuthorizationCode
	}
	return g
}

// keyOf is the store key of a server: Auth.StoreKey, else its name.
func keyOf(cfg transport.Config, a *transport.Auth) string {
	if a.StoreKey != "" {
		return a.StoreKey
	}
	return cfg.Name
}

func httpOf(cfg transport.Config) *transport.HTTP {
	if cfg.HTTP != nil {
		return cfg.HTTP
	}
	return cfg.SSE
}

// loadServer loads a config and finds one server in it, or prints why not.
func loadServer(cmd, cfgPath, server string, stderr io.Writer) (mcpfsm.ServerConfig, int) {
	cfg, err := mcpfsm.LoadConfig(cfgPath)
	if err != nil {
		fmt.Fprintln(stderr, errorText(err))
		return mcpfsm.ServerConfig{}, 1
	}
	sc, ok := cfg.Server(server)
	if !ok {
		var names []string
		for _, s := range cfg.Servers {
			names = append(names, s.Name)
		}
		fmt.Fprintf(stderr, "mcpfsm %s: %s has no server %s (it has %s)\n", cmd, printable(cfgPath, maxLine), machine.Quote(server), strings.Join(names, ", "))
		return sc, 1
	}
	return sc, 0
}

// holds reports whether granted has every scope of want.
func holds(granted, want []string) bool {
	for _, s := range want {
		if !slices.Contains(granted, s) {
			return false
		}
	}
	return true
}

// freshStore is a store that holds nothing to start with (a forced login) but saves
// to the real one: the stored credentials are replaced once the new ones work.
type freshStore struct{ transport.TokenStore }

func (freshStore) Load(context.Context, string) (*transport.Credentials, error) { return nil, nil }

// loopback receives the authorization server's redirect on a loopback address.
type loopback struct {
	redirect string // the redirect URL, with the port actually listened on
	path     string
	srv      *http.Server
	results  chan *auth.AuthorizationResult
	show     io.Writer
	server   string
	fetched  chan struct{}
}

// listenLoopback listens on the redirect URL, which must be a plain-http loopback URL
// (port 0: any free port).
func listenLoopback(redirect string, show io.Writer, server string) (*loopback, error) {
	u, err := url.Parse(redirect)
	if err != nil || u.Scheme != "http" {
		return nil, errors.New("the redirect_url must be an http URL on a loopback address, such as http://127.0.0.1:8976/callback")
	}
	host := u.Hostname()
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("the redirect_url's host %s is not a loopback address: auth login listens only on loopback", machine.Quote(host))
	}
	port := u.Port()
	if port == "" {
		port = "80"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		return nil, fmt.Errorf("listening for the redirect on %s: %w", u.Host, err)
	}
	u.Host = net.JoinHostPort(host, fmt.Sprint(ln.Addr().(*net.TCPAddr).Port))
	lb := &loopback{
		redirect: u.String(), path: u.Path, results: make(chan *auth.AuthorizationResult, 1),
		show: show, server: server, fetched: make(chan struct{}, 1),
	}
	if lb.path == "" {
		lb.path = "/"
	}
	lb.srv = &http.Server{Handler: http.HandlerFunc(lb.callback), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = lb.srv.Serve(ln) }()
	return lb, nil
}

func (lb *loopback) callback(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != lb.path {
		http.NotFound(w, r)
		return
	}
	q := r.URL.Query()
	if e := q.Get("error"); e != "" {
		http.Error(w, "The authorization server refused: "+html.EscapeString(e), http.StatusBadRequest)
		select {
		case lb.results <- &auth.AuthorizationResult{}:
		default:
		}
		return
	}
	select {
	case lb.results <- &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}:
		fmt.Fprintln(w, "Logged in. You can close this window.")
	default:
		http.Error(w, "A login is already under way.", http.StatusConflict)
	}
}

// fetch is the auth.AuthorizationCodeFetcher: it shows the URL and waits for the
// redirect.
func (lb *loopback) fetch(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
	select {
	case lb.fetched <- struct{}{}:
	default:
	}
	fmt.Fprintf(lb.show, "To log in to %s, open this URL in a browser:\n\n  %s\n\nWaiting for the redirect to %s ...\n", lb.server, args.URL, lb.redirect)
	select {
	case res := <-lb.results:
		if res.Code == "" {
			return nil, errors.New("the authorization server sent no code back")
		}
		return res, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("no redirect came back: %w", ctx.Err())
	}
}

func (lb *loopback) used() bool { return len(lb.fetched) > 0 }

func (lb *loopback) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = lb.srv.Shutdown(ctx)
}
