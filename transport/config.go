package transport

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Config says how to reach one MCP server. Exactly one of Stdio, HTTP, SSE and
// InMemory is set.
type Config struct {
	Name     string    // the server's name, used in errors and logs
	Stdio    *Stdio    // a local command spoken to over its stdin and stdout
	HTTP     *HTTP     // streamable HTTP
	SSE      *HTTP     // legacy HTTP+SSE (protocol 2024-11-05)
	InMemory *InMemory // an in-process server, for tests and demos
	// ProtocolVersion, if set, is the protocol version the client asks for (one of
	// mcp.SupportedProtocolVersions): below 2026-07-28 the client sends initialize
	// with it at once instead of trying server/discover first. "" asks for the
	// newest. A server written for sessions, one that sends sampling, elicitation
	// or roots requests while serving a call (which 2026-07-28 forbids: such a
	// server then fails those calls), needs "2025-11-25".
	ProtocolVersion string
}

// Stdio runs a local command and speaks MCP over its stdin and stdout.
//
// The command is executed directly (no shell) in a process group of its own,
// so that a forced close can kill everything it started.
type Stdio struct {
	Command string            // program to run: a path, or a name looked up in PATH
	Args    []string          // arguments, not including the program name; secrets, as are the credentials in a header line or URL among them
	Env     map[string]string // added to (and overriding) the inherited environment; values are secrets, and so is the token of a "Bearer T"
	Dir     string            // working directory; the caller's if empty
	Stderr  io.Writer         // receives the child's stderr; discarded if nil
}

// HTTP reaches a server over HTTP, either streamable HTTP ([Config.HTTP]) or
// legacy SSE ([Config.SSE]).
type HTTP struct {
	URL     string            // the MCP endpoint; its userinfo and query values are secrets
	Headers map[string]string // set on every request to URL's host (not the SDK's protocol headers); values are secrets
	// Client, if set, is the caller's HTTP client. Its Transport is used (wrapped)
	// and never closed by the session (its pool is the caller's to size: net/http's
	// default keeps 2 idle connections a host, and a session making many calls at
	// once then opens a connection for nearly each). If nil, each session uses a
	// private transport that keeps up to 64 idle connections to its server, closed
	// when the session closes. A panic in its RoundTripper (or in a body it
	// returns) fails the request it was sending (the error names the panic; its
	// stack is logged, an error), as a request that could not be sent: it does
	// not end the process or hold the session.
	Client *http.Client
	// MaxRetries bounds how many times the streamable HTTP transport tries to
	// reconnect its server-to-client event stream before it declares the
	// connection lost (the SDK's StreamableClientTransport.MaxRetries: 0 means
	// the SDK default of 5, negative means no retry). Ignored for SSE.
	MaxRetries int
	// Auth, if set, authorizes the requests to URL's origin: OAuth, a bearer
	// token source, or a go-sdk auth.OAuthHandler (see Auth). Headers must
	// then not set Authorization.
	Auth *Auth
}

// InMemory connects to an in-process server over an in-memory pipe. The
// server side is connected first, as the SDK requires. Each Dial creates a new
// server session of Server.
type InMemory struct {
	Server *mcp.Server // the server to connect to
}

// Kinds of transport, as returned by [Config.Kind].
const (
	KindStdio  = "stdio"
	KindHTTP   = "http"
	KindSSE    = "sse"
	KindMemory = "memory"
)

// Kind returns "stdio", "http" (streamable HTTP), "sse" or "memory", or "" if
// not exactly one transport is set.
func (c Config) Kind() string {
	kind, n := "", 0
	if c.Stdio != nil {
		kind, n = KindStdio, n+1
	}
	if c.HTTP != nil {
		kind, n = KindHTTP, n+1
	}
	if c.SSE != nil {
		kind, n = KindSSE, n+1
	}
	if c.InMemory != nil {
		kind, n = KindMemory, n+1
	}
	if n != 1 {
		return ""
	}
	return kind
}

// httpConfig returns the HTTP or SSE settings, whichever is set.
func (c Config) httpConfig() *HTTP {
	if c.HTTP != nil {
		return c.HTTP
	}
	return c.SSE
}

// Validate reports the first problem that would stop Dial from trying. The
// error is an [*Error] with Op [OpConfig] naming the server; it never quotes a
// secret.
func (c Config) Validate() error {
	if err := c.validate(); err != nil {
		return &Error{Server: c.Name, Op: OpConfig, Err: err}
	}
	return nil
}

func (c Config) validate() error {
	if strings.TrimSpace(c.Name) == "" {
		return errors.New("the server has no name")
	}
	var set []string
	for _, k := range []struct {
		name string
		set  bool
	}{{"Stdio", c.Stdio != nil}, {"HTTP", c.HTTP != nil}, {"SSE", c.SSE != nil}, {"InMemory", c.InMemory != nil}} {
		if k.set {
			set = append(set, k.name)
		}
	}
	if c.ProtocolVersion != "" && !slices.Contains(mcp.SupportedProtocolVersions(), c.ProtocolVersion) {
		return fmt.Errorf("protocol version %q is not one the client speaks (%s)", c.ProtocolVersion, strings.Join(mcp.SupportedProtocolVersions(), ", "))
	}
	switch len(set) {
	case 0:
		return errors.New("no transport is set: set exactly one of Stdio, HTTP, SSE, InMemory")
	case 1:
	default:
		return fmt.Errorf("%s are all set: set exactly one transport", strings.Join(set, ", "))
	}
	switch {
	case c.Stdio != nil:
		if c.Stdio.Command == "" {
			return errors.New("stdio: the command is empty")
		}
		for k := range c.Stdio.Env {
			if k == "" || strings.ContainsAny(k, "=\x00") {
				return fmt.Errorf("stdio: environment variable name %q is invalid", k)
			}
		}
		for k, v := range c.Stdio.Env {
			if strings.ContainsRune(v, 0) {
				return fmt.Errorf("stdio: the value of environment variable %s contains a NUL byte", k)
			}
		}
	case c.InMemory != nil:
		if c.InMemory.Server == nil {
			return errors.New("memory: the server is nil")
		}
	default:
		h := c.httpConfig()
		kind := c.Kind()
		if h.URL == "" {
			return fmt.Errorf("%s: the URL is empty", kind)
		}
		u, err := url.Parse(h.URL)
		if err != nil {
			// url.Parse quotes the URL in its error: do not repeat it.
			return fmt.Errorf("%s: the URL does not parse", kind)
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return fmt.Errorf("%s: the URL's scheme is %q, want http or https", kind, u.Scheme)
		}
		if u.Host == "" {
			return fmt.Errorf("%s: the URL has no host", kind)
		}
		for k, v := range h.Headers {
			if k == "" || strings.ContainsAny(k, " \t\r\n:") {
				return fmt.Errorf("%s: header name %q is invalid", kind, k)
			}
			if strings.ContainsAny(v, "\r\n\x00") {
				return fmt.Errorf("%s: the value of header %s contains a control character", kind, k)
			}
		}
		if err := validateAuth(h); err != nil {
			return fmt.Errorf("%s: %w", kind, err)
		}
	}
	return nil
}

// String describes c without its secrets: header values, environment values,
// URL userinfo and query values are never printed (nor are command arguments,
// which often carry tokens: only their number is).
func (c Config) String() string {
	var b strings.Builder
	kind := c.Kind()
	if kind == "" {
		kind = "invalid"
	}
	fmt.Fprintf(&b, "%s server %q", kind, c.Name)
	switch kind {
	case KindStdio:
		s := c.Stdio
		fmt.Fprintf(&b, ": command %q with %d args", s.Command, len(s.Args))
		if len(s.Env) > 0 {
			fmt.Fprintf(&b, ", env %s", strings.Join(sortedKeys(s.Env), ","))
		}
		if s.Dir != "" {
			fmt.Fprintf(&b, ", dir %q", s.Dir)
		}
	case KindHTTP, KindSSE:
		h := c.httpConfig()
		fmt.Fprintf(&b, ": %s", safeURL(h.URL))
		if len(h.Headers) > 0 {
			fmt.Fprintf(&b, ", headers %s", strings.Join(sortedKeys(h.Headers), ","))
		}
		if h.Auth != nil {
			fmt.Fprintf(&b, ", auth %s", h.Auth.kind())
		}
	}
	return b.String()
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// redacted replaces a secret in printed text.
const redacted = "REDACTED"

// safeURL returns raw with its userinfo, query values and fragment replaced.
func safeURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	if u.User != nil {
		u.User = url.User(redacted)
	}
	if u.RawQuery != "" {
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			u.RawQuery = redacted
		} else {
			for k, vs := range q {
				for i := range vs {
					vs[i] = redacted
				}
				q[k] = vs
			}
			u.RawQuery = q.Encode()
		}
	}
	if u.Fragment != "" {
		u.Fragment = redacted
		u.RawFragment = ""
	}
	return u.String()
}
