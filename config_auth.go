package mcpfsm

import (
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/transport"
	yaml "go.yaml.in/yaml/v3"
	"golang.org/x/oauth2"
)

// The auth block of a server reached by url (docs/auth.md):
//
//	auth:
//	  token: ${SEARCH_TOKEN}       # a static bearer token; or an OAuth grant:
//	  grant: authorization_code    # (the default) or client_credentials
//	  client_id: my-client         # registered in advance (required for client_credentials)
//	  client_secret: ${SECRET}     # its secret, if it has one
//	  client_metadata_url: https://example.com/client.json  # a client ID metadata document
//	  register: true               # dynamic client registration when offered (the default)
//	  redirect_url: http://127.0.0.1:8976/callback  # where `mcpfsm auth login` listens
//	  scopes: [files.read]         # asked for besides those the server names
//	  store: tokens                # the token directory (default: the user's config dir); memory: none
//	  timeout: 10s                 # bound on each request to the authorization server
//
// Secrets (token, client_secret) are written ${NAME} and only so: the file never
// holds one. No message quotes their values.

// secretRef is how a secret is written in the config: one environment variable.
var secretRef = regexp.MustCompile(`^\$\{[A-Za-z_][A-Za-z0-9_]*\}$`)

// defaultRedirect is where `mcpfsm auth login` listens for the authorization
// server's redirect unless the config names another loopback URL.
const defaultRedirect = "http://127.0.0.1:8976/callback"

// serverAuth reads the auth block f of the server named name into t (a server reached
// by url; a command server has none).
func (p *configParser) serverAuth(f machine.Field, what, name string, t *transport.Config) {
	h := t.HTTP
	if h == nil {
		h = t.SSE
	}
	if h == nil {
		if t.Stdio != nil {
			p.r.Errorf(f.Key, "%s runs a command: auth is for servers reached by url (give a stdio server its credentials in env)", what)
		}
		return
	}
	for k := range h.Headers {
		if strings.EqualFold(k, "Authorization") {
			p.r.Errorf(f.Key, "%s has an Authorization header and an auth block: give one", what)
			return
		}
	}
	what += " auth"
	body := p.r.Struct(f.Value, what, "token", "grant", "client_id", "client_secret", "client_metadata_url",
		"register", "redirect_url", "scopes", "store", "timeout")
	if body == nil {
		return
	}
	has := func(key string) bool { return body[key].Value != nil }
	args := transport.ShellWord(p.r.File) + " " + transport.ShellWord(name)
	a := &transport.Auth{LoginHint: "mcpfsm auth login " + args, RedirectURL: defaultRedirect,
		LoginScopeHint: [2]string{"mcpfsm auth login --scope ", " " + args}}
	if has("token") {
		for _, key := range []string{"grant", "client_id", "client_secret", "client_metadata_url", "register", "redirect_url", "scopes", "store", "timeout"} {
			if has(key) {
				p.r.Errorf(body[key].Key, "%s has a token: %s is for an OAuth grant", what, key)
			}
		}
		if tok, ok := p.secret(body["token"].Value, what+" token"); ok {
			h.Auth = &transport.Auth{Token: oauth2.StaticTokenSource(&oauth2.Token{AccessToken: tok, TokenType: "Bearer"})}
		}
		return
	}
	if v := body["grant"].Value; v != nil {
		switch g, ok := p.r.String(v, what+" grant"); {
		case !ok:
		case g == string(transport.GrantAuthorizationCode) || g == string(transport.GrantClientCredentials):
			a.Grant = transport.Grant(g)
		default:
			p.r.Errorf(v, "%s grant must be authorization_code or client_credentials", what)
		}
	}
	if v := body["client_id"].Value; v != nil {
		a.ClientID, _ = p.expand(v, what+" client_id")
	}
	if v := body["client_secret"].Value; v != nil {
		a.ClientSecret, _ = p.secret(v, what+" client_secret")
	}
	if v := body["client_metadata_url"].Value; v != nil {
		a.ClientIDMetadataURL, _ = p.expand(v, what+" client_metadata_url")
	}
	if v := body["register"].Value; v != nil {
		if on, ok := p.r.Bool(v, what+" register"); ok {
			a.NoRegistration = !on
		}
	}
	if v := body["redirect_url"].Value; v != nil {
		a.RedirectURL, _ = p.expand(v, what+" redirect_url")
	}
	if v := body["scopes"].Value; v != nil {
		for _, n := range p.r.Strings(v, what+" scopes") {
			if s, ok := p.expand(n, what+" scope"); ok {
				a.Scopes = append(a.Scopes, s)
			}
		}
	}
	if v := body["timeout"].Value; v != nil {
		if s, ok := p.r.String(v, what+" timeout"); ok {
			if d, err := time.ParseDuration(s); err != nil || d <= 0 {
				p.r.Errorf(v, "%s timeout must be a positive duration such as 10s", what)
			} else {
				a.Timeout = d
			}
		}
	}
	p.tokenStore(body["store"].Value, what, a)
	if a.Grant == transport.GrantClientCredentials && (!has("client_id") || !has("client_secret")) {
		p.r.Errorf(f.Value, "%s: client_credentials needs client_id and client_secret", what)
		return
	}
	// What the transport refuses that the checks above let through (its messages
	// quote no secret), on a placeholder URL: the server's own is checked apart.
	if err := (transport.Config{Name: name, HTTP: &transport.HTTP{URL: "https://placeholder/", Auth: a}}).Validate(); err != nil {
		p.r.Errorf(f.Value, "%s: %v", what, unwrapConfig(err))
		return
	}
	h.Auth = a
}

// tokenStore reads where the tokens are kept: a directory relative to the config's,
// "memory" for none, or the user's config directory by default.
func (p *configParser) tokenStore(n *yaml.Node, what string, a *transport.Auth) {
	if n == nil {
		dir, err := transport.DefaultTokenDir()
		if err != nil {
			return // no home: tokens in memory only
		}
		a.Store = &transport.FileStore{Dir: dir}
		return
	}
	v, ok := p.expand(n, what+" store")
	if !ok || !p.noNUL(n, what+" store", v) {
		return
	}
	if v == "memory" {
		return
	}
	a.Store = &transport.FileStore{Dir: filepath.Clean(p.path(v))}
}

// secret reads a secret, which must be written ${NAME}: the file holds none.
func (p *configParser) secret(n *yaml.Node, what string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		p.r.Errorf(n, "%s must be a single value", what)
		return "", false
	}
	if !secretRef.MatchString(n.Value) {
		p.r.Errorf(n, "%s must be written ${NAME}, naming an environment variable: a secret is not kept in the file", what)
		return "", false
	}
	v, ok := p.substitute(n, n.Value)
	if ok && v == "" {
		p.r.Errorf(n, "%s: the environment variable is empty", what)
		return "", false
	}
	return v, ok
}

// unwrapConfig returns the message of a transport config error about the auth
// settings without its prefixes (the server, the transport, "auth"): the config's
// message says where it is.
func unwrapConfig(err error) string {
	if te, ok := err.(*transport.Error); ok && te.Err != nil {
		err = te.Err
	}
	return strings.TrimPrefix(strings.TrimPrefix(err.Error(), "http: "), "auth: ")
}
