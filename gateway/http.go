package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"hash/crc32"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// HTTPOptions configure the gateway's streamable HTTP handler.
type HTTPOptions struct {
	// Token, if set, is the bearer token every request must carry
	// (Authorization: Bearer TOKEN); others get 401.
	Token string
	// SessionTimeout closes a front session that has sent no request for this long;
	// 0 keeps idle sessions for ever.
	SessionTimeout time.Duration
	// MaxSessions is the most stateful sessions and 2026-07-28
	// subscriptions/listen streams open at once (a stream is held open for as
	// long as its client listens): a request that would open one more gets 503.
	// 0 means DefaultMaxSessions; negative, no bound.
	MaxSessions int
	// BodyMemory is how many bytes of request bodies are held at once, each
	// charged as it arrives and held until its request has been answered: a
	// request finding no room waits for it, up to 10 s, then gets 503. 0 means DefaultBodyMemory; negative, no
	// bound. (One body is at most mcp.DefaultMaxRequestBodyBytes: 413 beyond.)
	BodyMemory int64
	// WriteTimeout bounds how long a client may leave the gateway's writes to it
	// waiting: each 64 KiB of an answer or of a stream must be taken in within it,
	// or the client's connection is cut. A client that stops reading (its buffers
	// full) would otherwise hold for ever the goroutine writing to it, and with it
	// the notifications every other front session is sent after it. 0 means
	// DefaultWriteTimeout; negative, no bound.
	WriteTimeout time.Duration
	// Heartbeat is how long an event stream (a session's GET, a 2026-07-28
	// listen, a call's answer on its way) may go without a byte: past it the
	// gateway writes an SSE comment, which clients skip, so that a proxy that cuts
	// a connection idle for a while (nginx's proxy_read_timeout, 60 s by default)
	// does not cut a stream that has merely had nothing to say. 0 means
	// DefaultHeartbeat; negative, none.
	Heartbeat time.Duration
}

// DefaultWriteTimeout is HTTPOptions.WriteTimeout's default.
const DefaultWriteTimeout = 30 * time.Second

// DefaultHeartbeat is HTTPOptions.Heartbeat's default: below the idle timeouts of
// the usual proxies and load balancers (60 s and more).
const DefaultHeartbeat = 25 * time.Second

// Handler returns an http.Handler that serves the gateway over streamable HTTP:
// stateful sessions (Mcp-Session-Id) for clients on protocol versions before
// 2026-07-28, and stateless requests for clients on 2026-07-28 and later (told apart by
// their Mcp-Protocol-Version header), one server for both. A request whose client goes
// away (a 2026-07-28 one) is cancelled, and with it the backend's call. What the
// front holds for its clients is bounded (o.MaxSessions, o.BodyMemory): past the
// bounds a client gets 503 with Retry-After, a body over the go-sdk's limit 413 (with
// the request's JSON-RPC error, if what was read of it names its ID). A
// POST without a session that is no initialize, only requests a session cannot take
// before it, gets 400 and a JSON-RPC error (-32600). A request whose params the
// go-sdk's server cannot decode gets -32602 naming the field, as over the stdio front
// (transport.ParamsRefusal); a body the stdio front refuses as a line (no JSON, an ID
// the answer would not carry as written, a batch with one ID twice) gets 400 with
// that front's answer, and a
// notification the go-sdk's handler refuses 400 with a JSON-RPC error without ID. A
// backend's own error reaches the client as it was, its code, message and data.
func (g *Gateway) Handler(o HTTPOptions) http.Handler {
	getServer := func(*http.Request) *mcp.Server { return g.server }
	logger := g.log.With("component", "gateway http")
	stateful := mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
		SessionTimeout: o.SessionTimeout, Logger: logger,
	})
	stateless := mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
		Stateless: true, PropagateRequestCancellation: true, Logger: logger,
	})
	lim := newLimits(g.server, o)
	writeTimeout := o.WriteTimeout
	if writeTimeout == 0 {
		writeTimeout = DefaultWriteTimeout
	}
	heartbeat := o.Heartbeat
	if heartbeat == 0 {
		heartbeat = DefaultHeartbeat
	}
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Del(postHeader) // ours alone
		// A POST is numbered: its requests know it by this header (see
		// inflight, passedOn).
		var post string
		if r.Method == http.MethodPost {
			post = strconv.FormatUint(g.inflight.posts.Add(1), 10)
			r.Header.Set(postHeader, post)
			g.passed.open(post)
			defer g.passed.close(post)
		}
		// A stateful session's POST drops the answer to a request its client
		// cancelled (see answerless).
		var session string
		if r.Method == http.MethodPost && !transport.NewProtocol(r.Header.Get("Mcp-Protocol-Version")) {
			session = r.Header.Get("Mcp-Session-Id")
		}
		var dw *deadlineWriter
		if writeTimeout > 0 || r.Method == http.MethodPost {
			dw = &deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), d: writeTimeout, al: &g.answerless,
				posted: r.Method == http.MethodPost, newer: transport.NewProtocol(r.Header.Get("Mcp-Protocol-Version")),
				passed: func(message string) *jsonrpc.Error { return g.passed.take(post, message) }}
			w = dw
		}
		if heartbeat > 0 {
			hw := &heartbeatWriter{ResponseWriter: w, every: heartbeat}
			defer hw.stop() // before the handler returns: no write after it
			w = hw
		}
		if r.Method != http.MethodPost && r.Body != nil && r.Body != http.NoBody {
			// Only a POST carries a message. net/http notices a client gone only
			// once its body has been read, and the SDK reads no other's: a GET
			// declaring a body it never sends would hold its stream for ever.
			http.Error(w, "only a POST carries a body", http.StatusBadRequest)
			return
		}
		charge, err := lim.holdBody(r.Context(), w, r)
		switch {
		case errors.Is(err, errBodyTooLarge):
			var tl *tooLargeError
			errors.As(err, &tl)
			bodyTooLarge(w, tl.answer, lim.maxBody)
			return
		case errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil:
			w.Header().Set("Retry-After", "1")
			http.Error(w, "the gateway holds as many request bodies as it may (BodyMemory, --body-memory): try again", http.StatusServiceUnavailable)
			return
		case err != nil: // the client went away, or its body broke off
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		defer lim.releaseBody(charge)
		if b, ok := r.Body.(*heldBody); ok {
			if answer := transport.RefusedBody(b.data); answer != nil {
				// An ID the go-sdk would answer under another, or a batch with
				// one ID twice: refused as the stdio front refuses it. (A held
				// body is a POST's: any other with a body is refused above.)
				writeAnswer(w, http.StatusBadRequest, answer)
				return
			}
			if dw != nil {
				dw.body = transport.NewPostBody(b.data) // held until the request is served
			}
			if session != "" { // a POST: dw is set
				dw.served = &dw.ownServed
				dw.ownServed = served{session: session, body: b.data}
				g.answerless.serve(dw.served)
				defer g.answerless.end(dw.served) // once its answers are written
				if mayCancel(b.data) && g.hasSession(session) {
					g.answerless.noteCancel(session, b.data) // before the SDK reads it, and cancels
				}
			}
		}
		if transport.NewProtocol(r.Header.Get("Mcp-Protocol-Version")) && r.Header.Get("Mcp-Session-Id") == "" {
			// A listen holds its stream open: it counts as a session would.
			// (The go-sdk refuses a request whose Mcp-Method is not its method's.)
			if r.Method == http.MethodPost && r.Header.Get("Mcp-Method") == "subscriptions/listen" {
				done, ok := lim.openStream()
				if !ok {
					tooMany(w, lim)
					return
				}
				defer done()
			} else if r.Method == http.MethodPost {
				// Close gives its answer time to be written, as a stateful
				// session's POST's (see Close).
				defer g.inflight.postServed()()
			}
			stateless.ServeHTTP(w, r)
			return
		}
		if r.Method == http.MethodDelete {
			// The client ends its session: its requests in flight are cancelled
			// (the SDK's close of the session, and the DELETE, wait for them).
			if id := r.Header.Get("Mcp-Session-Id"); id != "" && g.hasSession(id) {
				g.inflight.sessionDeleted(id)
			}
		}
		if r.Method != http.MethodPost {
			stateful.ServeHTTP(w, r)
			return
		}
		if r.Header.Get("Mcp-Session-Id") == "" {
			if refuseUninitialized(w, r) {
				return
			}
			done, ok := lim.openSession()
			if !ok {
				tooMany(w, lim)
				return
			}
			defer done()
			// Once its answer starts, the session it opened (if any) is counted
			// as open: no longer as opening too.
			w = &answerStarts{ResponseWriter: w, started: done}
		}
		// A POST's answer comes on its response. If the client goes away before
		// it (the SDK's server returns then), nobody can receive it: the requests
		// it carried, which know the POST by its header, are cancelled.
		defer g.inflight.postServed()()
		stateful.ServeHTTP(w, r)
		g.inflight.postDone(post, r.Context().Err() != nil)
	})
	if o.Token != "" {
		h = bearer(o.Token, h)
	}
	return h
}

// refuseUninitialized answers a POST that opens a session (no Mcp-Session-Id, a
// protocol before 2026-07-28) with no initialize, but a request a session not yet
// initialized refuses (transport.Uninitialized), and reports whether it did: HTTP
// 400, as MCP asks of a request without a session ID other than initialize, with
// the JSON-RPC error (-32600, under the request's ID) the stdio front gives. The
// go-sdk's handler opened a session for it (one of MaxSessions while it ran), and
// answered HTTP 200 with an error of code 0, no JSON-RPC code.
func refuseUninitialized(w http.ResponseWriter, r *http.Request) bool {
	var data []byte
	if b, ok := r.Body.(*heldBody); ok { // held by holdBody: every POST's body is
		data = b.data
	}
	body := transport.Uninitialized(data)
	if body == nil {
		return false
	}
	writeAnswer(w, http.StatusBadRequest, body)
	return true
}

// writeAnswer answers an HTTP request with a JSON-RPC message of the gateway's own
// (a refusal), with status.
func writeAnswer(w http.ResponseWriter, status int, message []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(message)
}

// bodyTooLarge answers a POST whose body is over limit: HTTP 413, with answer, the
// JSON-RPC error under the request's ID (transport.TooLarge), if what was read of the
// body named it, as the stdio front answers a line too long. The go-sdk's client
// takes such an answer for the failure of that request; at a 413 with a body of plain
// text it ended its whole session (the TypeScript SDK's client fails the request
// either way).
//
// The rest of the body is not read. net/http closes the connection once the answer
// is written (holdBody's reader tells it the body was too large), but as it ends
// the request it first reads up to 256 KiB more of a chunked body, for as long as
// the client takes to send them: a read deadline already past ends that read at
// once.
func bodyTooLarge(w http.ResponseWriter, answer []byte, limit int64) {
	defer func() { _ = http.NewResponseController(w).SetReadDeadline(time.Now()) }()
	if answer == nil {
		http.Error(w, fmt.Sprintf("request body exceeds %d bytes", limit), http.StatusRequestEntityTooLarge)
		return
	}
	writeAnswer(w, http.StatusRequestEntityTooLarge, answer)
}

// tooMany answers a request that would open one more session or listen stream
// than lim allows.
func tooMany(w http.ResponseWriter, lim *limits) {
	w.Header().Set("Retry-After", "5")
	http.Error(w, fmt.Sprintf("the gateway has %d sessions and listen streams open, as many as it may (MaxSessions, --max-sessions)", lim.maxSessions), http.StatusServiceUnavailable)
}

// hasSession reports whether id is the ID of a front session of the gateway's.
func (g *Gateway) hasSession(id string) bool {
	for ss := range g.server.Sessions() {
		if ss.ID() == id {
			return true
		}
	}
	return false
}

// postHeader marks the requests of one POST of a stateful session (see Handler).
const postHeader = "Mcpfsm-Gateway-Post"

// bearer requires the token of every request, compared in constant time.
func bearer(token string, next http.Handler) http.Handler {
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The scheme's name is case-insensitive (RFC 9110, 11.1); the token is
		// compared in constant time.
		scheme, got, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="mcpfsm-gateway"`)
			http.Error(w, "unauthorized: this gateway wants a bearer token", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// NginxHashSessionID returns a session ID generator for replica index (0-based, in the
// order of the upstream's server lines) of count replicas behind nginx's
// `hash $http_mcp_session_id;` (not consistent): every ID it mints is one nginx sends
// to this replica while all are up, so a session stays where it was created. nginx
// picks peer ((crc32(key) >> 16) & 0x7fff) % count for an upstream of equal weights;
// a request without the header (initialize) goes round robin.
func NginxHashSessionID(index, count int) (func() string, error) {
	if count < 1 || index < 0 || index >= count {
		return nil, fmt.Errorf("replica %d of %d: want 0 <= index < count", index, count)
	}
	return func() string {
		for {
			id := rand.Text()
			if int((crc32.ChecksumIEEE([]byte(id))>>16)&0x7fff)%count == index {
				return id
			}
		}
	}, nil
}

// ParseReplica reads "I/N" (1-based I, as people count replicas) into a 0-based
// index and a count.
func ParseReplica(s string) (index, count int, err error) {
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			a, e1 := strconv.Atoi(s[:i])
			b, e2 := strconv.Atoi(s[i+1:])
			if e1 != nil || e2 != nil || a < 1 || a > b {
				break
			}
			return a - 1, b, nil
		}
	}
	return 0, 0, fmt.Errorf("replica %q: want I/N, such as 1/2", s)
}

// deadlineWriter gives each write to a client (each writeChunk of it) and each flush
// d to complete: the SDK's writes honour no context, and one to a client that
// reads nothing blocks once the connection's buffers are full. A write past its
// deadline breaks the connection, and the request's context ends. It writes a
// POST's answers, each in one write: those its client cancelled are dropped, and
// the go-sdk's refusal of params is re-coded.
type deadlineWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
	d  time.Duration // none if not positive
	// al, with served (a stateful session's POST: see answerless),
	// says which answers not to write: those of requests the client cancelled.
	al        *answerless
	served    *served
	ownServed served // what served points to: the POST's own, no allocation of its own
	// posted, for a POST, says its answers are looked at: the go-sdk's answer
	// to a request whose params do not decode is re-coded
	// (transport.ParamsRefusal); body is the POST's body, if held. A backend's
	// error of code -32601 gets back the data the go-sdk's encoding dropped,
	// which passed finds by the error's message, its key (transport.PassedAnswer,
	// passedOn).
	posted bool
	body   transport.PostBody
	passed func(message string) *jsonrpc.Error
	// newer: the POST is on protocol 2026-07-28 or later, whose errors go with
	// their HTTP status (see WriteHeader).
	newer bool
	// refused: the go-sdk's handler began a 400 of plain text, whose text Write
	// answers (see WriteHeader).
	refused bool
	// began: the status is written (stream: as an event stream's); reframe: a
	// POST's event stream was given a status again, whose answer Write writes
	// as an event (see WriteHeader).
	began, stream, reframe bool
}

// begin notes that the status is written, and whether it began an event stream.
func (w *deadlineWriter) begin() {
	if !w.began {
		w.began = true
		w.stream = strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream")
	}
}

// WriteHeader writes the status, but for a POST's 400 of plain text: the go-sdk's
// streamable HTTP handler refusing a request that no session saw (a method it does
// not handle, required params missing, an ID on a notification), with http.Error,
// which writes its text next. Write then answers the request as a session does over
// stdio (transport.Unhandled: -32601, or -32600), with 200 (before 2026-07-28, as
// a JSON-RPC error is; the go-sdk's client ended its whole session at a 400 of text)
// or the 400 (on 2026-07-28, whose errors go with their status); a notification
// refused keeps its 400, with the error and no ID (as MCP asks of it).
//
// A status given to a POST's answer begun as an event stream is the go-sdk's for an
// error of a code it gives a status of its own on 2026-07-28 (-32601: 404; -32602:
// 400), which its handler then writes as a JSON body whatever it wrote before: into
// the stream, a line no client reads, the call's answer lost. Write writes that
// answer as an event of the stream instead (see reframe).
func (w *deadlineWriter) WriteHeader(code int) {
	if w.began {
		if w.stream && w.posted {
			w.reframe = true
			return
		}
		w.ResponseWriter.WriteHeader(code) // net/http says it is superfluous
		return
	}
	if code == http.StatusBadRequest && w.posted && w.body.Bytes() != nil && strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
		w.refused = true
		return
	}
	w.begin()
	w.ResponseWriter.WriteHeader(code)
}

const writeChunk = 64 << 10

func (w *deadlineWriter) Write(p []byte) (n int, err error) {
	if w.refused {
		w.refused = false
		status := http.StatusBadRequest
		if answer, call := transport.Unhandled(w.body.Bytes(), string(p)); answer != nil {
			if !w.newer && call {
				status = http.StatusOK
			}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Del("X-Content-Type-Options")
			w.begin()
			w.ResponseWriter.WriteHeader(status)
			if _, err := w.write(answer); err != nil {
				return 0, err
			}
			return len(p), nil
		}
		w.begin()
		w.ResponseWriter.WriteHeader(status)
	}
	reframe := w.reframe
	w.reframe = false
	if w.al.drop(w.served, p) {
		return len(p), nil
	}
	var q []byte // what to write in place of p, if not p
	if w.posted {
		if q = transport.ParamsRefusal(p, &w.body); q == nil {
			q = transport.PassedAnswer(p, w.passed)
		}
	}
	if reframe && bytes.HasPrefix(p, []byte("{")) {
		if q == nil {
			q = p
		}
		q = sseEvent(q)
	}
	if q == nil {
		return w.write(p)
	}
	if _, err := w.write(q); err != nil {
		return 0, err
	}
	return len(p), nil
}

// sseEvent returns message as the go-sdk writes it as an event of a stream.
func sseEvent(message []byte) []byte {
	message = bytes.ReplaceAll(message, []byte("\n"), []byte("\ndata: "))
	out := make([]byte, 0, len("event: message\ndata: \n\n")+len(message))
	out = append(append(out, "event: message\ndata: "...), message...)
	return append(out, "\n\n"...)
}

func (w *deadlineWriter) write(p []byte) (n int, err error) {
	w.begin()
	if w.d <= 0 {
		return w.ResponseWriter.Write(p)
	}
	defer w.rc.SetWriteDeadline(time.Time{})
	for len(p) > 0 {
		k := min(len(p), writeChunk)
		_ = w.rc.SetWriteDeadline(time.Now().Add(w.d))
		m, err := w.ResponseWriter.Write(p[:k])
		n += m
		if err != nil {
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}

func (w *deadlineWriter) FlushError() error {
	w.begin()
	if w.d <= 0 {
		return w.rc.Flush()
	}
	defer w.rc.SetWriteDeadline(time.Time{})
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.d))
	return w.rc.Flush()
}

func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// answerStarts calls started when the answer's header is written (or its body,
// which writes it), before the client can have it.
type answerStarts struct {
	http.ResponseWriter
	started func()
}

func (w *answerStarts) WriteHeader(code int) {
	w.started()
	w.ResponseWriter.WriteHeader(code)
}

func (w *answerStarts) Write(p []byte) (int, error) {
	w.started()
	return w.ResponseWriter.Write(p)
}

func (w *answerStarts) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// A heartbeatWriter writes an SSE comment to an event stream that has written
// nothing for every (see HTTPOptions.Heartbeat). The go-sdk writes each event whole,
// in one Write, so a comment written between two writes falls between two events.
// Its writes and the go-sdk's are one at a time (mu); a comment goes through the
// writers it wraps as the go-sdk's events do (the write deadline's included).
type heartbeatWriter struct {
	http.ResponseWriter
	every time.Duration

	mu     sync.Mutex
	header bool        // the status is written
	timer  *time.Timer // once the status of an event stream is written
	done   bool        // the handler is returning: nothing more is written
}

func (w *heartbeatWriter) WriteHeader(code int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writeHeader(code)
}

// writeHeader writes the status, and arms the heartbeat if it begins an event
// stream. w.mu is held.
func (w *heartbeatWriter) writeHeader(code int) {
	if w.header {
		w.ResponseWriter.WriteHeader(code) // net/http says it is superfluous
		return
	}
	w.header = true
	w.ResponseWriter.WriteHeader(code)
	if code == http.StatusOK && !w.done && strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
		w.timer = time.AfterFunc(w.every, w.beat)
	}
}

func (w *heartbeatWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.header {
		w.writeHeader(http.StatusOK)
	}
	if w.timer != nil {
		w.timer.Reset(w.every)
	}
	return w.ResponseWriter.Write(p)
}

func (w *heartbeatWriter) FlushError() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// beat writes the comment, if the stream is still written.
func (w *heartbeatWriter) beat() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return
	}
	if _, err := w.ResponseWriter.Write(heartbeatComment); err != nil {
		return // the connection is broken: the go-sdk's next write finds it so
	}
	if http.NewResponseController(w.ResponseWriter).Flush() == nil {
		w.timer.Reset(w.every)
	}
}

// heartbeatComment is an SSE comment line and the blank line that ends it.
var heartbeatComment = []byte(":\n\n")

// stop ends the heartbeat, once a beat under way has been written.
func (w *heartbeatWriter) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
	if w.timer != nil {
		w.timer.Stop()
	}
}

func (w *heartbeatWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
