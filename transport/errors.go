package transport

import (
	"cmp"
	"encoding/base64"
	"errors"
	"net/url"
	"slices"
	"strings"
)

// Operations named by [Error.Op].
const (
	OpConfig    = "config"     // Config.Validate
	OpDial      = "dial"       // Dial: start, connect, initialize
	OpCallTool  = "call tool"  // Session.CallTool
	OpListTools = "list tools" // Session.ListTools
	OpProbe     = "probe"      // Session.Probe
	OpClose     = "close"      // Session.Close
	OpRequest   = "request"    // Session.Request
	OpEnd       = "end"        // the connection ended by itself (Options.OnEnd)
)

// ErrForcedClose is wrapped by the error of a Close whose context ended before
// the graceful close finished, so that the session was torn down by force
// (the stdio child's process group was killed, in-flight HTTP was aborted).
var ErrForcedClose = errors.New("forced close: the close context ended first")

// errCloseStuck is joined to a forced close's error when the teardown did not
// finish within forceGrace after it was forced.
var errCloseStuck = errors.New("teardown still running after the forced close")

// Error is the error of an operation on one server. It wraps the SDK's error
// unchanged, so errors.Is and errors.As see through it (mcp.ErrConnectionClosed,
// mcp.ErrSessionMissing, *jsonrpc.Error, context.DeadlineExceeded, io.EOF,
// *exec.ExitError, ...). Its message never contains a secret of the server's
// Config: header values, environment values, URL userinfo and query values are
// replaced by REDACTED wherever the wrapped error's text quotes them (values
// shorter than 4 bytes are not searched for).
type Error struct {
	Server string // Config.Name
	Op     string // one of the Op constants
	Tool   string // the tool's name, for OpCallTool
	// HTTPStatus is the status of the HTTP answer to the failed request, if
	// that answer was not a 2xx (HTTP transports; 0 otherwise, and when no
	// answer came). The SDK keeps it only as text, or not at all.
	HTTPStatus int
	// Sent is set when a POST of the failed request may have reached the
	// server (HTTP transports): it was under way when the error came, or it
	// was answered with anything but 404, or it failed after its connection
	// was made. A call may then have run, whatever the error says: in
	// particular an error wrapping mcp.ErrSessionMissing, which the SDK hands
	// to every call in flight when one request meets a 404. Not set when
	// every POST was refused at connect or answered 404, or none was made.
	Sent bool
	Err  error // the cause, as the SDK (or the OS) returned it

	red *redactor // nil for an Error built outside this package
}

// Error returns "mcp server NAME: OP[ TOOL]: CAUSE", with secrets redacted.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("mcp server ")
	b.WriteString(quote(e.Server))
	b.WriteString(": ")
	b.WriteString(e.Op)
	if e.Tool != "" {
		b.WriteString(" ")
		b.WriteString(quote(e.Tool))
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return e.red.scrub(b.String())
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }

// minSecret is the length below which a secret is not searched for in foreign
// text: replacing every "1" of an error message would destroy it and protect
// nothing.
const minSecret = 4

// redactor removes a Config's secrets from text that the SDK, the OS or the
// server produced.
type redactor struct {
	r *strings.Replacer
}

func newRedactor(c Config) *redactor {
	type pair struct{ old, new string }
	var pairs []pair
	add := func(secret string) {
		for _, s := range []string{secret, url.QueryEscape(secret), url.PathEscape(secret)} {
			if len(s) >= minSecret {
				pairs = append(pairs, pair{s, redacted})
			}
		}
	}
	if c.Stdio != nil {
		for _, v := range c.Stdio.Env {
			add(v)
		}
	}
	if h := c.httpConfig(); h != nil {
		for _, v := range h.Headers {
			add(v)
			// A server may quote the credentials alone ("invalid token T" of
			// "Bearer T"), or, for basic auth, decoded: each word after the
			// scheme is a secret too.
			words := strings.Fields(v)
			if len(words) > 1 {
				add(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), words[0])))
				for _, w := range words[1:] {
					add(w)
					if strings.EqualFold(words[0], "basic") {
						if dec, err := base64.StdEncoding.DecodeString(w); err == nil {
							user, pass, _ := strings.Cut(string(dec), ":")
							add(string(dec))
							add(user)
							add(pass)
						}
					}
				}
			}
		}
		if u, err := url.Parse(h.URL); err == nil {
			if safe := safeURL(h.URL); safe != h.URL {
				pairs = append(pairs, pair{h.URL, safe})
			}
			if u.User != nil {
				add(u.User.Username())
				p, _ := u.User.Password()
				add(p)
				add(u.User.String())
				// net/http sends userinfo as basic auth: a server may quote it.
				add(base64.StdEncoding.EncodeToString([]byte(u.User.Username() + ":" + p)))
			}
			if u.RawQuery != "" {
				add(u.RawQuery)
				for _, kv := range strings.Split(u.RawQuery, "&") {
					if _, v, ok := strings.Cut(kv, "="); ok {
						add(v) // as written, undecoded
					}
				}
				if q, err := url.ParseQuery(u.RawQuery); err == nil {
					for _, vs := range q {
						for _, v := range vs {
							add(v)
						}
					}
				}
			}
		} else {
			add(h.URL)
		}
	}
	if len(pairs) == 0 {
		return nil
	}
	// At each position the replacer tries the old strings in argument order:
	// longest first, so that a secret containing another is removed whole.
	slices.SortStableFunc(pairs, func(a, b pair) int { return cmp.Compare(len(b.old), len(a.old)) })
	args := make([]string, 0, 2*len(pairs))
	for _, p := range pairs {
		args = append(args, p.old, p.new)
	}
	return &redactor{r: strings.NewReplacer(args...)}
}

// scrub returns s without the secrets. A nil redactor returns s.
func (r *redactor) scrub(s string) string {
	if r == nil {
		return s
	}
	return r.r.Replace(s)
}
