package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Options are the client-side settings of a session.
type Options struct {
	// Client is the client name and version sent in initialize; DefaultClient
	// if nil.
	Client *mcp.Implementation
	// OnEnd is called at most once, on a goroutine of its own, when the
	// connection ends by itself: the stdio child exited, the HTTP event stream
	// failed for good (or the server forgot the session), the SSE stream or
	// in-memory pipe closed. Over streamable HTTP on protocol 2026-07-28, where
	// the server keeps no session, so is a subscriptions/listen stream (a
	// Subscribe's, or the SDK's own for changed lists) that the server agreed
	// to (in its acknowledgment) and then ended: a restarted server holds none
	// of them, and nothing else tells (err wraps ErrListenEnded). err is an
	// *Error with Op OpEnd. OnEnd is not called if Close was called first. It
	// may block and may call Close.
	OnEnd func(err error)
	// OnListenEnded, if set, is called instead of OnEnd for such a
	// subscriptions/listen stream, and the session serves on (its requests
	// still reach the server): the caller opens a session that listens again.
	// It is called as well, over stdio and in memory on 2026-07-28, when the
	// server answers (ends) a resource's listen it had agreed to and that was
	// not cancelled (a go-sdk server never does). It is called at most once, on
	// a goroutine of its own, and not once Close has been called; err wraps
	// ErrListenEnded.
	OnListenEnded func(err error)
	// OnToolsChanged is called when the server sends
	// notifications/tools/list_changed. It runs on the SDK's reading goroutine,
	// which handles notifications in order: it must return promptly (post an
	// event; the caller coalesces and re-lists). Ignored with MCPClient.
	OnToolsChanged func()
	// MCPClient, if set, is the SDK client the session connects with, instead
	// of one this package shares between sessions of the same Client: its
	// handlers (tool-list changes, sampling, elicitation...) and capabilities
	// are the caller's. Make it with NewClient, which adds what Probe and
	// ListTools need. The context given to Dial reaches its handlers: their
	// contexts carry its values (never its cancellation).
	MCPClient *mcp.Client
	// Logger receives the session's own events; discarded if nil. Nothing it
	// logs contains a secret.
	Logger *slog.Logger
	// Deadline, if set, is when the dial must be done, for a caller whose
	// context ends at its timeout without saying when (as a machine's effects'
	// contexts do): the dial ends by it, as if its context ended then, whatever
	// its requests wait for. An authorization needed while dialing takes three
	// quarters of the time left, so that it fails as a refusal, with its reason,
	// before the dial runs out of time; one needed once it has passed fails at
	// once. The session does not inherit it: its event stream and later
	// requests outlive it.
	Deadline time.Time
}

// DefaultClient is the client implementation sent in initialize when
// Options.Client is nil.
var DefaultClient = mcp.Implementation{Name: "mcpfsm", Version: "dev"}

// forceGrace bounds how long Close waits for the teardown once it has forced
// it: long enough for a SIGKILL and a reap, or for aborted requests to unwind.
const forceGrace = 2 * time.Second

// probeGrace is how long Probe waits, once its context has ended, for the SDK
// to return (it returns at once unless it waits on one of its own locks,
// which ignore contexts); stuckGrace is how long after that the session is
// given before it is brought down as wedged (see Probe).
const (
	probeGrace = 100 * time.Millisecond
	stuckGrace = forceGrace
)

// errSDKStuck is the cause of the end of a session whose SDK did not return
// from a probe long after the probe's context ended.
var errSDKStuck = errors.New("the SDK did not return from a probe after its context ended: the session is wedged")

// errClosed is the cause of a session's life ending after a graceful close.
var errClosed = errors.New("session closed")

// errDialFailed is the cause of a session's life ending when Dial fails.
var errDialFailed = errors.New("dial failed")

// lastSSEProtocol is the last protocol version with an HTTP+SSE binding.
const lastSSEProtocol = "2025-11-25"

// A Session is one initialized MCP client session over one transport. Its
// methods are safe for concurrent use.
type Session struct {
	name string
	kind string // Config.Kind
	desc string
	red  *redactor
	log  *slog.Logger

	onEnd func(error)
	// rt is the round tripper of a streamable HTTP session; nil for others.
	rt *lifeRoundTripper
	// onListen is Options.OnListenEnded; listenEnded: it has been called.
	onListen    func(error)
	listenEnded atomic.Bool
	onTools     func()        // Options.OnToolsChanged
	client      *sharedClient // the Client the session was connected with

	cs   *mcp.ClientSession
	lt   *lifeTransport     // holds the SDK transport's raw connection, closed by force
	proc *process           // stdio only
	ss   *mcp.ServerSession // in-memory only
	own  *http.Transport    // HTTP without a caller's client only
	// oauth is the OAuth client Dial built for the session (Auth's grant
	// fields, not a Handler), which its Close closes; nil if none.
	oauth *OAuth
	life  context.Context // ends when the session is forced down or closed
	kill  context.CancelCauseFunc

	pingless atomic.Bool                 // latched: the server refused ping (method-not-found or invalid-params)
	listed   atomic.Pointer[[]*mcp.Tool] // the first page of tools, as ListTools last listed it
	closing  atomic.Bool                 // Close was called
	// sending counts the writes of the session's own messages (orderConn.send),
	// which teardown waits for once the session's life has ended; sendMu orders a
	// send's look at the life and its Add before that Wait.
	sending sync.WaitGroup
	// cancels are the notifications/cancelled the SDK is yet to write for calls
	// whose callers gave up (see pendingCancels): teardown waits for them.
	cancels pendingCancels
	sendMu  sync.Mutex
	watched chan struct{}         // closed once the connection's end has been handled (see endConn, watch)
	handled atomic.Bool           // the end is being handled: watched is closed once, by its handler
	broken  atomic.Pointer[error] // why our side brought the session down (see breakDown)
	order   order                 // the order of the server's notifications and answers (order.go)
	listens listens               // subscriptions on 2026-07-28, as orderConn sees them (subscribe.go)
	// awaiting are the requests written on an endConn whose answer has not been
	// read, by JSON-RPC ID: the answer read tells their record (see answers).
	awaiting sync.Map // jsonrpc.ID → *answers
	late     late     // the requests its callers gave up on, watched for the server's end of them (late.go)

	// The end of a connection that endConn observes: ends moves from
	// endDialing to endUp when Dial succeeds, or to endGone (with endErr set)
	// if the connection ended by itself first.
	ends   atomic.Int32
	endErr error

	closeOnce sync.Once
	closed    chan struct{} // closed when teardown finished; closeErr is set then
	closeErr  error

	forceOnce sync.Once
	mu        sync.Mutex
	forced    error // the cause of a forced close, under mu
}

// lifeTransport hands the session's life, not the dial context, to the SDK
// transport's Connect (the SSE transport keeps using that context for its
// event stream), and keeps the connection it returns, so that a forced close
// can close it directly. With ends set it wraps the connection in an endConn;
// it must not wrap the streamable HTTP connection, which the SDK drives through
// an unexported interface that a wrapper would hide.
type lifeTransport struct {
	inner mcp.Transport
	life  context.Context
	conn  mcp.Connection
	ends  *Session // the session whose end an endConn reports; nil: no wrapper
	proc  *process // stdio: its writes are made interruptible (pipeConn)
	order bool     // the session's orderConn hands out marks (order.go); with ends only
	end   *endConn // the endConn Connect made, if any
}

// endOrNil returns the endConn Connect made, or nil (t may be nil).
func (t *lifeTransport) endOrNil() *endConn {
	if t == nil {
		return nil
	}
	return t.end
}

// Connect implements mcp.Transport.
func (t *lifeTransport) Connect(context.Context) (mcp.Connection, error) {
	c, err := t.inner.Connect(t.life)
	if err == nil && testWrapConn != nil {
		c = testWrapConn(c, t.life)
	}
	if err == nil && t.proc != nil {
		c = newPipeConn(c, t.ends, t.proc)
	}
	if err == nil && t.ends != nil {
		t.end = &endConn{Connection: c, s: t.ends}
		c = t.end
	}
	if err == nil && t.ends != nil && t.order {
		oc := &orderConn{Connection: c, s: t.ends}
		t.ends.listens.send = oc.send
		c = oc
	}
	t.conn = c
	return c, err
}

// testWrapConn, if set (by tests only), wraps every connection a session
// makes, innermost.
var testWrapConn func(c mcp.Connection, life context.Context) mcp.Connection

// Where a session's end is observed.
const (
	endDialing int32 = iota // Dial has not returned yet
	endUp                   // Dial succeeded: an end is reported
	endGone                 // the connection ended before Dial succeeded
)

// endConn sees the end of a connection that the SDK drives only through the
// exported mcp.Connection interface (stdio, in-memory and SSE), without a
// goroutine of its own: the SDK's jsonrpc2 connection closes its connection
// once it stops for good (a read failed, a write failed, or Close was
// called), and a close that is not ours is the end of the connection. The
// error reported is the one ClientSession.Wait would return: the read error
// unless it is io.EOF, else the write error unless it is io.EOF, else what
// closing the connection returned (a stdio child's exit status), else io.EOF.
type endConn struct {
	mcp.Connection
	s       *Session
	readErr atomic.Pointer[error] // the first read error
	// writeErr is the first write error that breaks the connection (as the
	// SDK's jsonrpc2 has it: not one of a canceled context).
	writeErr atomic.Pointer[error]
	closed   atomic.Bool
}

// Read implements mcp.Connection.
func (c *endConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if err != nil {
		first := err // only a failed read allocates
		c.readErr.CompareAndSwap(nil, &first)
	}
	switch m := msg.(type) {
	case *jsonrpc.Response:
		if rec, ok := c.s.awaiting.LoadAndDelete(m.ID); ok {
			rec := rec.(*answers)
			rec.answered.Store(true)
			if w := rec.late.Load(); w != nil {
				c.s.lateAnswered(w) // an answer to a request given up on (late.go)
			}
		}
	case *jsonrpc.Request:
		if m.IsCall() {
			c.s.serverRequestRead()
		}
	}
	return msg, err
}

// Write implements mcp.Connection. A request made under a record of its answers
// (Session.withStatus) is told by its ID when its answer is read.
func (c *endConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	var rec *answers
	switch m := msg.(type) {
	case *jsonrpc.Request:
		if m.IsCall() {
			if rec, _ = ctx.Value(statusKey{}).(*answers); rec != nil {
				rec.id, rec.hasID = m.ID, true
				c.s.awaiting.Store(m.ID, rec)
			}
		}
	case *jsonrpc.Response:
		// The answer to a request of the server's (its handler has returned).
		defer c.s.serverRequestAnswered()
		if m.Error != nil {
			if e := refusedAnswer(m.Error); e != nil { // params that do not decode
				msg = &jsonrpc.Response{ID: m.ID, Error: e}
			}
		}
	}
	err := c.Connection.Write(ctx, msg)
	if err != nil && rec != nil && c.s.proc != nil && !errors.Is(err, errStreamBroken) {
		// Over stdio a failed write wrote nothing of the message (see pipeConn;
		// one cut part-way broke the stream, and the session ends): the server
		// never had the request (see Session.watchLate).
		rec.hasID = false
		c.s.awaiting.Delete(rec.id)
	}
	if err != nil && ctx.Err() == nil {
		first := err
		c.writeErr.CompareAndSwap(nil, &first)
	}
	if r, ok := msg.(*jsonrpc.Request); ok && r.Method == "notifications/cancelled" {
		if rec, ok := ctx.Value(statusKey{}).(*answers); ok {
			rec.cancelWritten() // the SDK sends it with the call's context's values
		}
	}
	return err
}

// Close implements mcp.Connection. The SDK calls it with its connection's lock
// held, which every call and probe needs: it must never wait on the server.
// The end is reported on a goroutine of its own. A stdio connection's close
// only closes the child's stdin (see procWriter); a close that is not ours
// (the connection broke) kills the child at once if the stream is broken,
// else gives it a moment to exit (see process.ended) off the lock.
func (c *endConn) Close() error {
	err := c.Connection.Close()
	if !c.s.late.takeDownClose() {
		// The SDK's close, made once its connection is idle (no handler
		// runs), or one after it: the requests given up on are over
		// (late.go). Not down's own, made while handlers may still run.
		c.s.lateEnd()
	}
	if !c.closed.CompareAndSwap(false, true) {
		return err
	}
	s := c.s
	if s.closing.Load() {
		s.endHandled() // our own close: no end to report
		return err
	}
	end := err
	if p := c.writeErr.Load(); p != nil && !errors.Is(*p, io.EOF) {
		end = *p
	}
	if p := c.readErr.Load(); p != nil && !errors.Is(*p, io.EOF) {
		end = *p
	}
	if p := s.broken.Load(); p != nil {
		end = *p
	}
	if end == nil {
		end = io.EOF
	}
	if s.proc != nil && end != io.EOF {
		// The stream is broken (garbage, an over-size line, a failed write):
		// the server has nothing graceful left to do.
		s.proc.kill()
	}
	s.endErr = end // read by up only after the swap below succeeds
	if s.ends.CompareAndSwap(endDialing, endGone) {
		return err // Dial reports it if it succeeds after all, or drops it
	}
	go s.ended(end)
	return err
}

// listenLost reports that the server ended a subscriptions/listen stream it had
// agreed to, with err (io.EOF: it ended it cleanly, or answered the listen): to
// OnListenEnded, or else, over streamable HTTP, as the session's end.
func (s *Session) listenLost(err error) {
	if err == io.EOF {
		err = ErrListenEnded
	} else {
		err = fmt.Errorf("%w: %w", ErrListenEnded, err)
	}
	if s.onListen != nil {
		if !s.closing.Load() && s.listenEnded.CompareAndSwap(false, true) {
			go s.onListen(s.wrap(OpRequest, "subscriptions/listen", err, nil))
		}
		return
	}
	if s.rt == nil {
		return // a stdio or in-memory session keeps its other listens
	}
	if s.ends.Load() == endDialing {
		s.endErr = err // read by up only after the swap below succeeds
		if s.ends.CompareAndSwap(endDialing, endGone) {
			return // Dial reports it if it succeeds after all, or drops it
		}
	}
	go s.ended(err)
}

// up marks the session dialed: an end that endConn saw during Dial is
// reported now.
func (s *Session) up() {
	if !s.ends.CompareAndSwap(endDialing, endUp) {
		go s.ended(s.endErr)
	}
}

// discardLogger is the logger of sessions given none.
var discardLogger = slog.New(slog.DiscardHandler)

// logAt logs msg at level, with the session's server and transport, if the logger
// takes records of that level. (The attributes are added to each record rather than
// to a logger made for the session with With, which would cost every session a few
// hundred bytes for records that are rare.)
func (s *Session) logAt(level slog.Level, msg string, args ...any) {
	ctx := context.Background()
	if !s.log.Enabled(ctx, level) {
		return
	}
	s.log.Log(ctx, level, msg, append([]any{"server", s.name, "transport", s.kind}, args...)...)
}

// stdoutNoise is what a stdio session does with a line its server wrote to stdout
// that is not a message (see lineConn.noise): the line goes where the server's
// stderr goes, after "stdout: " (its tail in this session's errors, and
// Stdio.Stderr), and the session's first such line is logged, without its text
// (what a server prints may hold secrets; its stderr is routed as the user chose).
func (s *Session) stdoutNoise(p *process) func(line []byte) {
	var once sync.Once
	return func(line []byte) {
		once.Do(func() {
			s.logAt(slog.LevelWarn, "the server writes lines to stdout that are not JSON-RPC (a banner, a log record): each is skipped, and passed on with its stderr")
		})
		p.stderr.noteNoise(append(append([]byte("stdout: "), line...), '\n'))
	}
}

// endHandled marks the end handled, if nothing did yet, and reports whether it
// did: the caller then closes watched.
func (s *Session) endHandled() bool {
	if !s.handled.CompareAndSwap(false, true) {
		return false
	}
	close(s.watched)
	return true
}

// ended reports the end of the connection to OnEnd, once, unless Close came
// first. A stdio child is killed, and its exit awaited briefly (see
// process.ended), here, off the SDK's lock.
func (s *Session) ended(err error) {
	if !s.handled.CompareAndSwap(false, true) {
		return
	}
	defer close(s.watched)
	if s.closing.Load() {
		return
	}
	if s.proc != nil {
		err = s.proc.ended(err)
		if s.closing.Load() {
			return
		}
	}
	err = s.wrap(OpEnd, "", err, nil)
	s.logAt(slog.LevelDebug, "connection ended", "error", err) // the machine reports it, classified
	if s.onEnd != nil {
		s.onEnd(err)
	}
}

// Dial connects to the server cfg describes and initializes a session.
//
// ctx bounds the dial and initialize only: the session outlives it. On
// failure everything Dial opened is closed before it returns (a stdio child is
// killed and reaped, HTTP requests are aborted). A failure is an *Error with
// Op OpDial; if ctx ended, errors.Is(err, context.Cause(ctx)) holds. A dial
// whose request was refused for its credentials (an authorization that failed)
// and not accepted since fails with that first refusal, an *AuthError, whatever
// failed after it (the go-sdk falls back from server/discover to initialize, which
// is cut short by the deadline). An authorization that failed is final for the
// dial: the dial's later requests are not sent (the user is asked to log in
// once at most, and the dial never settles on an older protocol than the server
// speaks because its credentials were refused at first). It is not final for
// the session the dial made (see answers.dialed).
func Dial(ctx context.Context, cfg Config, opts Options) (*Session, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !opts.Deadline.IsZero() {
		// The dial ends by its deadline, whatever it waits for: an authorization
		// of one of its requests takes three quarters of what is left of it
		// (authContext), and one begun once it has passed fails at once. The
		// session's life, and the event stream that lives on it, are detached.
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, opts.Deadline)
		defer cancel()
	}
	s := &Session{
		name:     cfg.Name,
		desc:     cfg.String(),
		red:      newRedactor(cfg),
		log:      opts.Logger,
		onEnd:    opts.OnEnd,
		onListen: opts.OnListenEnded,
		closed:   make(chan struct{}),
		watched:  make(chan struct{}),
	}
	if s.log == nil {
		s.log = discardLogger
	}
	s.kind = cfg.Kind()

	// The session's life: detached from ctx (keeping its values), but ended
	// with it until Dial returns.
	s.life, s.kill = context.WithCancelCause(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { s.kill(context.Cause(ctx)) })
	dctx, status := withStatus(ctx)
	defer status.dialed.Store(true) // (the connection's own requests keep the record: see answers.dialed)
	cs, err := s.connect(dctx, cfg, opts)
	if err == nil {
		err = s.fellBack(cs)
	}
	if !stop() && err == nil {
		// ctx ended just as Dial finished, and took the session's life with it.
		err = context.Cause(ctx)
	}
	if err != nil {
		if p := status.authFailed.Load(); p != nil {
			// An authorization that failed (or got no answer), which no answer
			// since has resolved, is the dial's failure: what failed after it is
			// the go-sdk's fallback from server/discover to initialize, failed
			// with it unsent (see answers.authFailed), or cut short.
			err = *p
		}
		if r := status.refused.Load(); r != nil {
			// The dial's first refusal, the same, or one before it (a 403).
			err = r
			status.status.Store(int32(r.err.Status))
		}
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			// ctx ended and took the session's life with it: the transport
			// may have failed from that before the SDK saw ctx end.
			if endedByLife(err) {
				// The connection closed under the call because the life
				// ended (the SDK falls back from server/discover to
				// initialize on the same ended ctx, which then races the
				// connection's close): that is ctx's end, reported bare.
				err = context.Cause(ctx)
			} else {
				err = fmt.Errorf("%w: %w", context.Cause(ctx), err)
			}
		}
		if ec := s.lt.endOrNil(); ec != nil {
			// What broke the stream (a line that is not JSON, say) the SDK keeps
			// only as text in the error it returns: join it, for the classifier.
			if p := ec.readErr.Load(); p != nil && !errors.Is(*p, io.EOF) && !errors.Is(err, *p) {
				err = &withCause{err, *p}
			}
		}
		s.kill(errDialFailed)
		s.abandon(ctx, cs)
		err = s.wrap(OpDial, "", err, status)
		s.logAt(slog.LevelDebug, "dial failed", "error", err) // the machine reports it, classified
		return nil, err
	}
	s.cs = cs
	if s.lt.ends != nil {
		s.up() // the endConn reports the end
	} else {
		s.up() // a listen the server ended during Dial (listenLost) is reported
		// The watcher: the streamable HTTP connection cannot be wrapped to see
		// its end (see lifeTransport); its only exported end-of-connection
		// signal is ClientSession.Wait. It ends when the connection ends, which
		// Close guarantees within forceGrace of its ctx.
		go s.watch()
	}
	s.logAt(slog.LevelDebug, "connected", "config", s.desc, "protocol", s.ProtocolVersion(), "session", cs.ID())
	return s, nil
}

// fellBack returns why cs may not serve, over streamable HTTP: its server/discover
// got no answer that says anything of the protocol (no answer at all, or HTTP 408,
// 429 or 5xx: a load balancer while the server restarts), the go-sdk fell back to
// initialize and an older protocol, and the server opened no session
// (Mcp-Session-Id) to keep what it is given. A server on 2026-07-28 is stateless:
// it takes the fallback, and then keeps nothing of the session (subscriptions, the
// log level) and has no stream to send anything on, so that they would fail without
// a word. The dial fails instead, and the next one asks server/discover again. A
// fallback to a session of the server's is kept: it works, whatever the server
// speaks besides. (A server on an older protocol that keeps no session, behind a
// proxy that answers the unknown server/discover with a 5xx, is not reached; one
// that answers it itself with "method not found", whatever the status, is: see
// lifeRoundTripper.discoverFailed.)
func (s *Session) fellBack(cs *mcp.ClientSession) error {
	if s.rt == nil {
		return nil
	}
	p := s.rt.discoverErr.Load()
	if r := cs.InitializeResult(); p == nil || r == nil || NewProtocol(r.ProtocolVersion) || cs.ID() != "" {
		return nil
	}
	return fmt.Errorf("server/discover failed (%w), and the go-sdk fell back to protocol %s, which the server took without a session to keep anything of it", *p, cs.InitializeResult().ProtocolVersion)
}

// connect builds the SDK transport for cfg and connects a client over it.
func (s *Session) connect(ctx context.Context, cfg Config, opts Options) (*mcp.ClientSession, error) {
	client := opts.MCPClient
	if client == nil {
		s.onTools = opts.OnToolsChanged
		s.client = acquireClient(opts.Client, s.onTools != nil)
		client = s.client.c
	}

	var inner mcp.Transport
	var sopts *mcp.ClientSessionOptions
	switch cfg.Kind() {
	case KindStdio:
		p, err := startProcess(s.life, cfg.Stdio)
		if err != nil {
			return nil, err
		}
		s.proc = p
		inner = &lineTransport{r: procReader{p}, w: procWriter{p}, noise: s.stdoutNoise(p)}
	case KindHTTP:
		az, built, err := authorizerFor(cfg, s.log, s.red)
		if err != nil {
			return nil, err
		}
		s.oauth = built
		hc, own := newHTTPClient(s.life, cfg.HTTP, az, s.red, s.log)
		s.own = own
		s.rt = hc.Transport.(*lifeRoundTripper)
		if isMarkable(client) {
			hc.Transport.(*lifeRoundTripper).order = &s.order
			hc.Transport.(*lifeRoundTripper).listens = &s.listens
			hc.Transport.(*lifeRoundTripper).lost = s.listenLost
			s.listens.on = true
			ctx = context.WithValue(ctx, orderKey{}, s)
		}
		inner = &mcp.StreamableClientTransport{Endpoint: cfg.HTTP.URL, HTTPClient: hc, MaxRetries: cfg.HTTP.MaxRetries}
	case KindSSE:
		az, built, err := authorizerFor(cfg, s.log, s.red)
		if err != nil {
			return nil, err
		}
		s.oauth = built
		hc, own := newHTTPClient(s.life, cfg.SSE, az, s.red, s.log)
		s.own = own
		inner = &mcp.SSEClientTransport{Endpoint: cfg.SSE.URL, HTTPClient: hc}
		// Protocol 2026-07-28 has no SSE binding. Ask for the last version
		// that has one: the client then skips server/discover, which the
		// SDK's SSE server may answer with 2026-07-28 (it races to learn
		// what its transport supports).
		sopts = &mcp.ClientSessionOptions{ProtocolVersion: lastSSEProtocol}
	case KindMemory:
		st, ct := mcp.NewInMemoryTransports()
		ss, err := cfg.InMemory.Server.Connect(s.life, st, nil)
		if err != nil {
			return nil, err
		}
		s.ss = ss
		inner = ct
	}
	if cfg.ProtocolVersion != "" {
		sopts = &mcp.ClientSessionOptions{ProtocolVersion: cfg.ProtocolVersion}
	}
	s.lt = &lifeTransport{inner: inner, life: s.life, proc: s.proc}
	if cfg.Kind() != KindHTTP {
		// The SDK's streamable HTTP connection cannot be wrapped: the client
		// session updates it through an unexported method, which a wrapper
		// hides. Its end is seen another way (see watch), and its order is
		// kept by its SSE bodies (order.go).
		s.lt.ends = s
		if isMarkable(client) {
			s.lt.order = true
			s.listens.on = true
			s.listens.lost = s.listenLost
			ctx = context.WithValue(ctx, orderKey{}, s)
		}
	}
	cs, err := client.Connect(ctx, s.lt, sopts)
	if err == nil && s.client != nil {
		s.client.bind(cs, s)
	}
	return cs, err
}

// uncachedToolLists is a sending middleware that zeroes the TTL of every
// tools/list result before the SDK caches it, so that ListTools always
// reaches the server (on protocol 2026-07-28 the SDK would otherwise answer
// from its cache while a server-given TTL lasts).
//
// The answer to a probe's tools/list (its context carries probeKey) proves the
// server alive, and is dropped: the SDK caches the first page of tools as the
// session last listed it instead, which the session's user holds already. (The
// SDK caches every tools/list result on 2026-07-28 and looks tools up in its
// cache for each call; it would otherwise hold a second copy of the tool list
// from the first probe on.)
func uncachedToolLists(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if r, ok := res.(*mcp.ListToolsResult); ok && r != nil {
			r.TTLMs = 0
			if listed, ok := ctx.Value(probeKey{}).(*[]*mcp.Tool); ok && listed != nil {
				r.Tools = *listed
			}
		}
		return res, err
	}
}

// maxListItems and maxListBytes are MaxListItems and MaxListBytes; tests lower them.
var (
	maxListItems = MaxListItems
	maxListBytes = MaxListBytes
)

// jsonSize is the size of v as JSON, 0 if it cannot be encoded: what a listing's
// items count against MaxListBytes.
func jsonSize(v any) int {
	b, _ := json.Marshal(v)
	return len(b)
}

// probeKey keys the context value that marks a probe's tools/list: the
// session's tools as last listed (see uncachedToolLists).
type probeKey struct{}

// abandon closes what a failed Dial opened. The session's life has ended, so
// nothing here waits for a server's good will. The OAuth client Dial built is
// closed within ctx, the Dial's: a refresh it began that goes on after the
// request that needed it gave up (see OAuth.renewFor) is waited for until then,
// its token saved, and abandoned after. (It was once left to run on, nobody's,
// until Auth.Timeout.)
func (s *Session) abandon(ctx context.Context, cs *mcp.ClientSession) {
	if cs != nil {
		_ = cs.Close()
	}
	if s.client != nil {
		s.client.release(cs)
	}
	if s.lt != nil && s.lt.conn != nil {
		_ = s.lt.conn.Close()
	}
	if s.proc != nil {
		s.proc.stopNow()
	}
	if s.ss != nil {
		_ = s.ss.Close()
	}
	if s.own != nil {
		s.own.CloseIdleConnections()
	}
	if s.oauth != nil {
		_ = s.oauth.Close(ctx) // an abandoned renewal is logged
	}
}

// watch reports the end of the connection to OnEnd, unless Close came first.
func (s *Session) watch() {
	err := s.cs.Wait()
	s.lateEnd() // no handler runs any more (late.go)
	if err == nil {
		err = io.EOF
	}
	s.ended(err)
}

// CallTool calls a tool. A tool that fails returns a result with IsError set
// and a nil error; an error is an *Error with Op OpCallTool. p is not modified.
func (s *Session) CallTool(ctx context.Context, p *mcp.CallToolParams) (*mcp.CallToolResult, error) {
	var cp mcp.CallToolParams
	if p != nil {
		// The SDK writes into the params it is given (arguments, and the _meta
		// of protocol 2026-07-28): give it a copy, so callers may share theirs.
		cp = *p
		cp.Meta = maps.Clone(p.Meta)
	}
	sctx, status := withStatus(ctx)
	res, err := s.cs.CallTool(sctx, &cp)
	s.doneAfter(ctx, status)
	if err != nil {
		return nil, s.wrap(OpCallTool, cp.Name, err, status)
	}
	return res, nil
}

// ListTools lists every tool, following pagination. Every page is requested
// from the server: the SDK's list cache is never used. A listing of more than
// MaxListPages pages, MaxListItems tools or MaxListBytes bytes fails with an
// error wrapping ErrListTooLong. A server that answers the first page with
// method-not-found (-32601) has no tools: none, and no error (see Unlisted).
func (s *Session) ListTools(ctx context.Context) ([]*mcp.Tool, error) {
	var tools []*mcp.Tool
	seen := map[string]bool{}
	cursor := ""
	size := 0
	for pages := 1; ; pages++ {
		pctx, status := withStatus(ctx)
		res, err := s.cs.ListTools(pctx, &mcp.ListToolsParams{Cursor: cursor})
		s.done(pctx, status)
		if err != nil {
			if cursor == "" && Unlisted(err) {
				err = nil
				res = &mcp.ListToolsResult{Tools: []*mcp.Tool{}}
			} else {
				return nil, s.wrap(OpListTools, "", err, status)
			}
		}
		if cursor == "" {
			first := res.Tools
			s.listed.Store(&first)
		}
		tools = append(tools, res.Tools...)
		if len(tools) > maxListItems {
			return nil, s.wrap(OpListTools, "", fmt.Errorf("%w: more than %d tools", ErrListTooLong, maxListItems), nil)
		}
		if size += jsonSize(res.Tools); size > maxListBytes {
			return nil, s.wrap(OpListTools, "", fmt.Errorf("%w: more than %d bytes", ErrListTooLong, maxListBytes), nil)
		}
		cursor = res.NextCursor
		if cursor == "" {
			return tools, nil
		}
		if pages >= MaxListPages {
			return nil, s.wrap(OpListTools, "", fmt.Errorf("%w: more than %d pages", ErrListTooLong, MaxListPages), nil)
		}
		if seen[cursor] {
			return nil, s.wrap(OpListTools, "", fmt.Errorf("the server repeated the cursor %q", cursor), nil)
		}
		seen[cursor] = true
	}
}

// Probe sends a request that reaches the server and waits for its answer.
//
// It sends ping, the cheapest request. A server that answers ping with
// method-not-found (-32601), or with invalid-params (-32602, as the SDK's
// stateless HTTP server does on protocol 2026-07-28, where ping needs a _meta
// the SDK's client does not send), is alive but will not be pinged: Probe then
// lists the first page of tools instead (never from the SDK's cache), at once
// and for the rest of the session. An error is an *Error with Op OpProbe.
//
// Probe returns by the end of ctx (within probeGrace) whatever the SDK does:
// the SDK's part runs on a goroutine of its own, and if it has not returned
// once ctx has ended, Probe returns ctx's error; if it has still not returned
// stuckGrace later, the SDK is waiting on one of its own locks (which ignore
// contexts), and the session is brought down (see breakDown): OnEnd reports
// it.
func (s *Session) Probe(ctx context.Context) error {
	r := &probeRun{done: make(chan struct{})}
	go func() {
		r.err = s.probe(ctx)
		close(r.done)
	}()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
	}
	t := time.NewTimer(probeGrace)
	defer t.Stop()
	select {
	case <-r.done:
		return r.err
	case <-t.C:
	}
	time.AfterFunc(stuckGrace, func() {
		select {
		case <-r.done:
		default:
			s.breakDown(errSDKStuck)
		}
	})
	s.logAt(slog.LevelWarn, "the SDK did not return from a probe whose context ended")
	return s.wrap(OpProbe, "", ctx.Err(), nil)
}

// probeRun is a probe under way on its own goroutine.
type probeRun struct {
	done chan struct{} // closed once err is set
	err  error
}

// probe is Probe's request, made on the calling goroutine.
func (s *Session) probe(ctx context.Context) error {
	if !s.pingless.Load() {
		pctx, status := withStatus(ctx)
		err := s.cs.Ping(pctx, nil)
		s.done(pctx, status)
		if err == nil {
			return nil
		}
		if !pingRefused(err) {
			return s.wrap(OpProbe, "", err, status)
		}
		if s.pingless.CompareAndSwap(false, true) {
			s.logAt(slog.LevelInfo, "the server refuses ping: probing with tools/list from now on")
		}
	}
	pctx, status := withStatus(ctx)
	pctx = context.WithValue(pctx, probeKey{}, s.listed.Load())
	_, err := s.cs.ListTools(pctx, &mcp.ListToolsParams{})
	s.done(pctx, status)
	if err != nil && !Unlisted(err) { // (a server without tools answers, alive)
		return s.wrap(OpProbe, "", err, status)
	}
	return nil
}

// pingRefused reports whether err is a server's refusal of ping itself (method not
// found, or invalid params), as opposed to a failure to reach it.
// Unlisted reports whether err is a server's method-not-found answer (-32601)
// to a list request: the server does not have that list (a server that declares
// resources and no resource templates answers resources/templates/list so, one
// without tools tools/list), which a client's own listing takes for an empty
// list, not for a failure.
func Unlisted(err error) bool {
	var je *jsonrpc.Error
	return errors.As(err, &je) && je.Code == jsonrpc.CodeMethodNotFound
}

func pingRefused(err error) bool {
	var je *jsonrpc.Error
	return errors.As(err, &je) && (je.Code == jsonrpc.CodeMethodNotFound || je.Code == jsonrpc.CodeInvalidParams)
}

// Close closes the session: gracefully until ctx ends (stdio: close the
// child's stdin and wait for it to exit; streamable HTTP: DELETE the session),
// then by force (SIGKILL the child's process group and reap it; abort every
// HTTP request in flight; close the in-memory pipe). Once forced, Close
// returns within a short bound (forceGrace) whatever the server does.
//
// Close is idempotent and safe to call concurrently: every call returns the
// same result once the teardown is over. The error is an *Error with Op
// OpClose wrapping what the SDK returned (for stdio, the child's exit status:
// nil for a clean exit); a forced close also wraps ErrForcedClose and the
// cause of ctx.
//
// A stdio child is closed as the MCP specification says: its stdin is closed;
// if it has not exited by half the time ctx leaves (termDelay if ctx has no
// deadline), it gets SIGTERM; if it has not exited when ctx ends, SIGKILL.
func (s *Session) Close(ctx context.Context) error {
	s.closing.Store(true)
	s.closeOnce.Do(func() {
		termAt := time.Now().Add(termDelay)
		if d, ok := ctx.Deadline(); ok {
			termAt = time.Now().Add(time.Until(d) / 2)
		}
		go s.teardown(ctx, termAt)
	})
	select {
	case <-s.closed:
		return s.closeErr
	case <-ctx.Done():
	}
	cause := context.Cause(ctx)
	s.force(cause)
	t := time.NewTimer(forceGrace)
	defer t.Stop()
	select {
	case <-s.closed:
		return s.closeErr
	case <-t.C:
		s.logAt(slog.LevelError, "teardown did not finish after a forced close")
		return s.wrap(OpClose, "", errors.Join(fmt.Errorf("%w: %w", ErrForcedClose, cause), errCloseStuck), nil)
	}
}

// teardown is the graceful close. It runs on its own goroutine, started by the
// first Close (whose ctx it is given), and ends once everything is closed
// (bounded once forced).
func (s *Session) teardown(ctx context.Context, termAt time.Time) {
	s.cancels.wait(ctx, s.life)
	err := s.cs.Close()
	if s.client != nil {
		s.client.release(s.cs)
	}
	if s.oauth != nil {
		// A token renewal under way is waited for (its token saved for the
		// next session), until the close is forced.
		_ = s.oauth.Close(ctx) // an abandoned renewal is logged
	}
	if s.proc != nil {
		// cs.Close closed the child's stdin (it never waits for the child):
		// the result is the child's exit status.
		err = s.proc.stop(termAt)
	}
	if s.ss != nil {
		// The client's end of the pipe is closed: the server session ends
		// once its handlers return.
		done := make(chan struct{})
		go func() {
			_ = s.ss.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-s.life.Done():
		}
	}
	s.kill(errClosed)
	// The life has ended: a send that saw it alive has added to sending once
	// this barrier passes; later ones see it ended.
	s.sendMu.Lock()
	s.sendMu.Unlock()
	s.sending.Wait() // bounded: each write ends with the session's life
	if s.own != nil {
		s.own.CloseIdleConnections()
	}
	s.mu.Lock()
	forced := s.forced
	s.mu.Unlock()
	if forced != nil {
		err = errors.Join(fmt.Errorf("%w: %w", ErrForcedClose, forced), err)
	}
	if err != nil {
		s.closeErr = s.wrap(OpClose, "", err, nil)
		s.logAt(slog.LevelInfo, "closed", "error", s.closeErr)
	} else {
		s.logAt(slog.LevelDebug, "closed")
	}
	close(s.closed)
}

// force tears the session down regardless of the server.
func (s *Session) force(cause error) {
	s.forceOnce.Do(func() {
		s.mu.Lock()
		s.forced = cause
		s.mu.Unlock()
		s.logAt(slog.LevelWarn, "forcing close", "cause", cause)
		s.down(fmt.Errorf("%w: %w", ErrForcedClose, cause))
	})
}

// down tears the session down regardless of the server: it ends the
// session's life with cause (which aborts every HTTP request, ends the SSE
// stream, interrupts a stdio write, and makes the stdio shutdown kill instead
// of waiting), kills a stdio child, and closes the connection.
func (s *Session) down(cause error) {
	s.kill(cause)
	if s.proc != nil {
		s.proc.kill()
	}
	if c := s.lt.conn; c != nil {
		// Fails the calls in flight, which the SDK's graceful close waits
		// for. It is not the caller's to wait for.
		s.late.downClose.Add(1)
		go func() { _ = c.Close() }()
	}
}

// breakDown brings a session that our side found broken for good (a stdio
// write interrupted part-way, the SDK wedged) down at once, and reports its
// end to OnEnd with cause (unless Close came first, or Dial has not
// succeeded: then Dial fails).
func (s *Session) breakDown(cause error) {
	if !s.broken.CompareAndSwap(nil, &cause) {
		return
	}
	s.logAt(slog.LevelWarn, "session broken: bringing it down", "cause", cause)
	s.down(cause)
	if s.ends.Load() == endUp {
		go s.ended(cause)
	}
}

// Closing reports whether Close has been called: an error a call gets now is
// an artifact of our own teardown.
func (s *Session) Closing() bool { return s.closing.Load() }

// ID returns the MCP session ID: "" for stdio, SSE, in-memory and stateless
// HTTP sessions.
func (s *Session) ID() string { return s.cs.ID() }

// ProtocolVersion returns the negotiated protocol version.
func (s *Session) ProtocolVersion() string {
	if r := s.cs.InitializeResult(); r != nil {
		return r.ProtocolVersion
	}
	return ""
}

// InitializeResult returns the server's answer to initialize.
func (s *Session) InitializeResult() *mcp.InitializeResult { return s.cs.InitializeResult() }

// Request runs f on the SDK session, for requests this package does not wrap
// (prompts, resources, completion...), with the HTTP status recording of the
// other methods: a failure is returned as an *Error with Op op and Tool name
// (what the request is about: a prompt's name, a resource's URI; may be
// empty), redacted and capped like every other. f must use ctx, or a context
// derived from it, for its requests.
func (s *Session) Request(ctx context.Context, op, name string, f func(ctx context.Context, cs *mcp.ClientSession) error) error {
	sctx, status := withStatus(ctx)
	err := f(sctx, s.cs)
	s.doneAfter(ctx, status)
	if err != nil {
		return s.wrap(op, name, err, status)
	}
	return nil
}

// ServerInfo returns the server's name and version, as it sent them.
func (s *Session) ServerInfo() *mcp.Implementation {
	if r := s.cs.InitializeResult(); r != nil {
		return r.ServerInfo
	}
	return nil
}

// ClientSession returns the SDK session, for requests this package does not
// wrap (prompts, resources). Do not Close it: call Session.Close. Its
// tools/list results always carry ttlMs 0 (see ListTools).
func (s *Session) ClientSession() *mcp.ClientSession { return s.cs }

// String describes the session's server without secrets.
func (s *Session) String() string { return s.desc }

// done forgets the request of rec (withStatus, made under ctx), whose answer may
// never come (it was cancelled); if its caller gave up once it was sent, the SDK
// writes its notifications/cancelled next, which a close waits for (see
// pendingCancels).
func (s *Session) done(ctx context.Context, rec *answers) {
	if rec == nil {
		return
	}
	s.forget(rec)
	s.cancelPending(ctx, rec)
}

// forget forgets the request of rec: its answer, if one comes, is not looked for.
func (s *Session) forget(rec *answers) {
	if rec != nil && rec.hasID {
		s.awaiting.Delete(rec.id)
	}
}

// cancelPending notes, if the caller of rec's request (made under ctx) gave up once
// it was sent, that the SDK writes its notifications/cancelled next, which a close
// waits for (see pendingCancels).
func (s *Session) cancelPending(ctx context.Context, rec *answers) {
	if ctx.Err() != nil && (rec.hasID || rec.sent.Load()) && !rec.answered.Load() {
		rec.pending = &s.cancels
		rec.gaveUp()
	}
}

// wrap returns err as an *Error of op, with what the HTTP answers said, if
// any.
func (s *Session) wrap(op, tool string, err error, status *answers) error {
	e := &Error{Server: s.name, Op: op, Tool: tool, Err: err, red: s.red}
	if status != nil {
		e.HTTPStatus = int(status.status.Load())
		e.Sent = status.sent.Load()
		e.NotJSON, e.NotMCP = status.notJSON.Load(), status.notMCP.Load()
		// A probe's answer that cannot be read is no sign of health.
		e.Answered = status.answered.Load() && op != OpProbe && op != OpDial
	}
	var ae *AuthError
	if e.HTTPStatus == 0 && errors.As(err, &ae) {
		// A refusal met where no status is recorded (the SSE stream's GET).
		e.HTTPStatus = ae.Status
	}
	if s.proc != nil && (op == OpEnd || op == OpDial) {
		e.StderrTail = s.red.tail(s.proc.stderr.tail())
	}
	return e
}

// endedByLife reports whether a failed connect only says that the
// connection closed, which the end of the session's life causes.
func endedByLife(err error) bool {
	return errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, io.EOF) || errors.Is(err, context.Canceled)
}

// withCause is an error that also wraps the cause it quotes only as text (the SDK's
// "connection closed" errors do): errors.Is and As, and the classifier, see the cause;
// the message is the error's alone, which quotes it already.
type withCause struct {
	err, cause error
}

func (e *withCause) Error() string   { return e.err.Error() }
func (e *withCause) Unwrap() []error { return []error{e.err, e.cause} }

// cancelGrace bounds how long a session's close waits for the notifications/cancelled
// of the calls whose callers gave up (see pendingCancels).
const cancelGrace = time.Second

// pendingCancels counts the notifications/cancelled the go-sdk is yet to write for a
// session's calls whose callers gave up. It writes them on a goroutine of its own,
// once the call has returned (so that a slow server does not hold the caller), and a
// close right after (a gateway closing with calls in flight, a reload replacing their
// server) closed the connection first: the server never heard of the cancel and ran
// the call on (and over streamable HTTP on 2025-11-25, the go-sdk's server holds the
// session's DELETE until its calls end). A close waits for them, up to cancelGrace.
type pendingCancels struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n drops to 0; nil while it is 0
}

// add counts d more cancels pending (d < 0: fewer).
func (p *pendingCancels) add(d int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n += d
	switch {
	case p.n > 0 && p.zero == nil:
		p.zero = make(chan struct{})
	case p.n <= 0 && p.zero != nil:
		close(p.zero)
		p.zero = nil
	}
}

// wait waits until no notification is pending, or cancelGrace passes, or ctx or
// life ends.
func (p *pendingCancels) wait(ctx, life context.Context) {
	p.mu.Lock()
	zero := p.zero
	p.mu.Unlock()
	if zero == nil {
		return
	}
	t := time.NewTimer(cancelGrace)
	defer t.Stop()
	select {
	case <-zero:
	case <-t.C:
	case <-ctx.Done():
	case <-life.Done():
	}
}

// gaveUp notes that the caller of the request of rec gave up once it was sent: the
// SDK writes its notifications/cancelled.
func (rec *answers) gaveUp() {
	if rec.pending == nil {
		return
	}
	rec.pending.add(1)
	if !rec.cancel.CompareAndSwap(0, 1) {
		rec.pending.add(-1) // written already
	}
}

// cancelWritten notes that the notifications/cancelled of the request of rec was
// written (or failed to be).
func (rec *answers) cancelWritten() {
	if rec.cancel.Swap(2) == 1 {
		rec.pending.add(-1)
	}
}
