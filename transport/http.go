package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// MaxResponseBody is the most bytes a session reads of one HTTP response body
// that is not an event stream (a JSON answer, an error page): far above any
// real message, it stops a server that sends a body that never ends from
// growing the client's memory without bound (the SDK reads such bodies
// whole). Reading past it fails with ErrResponseTooLarge, which fails the
// request (the SDK may keep only the error's text).
//
// Event streams (text/event-stream) are not capped in total: a stream lives
// as long as its session and carries any number of messages. The SDK bounds
// each of their events instead (mcp.DefaultMaxEventSize, 16 MiB).
const MaxResponseBody = 32 << 20

// MaxErrorBody is the most bytes a session reads of the body of a non-2xx
// HTTP answer (an error page, a proxy's complaint). The SDK reads such a body
// whole and copies it into the error it returns, more than once, so a cap as
// large as MaxResponseBody would let one endless error page cost hundreds of
// MiB; a megabyte holds any error a person would read.
const MaxErrorBody = 1 << 20

// ErrResponseTooLarge is the error of a read past MaxResponseBody (or, for a
// non-2xx answer, MaxErrorBody).
var ErrResponseTooLarge = errors.New("the HTTP response body is too large")

// maxIdlePerSession bounds the idle connections a session's own transport keeps
// to its server: as many as the calls a busy client makes at once.
const maxIdlePerSession = 64

// newHTTPClient returns the client a session uses for h: the caller's client
// (or a private transport) wrapped in a lifeRoundTripper. own is the private
// transport, nil if the caller gave a client. log receives the panics of the
// caller's RoundTripper (see callerTripper).
func newHTTPClient(life context.Context, h *HTTP, az authorizer, red *redactor, log *slog.Logger) (client *http.Client, own *http.Transport) {
	var base http.RoundTripper
	if h.Client != nil {
		client = callersClient(h.Client, "HTTP.Client", log, red) // a copy: the caller's client is not modified
		base = client.Transport
	} else {
		if dt, ok := http.DefaultTransport.(*http.Transport); ok {
			own = dt.Clone()
		} else {
			own = &http.Transport{Proxy: http.ProxyFromEnvironment}
		}
		// A session talks to one server, its calls many at a time: net/http's
		// default keeps 2 idle connections a host, and closed all but 2 after
		// each burst (800 calls 16 at a time opened 686 connections, each left
		// in TIME_WAIT). Idle ones close after IdleConnTimeout (90 s).
		own.MaxIdleConns = max(own.MaxIdleConns, maxIdlePerSession)
		own.MaxIdleConnsPerHost = maxIdlePerSession
		client = &http.Client{}
		base = own
	}
	origin := ""
	if u, err := url.Parse(h.URL); err == nil {
		origin = originOf(u)
	}
	client.Transport = &lifeRoundTripper{base: base, life: life, headers: h.Headers, origin: origin, maxBody: MaxResponseBody, auth: az, red: red}
	return client, own
}

// callersClient returns a shallow copy of c, a caller's client (field names it
// in the config: "HTTP.Client"), whose code is called guarded: its RoundTripper
// through a callerTripper; its CheckRedirect and Jar, which net/http's Client
// calls above the RoundTripper (on the go-sdk's goroutines, an OAuth client's
// renewal), so that a panic there is as a RoundTripper's (it ended the process,
// or wedged a call's connection): CheckRedirect's fails its request, the Jar's
// (whose methods have no error) has the request go without its cookies, or
// them not kept.
func callersClient(c *http.Client, field string, log *slog.Logger, red *redactor) *http.Client {
	out := *c
	out.Transport = callersTripper(c, field, log, red)
	if next := c.CheckRedirect; next != nil {
		out.CheckRedirect = func(req *http.Request, via []*http.Request) error {
			return guardedErr(log, red, field+".CheckRedirect", "CheckRedirect", func() error { return next(req, via) })
		}
	}
	if c.Jar != nil {
		out.Jar = &callerJar{jar: c.Jar, field: field + ".Jar", log: log, red: red}
	}
	return &out
}

// callerJar is a caller's cookie jar, called guarded (see callersClient).
type callerJar struct {
	jar   http.CookieJar
	field string
	log   *slog.Logger
	red   *redactor
}

func (j *callerJar) SetCookies(u *url.URL, cookies []*http.Cookie) {
	_ = guardedErr(j.log, j.red, j.field, "SetCookies", func() error {
		j.jar.SetCookies(u, cookies)
		return nil
	})
}

func (j *callerJar) Cookies(u *url.URL) []*http.Cookie {
	cookies, _ := guarded(j.log, j.red, j.field, "Cookies", func() ([]*http.Cookie, error) { return j.jar.Cookies(u), nil })
	return cookies
}

// callersTripper returns the RoundTripper of c, a caller's client (field names
// it in the config: "HTTP.Client"), called through a callerTripper.
func callersTripper(c *http.Client, field string, log *slog.Logger, red *redactor) http.RoundTripper {
	base := c.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	return &callerTripper{base: base, field: field, log: log, red: red}
}

// callerTripper calls a RoundTripper of the caller's (HTTP.Client's, whose
// requests a session sends; Auth.Client's, an OAuth client's): a panic there, in
// RoundTrip or in the body of the response it returned, is the request's error
// (a *panicError, which names it), its stack logged (an error, once per panic),
// the request's body closed as RoundTrip must. This is where the caller's code is
// called, the one place that sees every request, and a request failed so leaves
// the go-sdk (and the OAuth client) as any failed request does: on a session,
// its connection is lost, as when the server cannot be reached. Above it nothing
// recovered such a panic in every case: on a call's POST it went up the caller's
// goroutine through the go-sdk's jsonrpc2 write, past the line that takes the
// call off the connection's calls in flight, and the connection, though the
// call's error was had (the SDK's panic recovered, see unreadable), waited at its
// Close for that call for ever: the session's Close returned at its context's
// end, forced, a goroutine left. On the go-sdk's own goroutines (the event
// stream's GET, the DELETE at close, the reading of a body) and an OAuth client's
// renewal it ended the process. A panic is not the caller's intended answer, but
// ending the process (or wedging its connection) for one request's bug is what
// "nothing wedges" rules out; its stack in the log says where it is.
type callerTripper struct {
	base  http.RoundTripper
	field string       // the config's field that gave it: "HTTP.Client", "Auth.Client"
	log   *slog.Logger // nil: nothing logged
	red   *redactor    // scrubs the panic's value in the log (errors are scrubbed where they are shown)
}

func (c *callerTripper) RoundTrip(r *http.Request) (resp *http.Response, err error) {
	defer func() {
		if v := recover(); v != nil {
			if r.Body != nil {
				_ = r.Body.Close()
			}
			resp, err = nil, c.panicked(v, "RoundTrip", r.Method)
		}
	}()
	resp, err = c.base.RoundTrip(r)
	if resp != nil && resp.Body != nil && resp.Body != http.NoBody {
		resp.Body = &callerBody{ReadCloser: resp.Body, c: c, method: r.Method}
	}
	return resp, err
}

// panicked returns the error of a panic (v) of the caller's code in where (a
// method's name), for a request of method, and logs it with its stack.
func (c *callerTripper) panicked(v any, where, method string) error {
	return callerPanicked(c.log, c.red, c.field, where, method, v)
}

// callerPanicked returns the error of a panic (v) of the caller's code (field
// names it in the config: "HTTP.Client", "Auth.Token"; where is the method that
// panicked), for a request of method, and logs it with its stack (at error, to
// log if not nil). Called in the deferred recover, so that the stack is the
// panic's.
//
// The panic's value may quote anything (a URL, a header, a request's form with
// its refresh token) at any length: its text is scrubbed of red's secrets and
// capped (MaxErrorText) here, once, for every place the error goes (an OAuth
// client's last error and log are not an *Error's, scrubbed where shown). The
// stack names functions and lines; the runtime bounds it (100 frames).
func callerPanicked(log *slog.Logger, red *redactor, field, where, method string, v any) error {
	pe := &panicError{field: field, where: where, value: v, text: red.capped(fmt.Sprint(v), MaxErrorText)}
	if log != nil {
		log.Error("mcpfsm: the caller's code panicked", "field", field, "in", where, "method", method, "error", pe.Error(), "stack", string(debug.Stack()))
	}
	return pe
}

// callerBody is the body of a response of a callerTripper's: a panic in its Read
// or Close (on the go-sdk's goroutine that reads an event stream or an answer, it
// ended the process) is their error, and every later Read's.
type callerBody struct {
	io.ReadCloser
	c      *callerTripper
	method string
	err    error // the panic's, once there was one
}

func (b *callerBody) Read(p []byte) (n int, err error) {
	if b.err != nil {
		return 0, b.err
	}
	defer func() {
		if v := recover(); v != nil {
			b.err = b.c.panicked(v, "a response body's Read", b.method)
			n, err = 0, b.err
		}
	}()
	return b.ReadCloser.Read(p)
}

func (b *callerBody) Close() (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = b.c.panicked(v, "a response body's Close", b.method)
		}
	}()
	return b.ReadCloser.Close()
}

// panicError is the error of a request whose RoundTripper, the caller's,
// panicked (see callerTripper); a panic with an error is unwrapped to it.
type panicError struct {
	field string // the config's field that gave the RoundTripper
	where string // "RoundTrip", "a response body's Read"
	value any
	text  string // value's, scrubbed and capped (see callerPanicked)
}

func (e *panicError) Error() string {
	if strings.HasSuffix(e.field, "Client") {
		return fmt.Sprintf("the RoundTripper of %s panicked (in %s): %s", e.field, e.where, e.text)
	}
	return fmt.Sprintf("%s panicked (in %s): %s", e.field, e.where, e.text)
}

func (e *panicError) Unwrap() error {
	err, _ := e.value.(error)
	return err
}

// originOf returns u's scheme, host and port (the scheme's default port if
// none is given), lower-cased: "https://example.com:443".
func originOf(u *url.URL) string {
	scheme := strings.ToLower(u.Scheme)
	port := u.Port()
	if port == "" {
		switch scheme {
		case "http":
			port = "80"
		case "https":
			port = "443"
		}
	}
	return scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// lifeRoundTripper ties every request to the session's life: when the session
// is torn down by force, every request in flight (a call's POST, the event
// stream's GET, the closing DELETE) is aborted. It also sets the configured
// headers on requests for the configured URL's origin: its scheme, host and
// port (not on a redirect anywhere else, in particular not on a downgrade
// from https to http on the same host and port), over any the client set (an
// Authorization header wins over URL userinfo), except the protocol's own
// headers, which the SDK owns. It caps what is read of a response body (see
// MaxResponseBody).
type lifeRoundTripper struct {
	base    http.RoundTripper
	life    context.Context
	headers map[string]string
	origin  string // originOf the configured URL
	maxBody int64  // MaxResponseBody; smaller in tests
	auth    authorizer
	red     *redactor    // learns the bearer tokens sent, which errors must not quote
	log     *slog.Logger // nil: nothing logged
	order   *order       // the session's, whose marks its SSE bodies hand out (order.go); nil: none
	listens *listens     // the session's, shown its listens and their first words (subscribe.go); nil: none
	// lost, if set, is told when the server ends a listen it had agreed to
	// (see Session.listenLost), unless the listen's caller or the session's life
	// ended it.
	lost func(error)
	// discoverErr is why a server/discover got no answer that says anything of
	// the protocol (see Session.fellBack), if one did not.
	discoverErr atomic.Pointer[error]
}

// RoundTrip implements http.RoundTripper. With an authorizer, a request to the
// configured origin carries its bearer token; a 401 or 403 answer is taken to
// the authorizer once, and the request sent again if it got better credentials
// (the server ran nothing); a 403 insufficient_scope that answers the new
// credentials of a 401's is taken to it once more (a step-up). A refusal that
// stands is returned as an error (a *refusedError), never as the answer: the
// SDK would take a 401 answer to a call for the end of the whole connection.
func (rt *lifeRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if rec, _ := req.Context().Value(statusKey{}).(*answers); rec != nil && req.Method == http.MethodPost {
		// The SDK sends a call's notifications/cancelled with the values of the
		// call's context: a later POST under the call's record is that (on
		// 2026-07-28 it says so in Mcp-Method).
		if m := req.Header.Get("Mcp-Method"); m == "notifications/cancelled" || m == "" && rec.sent.Load() {
			defer rec.cancelWritten()
		}
	}
	return rt.roundTrip(req)
}

// roundTrip is RoundTrip once it has looked for a call's cancel (see pendingCancels).
func (rt *lifeRoundTripper) roundTrip(req *http.Request) (*http.Response, error) {
	if rt.auth == nil || originOf(req.URL) != rt.origin {
		return rt.send(req, "")
	}
	ctx := req.Context()
	// What the authorizer does for the request (a refresh waited for, an
	// authorization) ends with the session's life too: a forced close (or a lost
	// session) does not wait for a slow authorization server.
	actx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	defer context.AfterFunc(rt.life, func() { stop(context.Cause(rt.life)) })()
	rec, _ := ctx.Value(statusKey{}).(*answers)
	if rec != nil && !rec.dialed.Load() {
		if p := rec.authFailed.Load(); p != nil {
			// An authorization made for an earlier request under the record
			// failed, and no answer since accepted credentials: that stands for
			// the record (a dial's spans all its requests), nothing is sent.
			// The go-sdk falls back from server/discover to initialize on any
			// error: the initialize's own authorization was a second login
			// prompt in one dial, and if that worked, a session on the older
			// protocol from a server that speaks 2026-07-28.
			return nil, *p
		}
	}
	tok, gen := rt.auth.bearer(actx)
	resp, err := rt.send(req, tok)
	if err != nil || !refusesCredentials(resp.StatusCode) {
		rt.accepted(actx, rec, resp, err, gen)
		return resp, err
	}
	status, ch := resp.StatusCode, ParseChallenge(resp.Header)
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	var aerr error
	for stepUp := false; ; stepUp = true {
		aerr = rt.auth.authorize(actx, req, resp, gen) // closes resp.Body
		if aerr == nil && !replayable {
			aerr = errors.New("new credentials were had, but the request could not be sent again")
		}
		if aerr != nil {
			break
		}
		again := req.Clone(ctx)
		if req.GetBody != nil {
			if again.Body, err = req.GetBody(); err != nil {
				return nil, err
			}
		}
		if rec != nil {
			rec.status.CompareAndSwap(int32(status), 0) // answered again below
		}
		tok, gen = rt.auth.bearer(actx)
		resp, err = rt.send(again, tok)
		if err != nil || !refusesCredentials(resp.StatusCode) {
			rt.accepted(actx, rec, resp, err, gen)
			return resp, err
		}
		first := status
		status, ch = resp.StatusCode, ParseChallenge(resp.Header)
		if !stepUp && first == http.StatusUnauthorized && status == http.StatusForbidden && ch.Error == "insufficient_scope" {
			// The new credentials are taken, and the server asks for more
			// scope than its 401 named: the step-up is asked for, once. (It
			// was the end of the request's authorizations: a dial failed as
			// unauthorized, final for it, its login's credentials unsaved.)
			continue
		}
		drainClose(resp.Body)
		aerr = errors.New("the server refused the request again with new credentials")
		break
	}
	if ua, su := (*authUnavailable)(nil), (*storeUnanswered)(nil); errors.As(aerr, &ua) || errors.As(aerr, &su) {
		// Nothing was refused for good: the request failed as if its server
		// could not be reached, and the server ran nothing.
		err := error(&unavailableError{aerr})
		if rec != nil {
			rec.status.CompareAndSwap(int32(status), 0)
			if req.Method == http.MethodPost {
				rec.sent.Store(false)
			}
			rec.authFailed.CompareAndSwap(nil, &err)
		}
		return nil, err
	}
	refused := &refusedError{&AuthError{Status: status, Challenge: ch, Err: aerr}}
	if rec != nil {
		rec.status.Store(int32(status))
		rec.refused.CompareAndSwap(nil, refused)
		if !errors.Is(aerr, errForbidden) { // (no authorization was tried: the request is not allowed)
			err := error(refused)
			rec.authFailed.CompareAndSwap(nil, &err)
		}
	}
	return nil, refused
}

// accepted tells the authorizer that a request's credentials worked, if the server
// answered it with a 2xx (the credentials of a new authorization are then saved),
// and forgets the refusal its record held: it no longer stands.
func (rt *lifeRoundTripper) accepted(ctx context.Context, rec *answers, resp *http.Response, err error, gen uint64) {
	if err != nil || resp.StatusCode < 200 || resp.StatusCode > 299 {
		return
	}
	if rec != nil {
		rec.refused.Store(nil)
		rec.authFailed.Store(nil)
	}
	rt.auth.worked(ctx, gen)
}

// answerGrace is how long the body of a JSON answer under way may still take once its
// caller has given up. The go-sdk's client fails the whole session when it cannot read
// such a body (an event stream it gives up alone): cut at the caller's deadline, a
// late answer broke the session under every other call, and counted as a failure.
// The rest of an event stream whose answer has been read (its end, which the go-sdk's
// client reads to the end before it closes the body) has as long.
const answerGrace = 5 * time.Second

// refusesCredentials reports whether an HTTP status refuses the request's credentials.
func refusesCredentials(status int) bool {
	return status == http.StatusUnauthorized || status == http.StatusForbidden
}

// send sends req, with the bearer token tok if not empty: see RoundTrip.
func (rt *lifeRoundTripper) send(req *http.Request, tok string) (*http.Response, error) {
	// The request ends with its caller's context or the session's life, whichever
	// ends first, with its cause. Detached from the caller's (values kept) so that a
	// JSON answer under way can outlive the caller (see answerGrace).
	caller := req.Context()
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(caller))
	stopLife := context.AfterFunc(rt.life, func() { cancel(context.Cause(rt.life)) })
	stopCaller := context.AfterFunc(caller, func() { cancel(context.Cause(caller)) })
	release := func() {
		stopLife()
		stopCaller()
		cancel(nil)
	}
	// A RoundTripper must not change the request it is given: the headers are set on
	// a deep copy, and without headers to set a shallow one carries the new context.
	var r *http.Request
	if (len(rt.headers) > 0 || tok != "") && originOf(req.URL) == rt.origin {
		r = req.Clone(ctx)
		for k, v := range rt.headers {
			if !sdkHeaders[http.CanonicalHeaderKey(k)] {
				r.Header.Set(k, v)
			}
		}
		if tok != "" {
			rt.red.remember(tok)
			r.Header.Set("Authorization", "Bearer "+tok)
		}
	} else {
		r = req.WithContext(ctx)
	}
	var listen bool
	var listenID jsonrpc.ID
	if rt.listens != nil && req.Method == http.MethodPost && req.Header.Get("Mcp-Method") == "subscriptions/listen" {
		listenID, listen = rt.listens.wroteBody(req)
	}
	rec, _ := req.Context().Value(statusKey{}).(*answers)
	post := rec != nil && req.Method == http.MethodPost
	if post {
		rec.sent.Store(true) // under way: from now on it may reach the server
	}
	resp, err := rt.base.RoundTrip(r)
	if req.Header.Get("Mcp-Method") == "server/discover" {
		rt.discoverFailed(resp, err)
	}
	if err != nil {
		if post && errors.Is(err, syscall.ECONNREFUSED) {
			rec.sent.Store(false)
		}
		if listen {
			rt.listens.failed(listenID, err)
		}
		release()
		return nil, err
	}
	if rec != nil && (resp.StatusCode < 200 || resp.StatusCode > 299) {
		rec.status.Store(int32(resp.StatusCode))
		if post && resp.StatusCode >= 400 && resp.StatusCode <= 499 {
			// The server did not accept the message (the spec's "cannot accept
			// the input": a 404 for a session it does not know, a 400 that some
			// servers send for the same, a 413, a 429): it ran nothing.
			rec.sent.Store(false)
		}
	}
	body := &releasingBody{ReadCloser: resp.Body, release: release, left: -1}
	ct := resp.Header.Get("Content-Type")
	if !isEventStream(ct) {
		body.left = rt.maxBody
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			body.left = min(rt.maxBody, MaxErrorBody)
		}
	}
	sse := isEventStream(ct)
	if mt, _, _ := mime.ParseMediaType(ct); (mt == "application/json" || sse) && post &&
		resp.StatusCode >= 200 && resp.StatusCode <= 299 && stopCaller() {
		// An answer under way, as one JSON message: the go-sdk's client fails the
		// whole session when it cannot read such a body, so the caller's end (its
		// call has returned) gives the body answerGrace more rather than cut it.
		// So does an event stream whose answer has been read: what is left is its
		// end, which the go-sdk's client reads before it closes the body; cut (a
		// caller's context commonly ends as its call returns), the connection was
		// not reused (one call in 17 opened a new one). An event stream whose
		// answer has not come is cut at once: the call was given up (on 2026-07-28
		// that is how the server learns of it).
		stopCaller = context.AfterFunc(caller, func() {
			if sse && !rec.answered.Load() {
				cancel(context.Cause(caller))
				return
			}
			t := time.NewTimer(answerGrace)
			defer t.Stop()
			select {
			case <-t.C:
				cancel(context.Cause(caller))
			case <-ctx.Done(): // read, or the session's life ended
			}
		})
	}
	if rec != nil && resp.StatusCode >= 200 && resp.StatusCode <= 299 && resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusNoContent {
		switch mt, _, _ := mime.ParseMediaType(ct); {
		case mt == "application/json":
			body.sniff = rec // the first byte tells JSON from garbage
			if post {
				body.whole = rec // read whole: the server answered
			}
		case isEventStream(ct):
		case resp.ContentLength != 0:
			rec.notMCP.Store(true)
		}
	}
	resp.Body = body
	switch {
	case rt.order != nil && resp.StatusCode >= 200 && resp.StatusCode <= 299 && isEventStream(ct):
		m := newSSEMarks(body, rt.order)
		if listen {
			m.listens = rt.listens
			if lost := rt.lost; lost != nil {
				m.lost = func(err error) {
					if caller.Err() == nil && rt.life.Err() == nil {
						lost(err)
					}
				}
			}
		}
		if post {
			m.answered = rec // a POST's stream carries its request's answer
		}
		resp.Body = m
	case listen && (resp.StatusCode < 200 || resp.StatusCode > 299):
		// A refusal (status 400 and the error, from the go-sdk's server): read
		// whole here, within MaxErrorBody, and handed on as it came. One that
		// is not a JSON-RPC message fails the listen with its status.
		data, err := io.ReadAll(body)
		body.Close()
		if msg, derr := decodeMessage(data); derr == nil {
			rt.listens.read(msg)
		} else {
			rt.listens.failed(listenID, fmt.Errorf("the server answered subscriptions/listen with HTTP status %d", resp.StatusCode))
		}
		resp.Body = &heldBody{r: bytes.NewReader(data), err: err}
	case listen && !isEventStream(ct):
		// One JSON message, which a server may send only when the listen ends:
		// shown to the listens when the SDK's reader has read it whole.
		resp.Body = &listenAnswer{ReadCloser: body, l: rt.listens}
	}
	return resp, nil
}

// discoverFailed notes why a server/discover got no answer that says anything of
// the protocol: no answer at all, or a status of the way there (408, 429, 5xx). A
// status whose body is the server's JSON-RPC error "method not found" is an answer
// (a server on an older protocol that sends every error with a 5xx): the body is
// read, within MaxErrorBody, and handed on as it came.
func (rt *lifeRoundTripper) discoverFailed(resp *http.Response, err error) {
	switch {
	case err != nil:
	case resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		if unknownMethod(resp) {
			return
		}
		err = fmt.Errorf("HTTP status %d", resp.StatusCode)
	default:
		return
	}
	rt.discoverErr.Store(&err)
}

// unknownMethod reports whether resp's body is a JSON-RPC error "method not found";
// it reads at most MaxErrorBody of it, and leaves resp.Body to read as it came.
func unknownMethod(resp *http.Response) bool {
	data, rerr := io.ReadAll(io.LimitReader(resp.Body, MaxErrorBody))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(&heldBody{r: bytes.NewReader(data), err: rerr}, resp.Body), resp.Body}
	msg, derr := decodeMessage(data)
	r, ok := msg.(*jsonrpc.Response)
	var werr *jsonrpc.Error
	return derr == nil && ok && errors.As(r.Error, &werr) && werr.Code == jsonrpc.CodeMethodNotFound
}

// listenAnswer is the body of a JSON (not SSE) 2xx answer to a subscriptions/listen
// POST: its one message, once read whole by the SDK, is shown to the listens.
type listenAnswer struct {
	io.ReadCloser
	l    *listens
	data []byte
	done bool
}

// Read implements io.Reader.
func (a *listenAnswer) Read(p []byte) (int, error) {
	n, err := a.ReadCloser.Read(p)
	if !a.done {
		if len(a.data)+n > maxMarkedEvent {
			a.done, a.data = true, nil // too long to be an answer worth reading
		} else {
			a.data = append(a.data, p[:n]...)
		}
	}
	if err == io.EOF && !a.done {
		a.done = true
		if msg, derr := decodeMessage(a.data); derr == nil {
			a.l.read(msg)
		}
		a.data = nil
	}
	return n, err
}

// heldBody is a response body read ahead: its bytes, then the error that ended the
// read (io.EOF if none).
type heldBody struct {
	r   *bytes.Reader
	err error
}

// Read implements io.Reader.
func (b *heldBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF && b.err != nil {
		err = b.err
	}
	return n, err
}

// Close implements io.Closer.
func (b *heldBody) Close() error { return nil }

// isEventStream reports whether a Content-Type is text/event-stream.
func isEventStream(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "text/event-stream"
}

// sdkHeaders are the headers the SDK sets for the protocol's sake.
var sdkHeaders = map[string]bool{
	"Accept":               true,
	"Content-Type":         true,
	"Last-Event-Id":        true,
	"Mcp-Method":           true,
	"Mcp-Name":             true,
	"Mcp-Protocol-Version": true,
	"Mcp-Session-Id":       true,
}

// statusKey keys the context value in which a request of the session
// records what the HTTP answers to it said (see Error.HTTPStatus and
// Error.Sent): the SDK sends a call's HTTP requests with the call's
// context.
type statusKey struct{}

// answers is what the answers to one request of the session said: over HTTP, its
// status and body; over any transport, whether the server answered it.
type answers struct {
	status   atomic.Int32 // the status of a non-2xx answer, if any
	sent     atomic.Bool  // a POST may have reached the server (see Error.Sent)
	notJSON  atomic.Bool  // an answer said it was JSON and was not (see Error.NotJSON)
	notMCP   atomic.Bool  // a 2xx answer was neither JSON nor an event stream (see Error.NotMCP)
	answered atomic.Bool  // the server's JSON-RPC answer came (see Error.Answered)
	// refused is the first refusal of the request's credentials (an authorization
	// that failed) since a 2xx answer to it, if any: a dial fails with it (see
	// Dial), not with a later one.
	refused atomic.Pointer[refusedError]
	// authFailed is the error of the first authorization (or renewal) made for
	// one of the request's HTTP requests that failed, a refusal or no answer
	// from the authorization server, since a 2xx answer: the record's later
	// HTTP requests are not sent, and fail with it (see
	// lifeRoundTripper.roundTrip), until dialed. A dial's record spans its
	// requests: one dial asks the user to log in at most once, and never
	// settles on an older protocol than its server speaks for want of
	// credentials.
	authFailed atomic.Pointer[error]
	// dialed is set on a dial's record once Dial returns. The go-sdk keeps the
	// values of the dial's context for the connection's own requests (the
	// standalone event stream and its reconnects, the answers to the server's
	// requests, the closing DELETE): authFailed holds none of them back. (It
	// once did: one refresh that got no answer failed every later answer to a
	// ping of the server's, unsent, for the rest of the session.)
	dialed atomic.Bool
	// cancel is 1 once the request's caller gave up and its notifications/cancelled
	// is awaited, 2 once that was written; pending counts it (see pendingCancels).
	cancel  atomic.Int32
	pending *pendingCancels
	// id is the request's JSON-RPC ID, on a connection that tells its answer by it
	// (endConn); set and read on the request's goroutine.
	id    jsonrpc.ID
	hasID bool
	// late, once the request's caller has given up on it, is what watches for
	// the server's answer to it (late.go).
	late atomic.Pointer[lateWatch]
}

// withStatus returns ctx with a place for what the answers to the request made
// under it say (its HTTP status, whether the server answered). A session's request
// calls Session.done with it.
func withStatus(ctx context.Context) (context.Context, *answers) {
	rec := new(answers)
	return context.WithValue(ctx, statusKey{}, rec), rec
}

// releasingBody releases its request's context when it is closed, and fails a
// read past left bytes (unless left is negative) with ErrResponseTooLarge.
type releasingBody struct {
	io.ReadCloser
	once    sync.Once
	release func()
	left    int64    // bytes that may still be read; negative: no limit
	sniff   *answers // while set, the body is JSON until its first byte says otherwise
	whole   *answers // set: told the body was read whole (a POST's JSON answer)
}

// Read reads the body, up to the limit.
func (b *releasingBody) Read(p []byte) (int, error) {
	n, err := b.read(p)
	if err == io.EOF && b.whole != nil {
		b.whole.answered.Store(true)
		b.whole = nil
	}
	if b.sniff != nil {
		for _, c := range p[:n] {
			switch c {
			case ' ', '\t', '\r', '\n':
				continue
			case '{', '[':
			default:
				b.sniff.notJSON.Store(true)
			}
			b.sniff = nil
			break
		}
	}
	return n, err
}

func (b *releasingBody) read(p []byte) (int, error) {
	if b.left < 0 {
		return b.ReadCloser.Read(p)
	}
	if b.left == 0 {
		// At the limit: the body may end here exactly; one byte more is
		// one too many.
		var one [1]byte
		n, err := b.ReadCloser.Read(one[:])
		if n > 0 {
			return 0, ErrResponseTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// Close closes the body and releases the request's context.
func (b *releasingBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.release)
	return err
}
