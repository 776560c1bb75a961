package transport

import (
	"cmp"
	"encoding/base64"
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"unicode/utf8"
)

// Operations named by [Error.Op].
const (
	OpConfig    = "config"     // Config.Validate
	OpDial      = "dial"       // Dial: start, connect, initialize
	OpCallTool  = "call tool"  // Session.CallTool
	OpListTools = "list tools" // Session.ListTools
	OpProbe     = "probe"      // Session.Probe
	OpClose     = "close"      // Session.Close
	OpEnd       = "end"        // the connection ended by itself (Options.OnEnd)
	OpRequest   = "request"    // Session.Request, unless its caller names the request
)

// Limits on what a server can make a session hold. They are far above what
// any real server sends; they exist so that a hostile or broken server cannot
// grow a client's memory without bound.
const (
	// MaxListPages is the most pages one listing (Session.ListTools) follows.
	MaxListPages = 1000
	// MaxListItems is the most items one listing returns.
	MaxListItems = 100_000
	// MaxListBytes is the most bytes one listing's items add up to, as JSON:
	// a page may be as large as a message (16 MiB), and MaxListPages of them
	// would be 16 GB.
	MaxListBytes = 64 << 20
	// MaxErrorText is the most bytes of an *Error's cause that Error() prints
	// (its stderr tail aside): the rest is elided with "… (N bytes more)".
	// The wrapped error is kept whole for errors.Is and errors.As.
	MaxErrorText = 2 << 10
)

// ErrListTooLong is wrapped by the error of a listing that has more than
// MaxListPages pages, MaxListItems items or MaxListBytes bytes (a server that
// hands out a fresh cursor forever, for one).
var ErrListTooLong = errors.New("the server's list is too long")

// ErrInvalidRequest is wrapped by the error of a request that cannot be sent as
// given, whatever the session: a subscription without a URI on protocol
// 2026-07-28, which the go-sdk refuses before sending anything, and (from package
// mcpfsm's SetLoggingLevel) a log level that is not one of the protocol's eight.
// Nothing was sent.
var ErrInvalidRequest = errors.New("the request cannot be sent as given")

// ErrListenEnded is wrapped by the error given to Options.OnListenEnded (or,
// over streamable HTTP without it, to OnEnd) when, on protocol 2026-07-28, the
// server ended a subscriptions/listen in which it had agreed to hold something
// (its acknowledgment named a resource or a list): it no longer holds what the
// listen asked for (a resource's updates, changed lists), as after a restart.
var ErrListenEnded = errors.New("the server ended a subscriptions/listen it had agreed to")

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
// Config: header values, environment values, command arguments (and the value
// of each --flag=value argument), URL userinfo and query values are replaced
// by REDACTED wherever the wrapped error's text quotes them (values shorter
// than 4 bytes are not searched for). Its message quotes at most MaxErrorText
// bytes of the cause.
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
	// was answered with anything but a 4xx (the server did not accept it: 404
	// for a session it does not know, or 400 as some servers answer that), or
	// it failed after its connection was made. A call may then have run, whatever the error says: in
	// particular an error wrapping mcp.ErrSessionMissing, which the SDK hands
	// to every call in flight when one request meets a 404. Not set when
	// every POST was refused at connect or answered 4xx, or none was made.
	Sent bool
	// StderrTail is the last few KB of a stdio child's stderr, for the
	// errors of a child that failed to start or ended (OpDial, OpEnd),
	// already redacted; "" if it wrote nothing. A tail that starts after
	// dropped bytes starts at a line break when it can, after "…".
	StderrTail string
	// NotJSON is set when an HTTP answer to the request said it was JSON and
	// was not: the server speaks something that is not MCP. (The SDK keeps the
	// decoding error only as text.)
	NotJSON bool
	// NotMCP is set when a successful HTTP answer to the request was neither
	// JSON nor an event stream (an HTML page, say): the URL is not an MCP
	// endpoint.
	NotMCP bool
	// Answered is set when the server's JSON-RPC answer to the request came
	// whole (a request's, not a probe's): an error that says nothing of the
	// connection is then the SDK's reading of that answer (a content type it
	// does not know, a field of the wrong kind), and the session is sound.
	Answered bool
	Err      error // the cause, as the SDK (or the OS) returned it

	red *redactor // nil for an Error built outside this package
}

// Error returns "mcp server NAME: OP[ TOOL]: CAUSE[; stderr: "TAIL"]", with
// secrets redacted, the cause cut at MaxErrorText bytes, and the stderr tail
// quoted (one line, control characters escaped).
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
	msg := e.red.scrub(b.String())
	if e.Err != nil {
		msg += ": " + e.red.capped(e.Err.Error(), MaxErrorText)
	}
	if e.StderrTail != "" {
		msg += "; stderr: " + strconv.Quote(e.red.scrub(e.StderrTail))
	}
	return msg
}

// Detail returns what Error says after the server and the operation it names: the
// cause and the stderr tail, redacted and cut as there; "" if it has neither. An error
// of a caller's own that names the server and the request already (mcpfsm's
// CallError) quotes it in place of Error, so as not to say them twice.
func (e *Error) Detail() string {
	var d string
	if e.Err != nil {
		d = e.red.capped(e.Err.Error(), MaxErrorText)
	}
	if e.StderrTail != "" {
		if d != "" {
			d += "; "
		}
		d += "stderr: " + strconv.Quote(e.red.scrub(e.StderrTail))
	}
	return d
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
	r       *strings.Replacer // the config's secrets; nil if it has none
	longest int               // the longest text replaced
	// tokens are the bearer tokens the session sent (OAuth's, which change as they
	// are refreshed): a server may quote them too.
	tokens atomic.Pointer[[]string]
}

// maxTokens is how many of the latest bearer tokens a redactor keeps.
const maxTokens = 4

// remember adds a bearer token the session sent to the secrets.
func (r *redactor) remember(tok string) {
	if r == nil || len(tok) < minSecret {
		return
	}
	for {
		old := r.tokens.Load()
		var list []string
		if old != nil {
			if slices.Contains(*old, tok) {
				return
			}
			list = append(list, *old...)
		}
		list = append(list, tok)
		if len(list) > maxTokens {
			list = list[len(list)-maxTokens:]
		}
		if r.tokens.CompareAndSwap(old, &list) {
			return
		}
	}
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
	// A header's value: a server may quote the credentials alone ("invalid token
	// T" of "Bearer T"), or, for basic auth, decoded: each word after the scheme
	// is a secret too.
	addHeader := func(v string) {
		add(v)
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
	// Credentials in an argument or an environment value, written as in a header
	// ("Bearer T", "Authorization: Bearer T", "Authorization:Basic B"): taken as
	// a header's value is. Nothing else of such a text is split into words.
	addCredentials := func(v string) {
		if name, rest, ok := strings.Cut(v, ":"); ok && isHeaderName(name) {
			v = rest
		}
		v = strings.TrimSpace(v)
		if scheme, _, ok := strings.Cut(v, " "); ok && slices.ContainsFunc([]string{"bearer", "basic", "token", "apikey"}, func(s string) bool { return strings.EqualFold(s, scheme) }) {
			addHeader(v)
		}
	}
	// A URL's user info and query values.
	addURL := func(u *url.URL) {
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
	}
	if c.Stdio != nil {
		for _, v := range c.Stdio.Env {
			add(v)
			addCredentials(v) // AUTH_HEADER="Bearer T", for an argument "Authorization:${AUTH_HEADER}"
		}
		// Arguments carry tokens as often as the environment does: each
		// whole, and the value of --flag=value.
		// An argument may also be a header line (mcp-remote's --header
		// "Authorization: Bearer T") or a URL with credentials, which a server
		// quotes in part ("invalid token T"): their secrets are taken as a
		// config's headers' and URL's are.
		for _, a := range c.Stdio.Args {
			add(a)
			vals := []string{a}
			if strings.HasPrefix(a, "-") {
				if _, v, ok := strings.Cut(a, "="); ok {
					add(v)
					vals = append(vals, v)
				}
			}
			for _, v := range vals {
				addCredentials(v)
				if strings.Contains(v, "://") {
					if u, err := url.Parse(v); err == nil {
						addURL(u)
					}
				}
			}
		}
	}
	if h := c.httpConfig(); h != nil {
		if h.Auth != nil {
			add(h.Auth.ClientSecret)
		}
		for _, v := range h.Headers {
			addHeader(v)
		}
		if u, err := url.Parse(h.URL); err == nil {
			if safe := safeURL(h.URL); safe != h.URL {
				pairs = append(pairs, pair{h.URL, safe})
			}
			addURL(u)
		} else {
			add(h.URL)
		}
	}
	if len(pairs) == 0 {
		if h := c.httpConfig(); h != nil && h.Auth != nil {
			return &redactor{} // for the tokens the session will send
		}
		return nil
	}
	// At each position the replacer tries the old strings in argument order:
	// longest first, so that a secret containing another is removed whole.
	slices.SortStableFunc(pairs, func(a, b pair) int { return cmp.Compare(len(b.old), len(a.old)) })
	args := make([]string, 0, 2*len(pairs))
	for _, p := range pairs {
		args = append(args, p.old, p.new)
	}
	return &redactor{r: strings.NewReplacer(args...), longest: len(pairs[0].old)}
}

// isHeaderName reports whether s could name an HTTP header (letters, digits, '-'
// and '_').
func isHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

// scrub returns s without the secrets. A nil redactor returns s.
func (r *redactor) scrub(s string) string {
	if r == nil {
		return s
	}
	if r.r != nil {
		s = r.r.Replace(s)
	}
	if toks := r.tokens.Load(); toks != nil {
		for _, tok := range *toks {
			for _, t := range []string{tok, url.QueryEscape(tok)} {
				s = strings.ReplaceAll(s, t, redacted)
			}
		}
	}
	return s
}

// capped returns s without the secrets, cut after max bytes (at a rune
// boundary) with "… (N bytes more)". Only a prefix of a long s is scrubbed:
// one long enough that every secret starting in what is shown is replaced
// whole (a secret that the cut splits is never shown in part).
func (r *redactor) capped(s string, max int) string {
	longest := 0
	if r != nil {
		longest = r.longest
		if toks := r.tokens.Load(); toks != nil {
			for _, tok := range *toks {
				if n := len(url.QueryEscape(tok)); n > longest {
					longest = n
				}
			}
		}
	}
	// Each secret is replaced by len(redacted) bytes: max bytes of output
	// come from at most max*longest/len(redacted) bytes of input.
	n := max + 2*longest + utf8.UTFMax
	if longest > len(redacted) {
		n = max*(longest/len(redacted)+1) + 2*longest + utf8.UTFMax
	}
	whole := s
	rest := 0
	if len(s) > n {
		s, rest = s[:n], len(s)-n
	}
	s = r.scrub(s)
	if rest > 0 && len(s) < max+utf8.UTFMax {
		// Secrets shrank the prefix below what is shown (or it ends inside
		// a rune there): scrub the whole text.
		s, rest = r.scrub(whole), 0
	}
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "… (" + strconv.Itoa(len(s)-cut+rest) + " bytes more)"
}

// tail returns a stdio child's stderr tail as Error.StderrTail keeps it:
// scrubbed and, if bytes were dropped before it, started after a line break
// (and past the longest secret's length, so that a secret cut in two by the
// drop cannot show in part).
func (r *redactor) tail(s string, truncated bool) string {
	if !truncated {
		return r.scrub(s)
	}
	skip := 0
	if r != nil && r.longest > 1 {
		skip = min(len(s), r.longest-1)
	}
	if i := strings.IndexByte(s[skip:], '\n'); i >= 0 && i < len(s)-skip-1 {
		skip += i + 1
	}
	for skip < len(s) && !utf8.RuneStart(s[skip]) {
		skip++
	}
	return "…" + r.scrub(s[skip:])
}
