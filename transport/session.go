package transport

import (
	"context"
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
	// in-memory pipe closed. err is an *Error with Op OpEnd. OnEnd is not
	// called if Close was called first. It may block and may call Close.
	OnEnd func(err error)
	// OnToolsChanged is called when the server sends
	// notifications/tools/list_changed. It runs on the SDK's reading goroutine,
	// which handles notifications in order: it must return promptly (post an
	// event; the caller coalesces and re-lists).
	OnToolsChanged func()
	// MCPClient, if set, is the SDK client to connect with (see NewClient): its
	// handlers answer what the server sends, and OnToolsChanged is ignored. The ctx
	// given to Dial flows into its handlers' contexts.
	MCPClient *mcp.Client
	// Logger receives the session's own events; discarded if nil. Nothing it
	// logs contains a secret.
	Logger *slog.Logger
}

// DefaultClient is the client implementation sent in initialize when
// Options.Client is nil.
var DefaultClient = mcp.Implementation{Name: "mcpfsm", Version: "dev"}

// forceGrace bounds how long Close waits for the teardown once it has forced
// it: long enough for a SIGKILL and a reap, or for aborted requests to unwind.
const forceGrace = 2 * time.Second

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

	onEnd   func(error)
	onTools func()        // Options.OnToolsChanged
	client  *sharedClient // the Client the session was connected with

	cs   *mcp.ClientSession
	lt   *lifeTransport     // holds the SDK transport's raw connection, closed by force
	proc *process           // stdio only
	ss   *mcp.ServerSession // in-memory only
	own  *http.Transport    // HTTP without a caller's client only
	life context.Context    // ends when the session is forced down or closed
	kill context.CancelCauseFunc

	http     bool                        // the session speaks HTTP (streamable or SSE): statuses are recorded
	pingless atomic.Bool                 // latched: the server refused ping (method-not-found or invalid-params)
	listed   atomic.Pointer[[]*mcp.Tool] // the first page of tools, as ListTools last listed it
	closing  atomic.Bool                 // Close was called
	watched  chan struct{}               // closed once the connection's end has been handled (see endConn, watch)

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
}

// Connect implements mcp.Transport.
func (t *lifeTransport) Connect(context.Context) (mcp.Connection, error) {
	c, err := t.inner.Connect(t.life)
	if err == nil && t.ends != nil {
		c = &endConn{Connection: c, s: t.ends}
	}
	t.conn = c
	return c, err
}

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
	return msg, err
}

// Write implements mcp.Connection.
func (c *endConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	err := c.Connection.Write(ctx, msg)
	if err != nil && ctx.Err() == nil {
		first := err
		c.writeErr.CompareAndSwap(nil, &first)
	}
	return err
}

// Close implements mcp.Connection. The SDK calls it with its connection's lock
// held, so the end is reported on a goroutine of its own.
func (c *endConn) Close() error {
	err := c.Connection.Close()
	if !c.closed.CompareAndSwap(false, true) {
		return err
	}
	s := c.s
	if s.closing.Load() {
		close(s.watched) // our own close: no end to report
		return err
	}
	end := err
	if p := c.writeErr.Load(); p != nil && !errors.Is(*p, io.EOF) {
		end = *p
	}
	if p := c.readErr.Load(); p != nil && !errors.Is(*p, io.EOF) {
		end = *p
	}
	if end == nil {
		end = io.EOF
	}
	s.endErr = end // read by up only after the swap below succeeds
	if s.ends.CompareAndSwap(endDialing, endGone) {
		return err // Dial reports it if it succeeds after all, or drops it
	}
	go s.ended(end)
	return err
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

// ended reports the end of the connection to OnEnd, unless Close came first.
func (s *Session) ended(err error) {
	defer close(s.watched)
	if s.closing.Load() {
		return
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
// Op OpDial; if ctx ended, errors.Is(err, ctx.Err()) holds.
func Dial(ctx context.Context, cfg Config, opts Options) (*Session, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Session{
		name:    cfg.Name,
		desc:    cfg.String(),
		red:     newRedactor(cfg),
		log:     opts.Logger,
		onEnd:   opts.OnEnd,
		closed:  make(chan struct{}),
		watched: make(chan struct{}),
		http:    cfg.httpConfig() != nil,
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
	cs, err := s.connect(dctx, cfg, opts)
	if !stop() && err == nil {
		// ctx ended just as Dial finished, and took the session's life with it.
		err = context.Cause(ctx)
	}
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			// ctx ended and took the session's life with it: the transport
			// may have failed from that before the SDK saw ctx end.
			err = fmt.Errorf("%w: %w", context.Cause(ctx), err)
		}
		s.kill(errDialFailed)
		s.abandon(cs)
		err = s.wrap(OpDial, "", err, status)
		s.logAt(slog.LevelDebug, "dial failed", "error", err) // the machine reports it, classified
		return nil, err
	}
	s.cs = cs
	if s.proc != nil {
		s.proc.ready.Store(true)
	}
	if s.lt.ends != nil {
		s.up() // the endConn reports the end
	} else {
		// The watcher: the streamable HTTP connection cannot be wrapped to see
		// its end (see lifeTransport); its only exported end-of-connection
		// signal is ClientSession.Wait. It ends when the connection ends, which
		// Close guarantees within forceGrace of its ctx.
		go s.watch()
	}
	s.logAt(slog.LevelDebug, "connected", "config", s.desc, "protocol", s.ProtocolVersion(), "session", cs.ID())
	return s, nil
}

// connect builds the SDK transport for cfg and connects a client over it.
func (s *Session) connect(ctx context.Context, cfg Config, opts Options) (*mcp.ClientSession, error) {
	if opts.MCPClient != nil {
		s.client = &sharedClient{c: opts.MCPClient, own: true}
	} else {
		s.onTools = opts.OnToolsChanged
		s.client = acquireClient(opts.Client, s.onTools != nil)
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
		inner = &mcp.IOTransport{Reader: procReader{p}, Writer: procWriter{p}}
	case KindHTTP:
		hc, own := newHTTPClient(s.life, cfg.HTTP)
		s.own = own
		inner = &mcp.StreamableClientTransport{Endpoint: cfg.HTTP.URL, HTTPClient: hc, MaxRetries: cfg.HTTP.MaxRetries}
	case KindSSE:
		hc, own := newHTTPClient(s.life, cfg.SSE)
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
	s.lt = &lifeTransport{inner: inner, life: s.life}
	if cfg.Kind() != KindHTTP {
		s.lt.ends = s
	}
	cs, err := s.client.c.Connect(ctx, s.lt, sopts)
	if err == nil {
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

// probeKey keys the context value that marks a probe's tools/list: the
// session's tools as last listed (see uncachedToolLists).
type probeKey struct{}

// abandon closes what a failed Dial opened. The session's life has ended, so
// nothing here waits for a server's good will.
func (s *Session) abandon(cs *mcp.ClientSession) {
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
		_ = s.proc.shutdown()
	}
	if s.ss != nil {
		_ = s.ss.Close()
	}
	if s.own != nil {
		s.own.CloseIdleConnections()
	}
}

// watch reports the end of the connection to OnEnd, unless Close came first.
func (s *Session) watch() {
	defer close(s.watched)
	err := s.cs.Wait()
	if s.closing.Load() {
		return
	}
	if err == nil {
		err = io.EOF
	}
	err = s.wrap(OpEnd, "", err, nil)
	s.logAt(slog.LevelDebug, "connection ended", "error", err) // the machine reports it, classified
	if s.onEnd != nil {
		s.onEnd(err)
	}
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
	ctx, status := s.withStatus(ctx)
	res, err := s.cs.CallTool(ctx, &cp)
	if err != nil {
		return nil, s.wrap(OpCallTool, cp.Name, err, status)
	}
	return res, nil
}

// ListTools lists every tool, following pagination. Every page is requested
// from the server: the SDK's list cache is never used.
func (s *Session) ListTools(ctx context.Context) ([]*mcp.Tool, error) {
	var tools []*mcp.Tool
	seen := map[string]bool{}
	cursor := ""
	for {
		pctx, status := s.withStatus(ctx)
		res, err := s.cs.ListTools(pctx, &mcp.ListToolsParams{Cursor: cursor})
		if err != nil {
			return nil, s.wrap(OpListTools, "", err, status)
		}
		if cursor == "" {
			first := res.Tools
			s.listed.Store(&first)
		}
		tools = append(tools, res.Tools...)
		cursor = res.NextCursor
		if cursor == "" {
			return tools, nil
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
func (s *Session) Probe(ctx context.Context) error {
	if !s.pingless.Load() {
		pctx, status := s.withStatus(ctx)
		err := s.cs.Ping(pctx, nil)
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
	pctx, status := s.withStatus(ctx)
	pctx = context.WithValue(pctx, probeKey{}, s.listed.Load())
	if _, err := s.cs.ListTools(pctx, &mcp.ListToolsParams{}); err != nil {
		return s.wrap(OpProbe, "", err, status)
	}
	return nil
}

// isMethodNotFound reports whether err carries a JSON-RPC method-not-found
// answer.
func isMethodNotFound(err error) bool {
	var je *jsonrpc.Error
	return errors.As(err, &je) && je.Code == jsonrpc.CodeMethodNotFound
}

// pingRefused reports whether err is a server's refusal of ping itself (method not
// found, or invalid params), as opposed to a failure to reach it.
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
func (s *Session) Close(ctx context.Context) error {
	s.closing.Store(true)
	s.closeOnce.Do(func() { go s.teardown() })
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
// first Close, and ends once everything is closed (bounded once forced).
func (s *Session) teardown() {
	err := s.cs.Close()
	s.client.release(s.cs)
	if s.proc != nil {
		// cs.Close waited for the child, unless the SDK's connection had
		// already been closed by a read error: reaped either way soon.
		select {
		case <-s.proc.exited:
		case <-s.life.Done():
			s.proc.kill()
			<-s.proc.exited
		}
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
		// Aborts every HTTP request, ends the SSE stream, and makes the stdio
		// shutdown kill instead of waiting.
		s.kill(fmt.Errorf("%w: %w", ErrForcedClose, cause))
		if s.proc != nil {
			s.proc.kill()
		}
		if c := s.lt.conn; c != nil {
			// Fails the calls in flight, which the SDK's graceful close waits
			// for. Closing is bounded now that life has ended, but it is not
			// Close's to wait for: teardown's end is.
			go func() { _ = c.Close() }()
		}
	})
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

// withStatus returns ctx with a place for the HTTP status of the request made under
// it, for an HTTP session; other sessions have no status to record, and skip the
// allocation.
func (s *Session) withStatus(ctx context.Context) (context.Context, *answers) {
	if !s.http {
		return ctx, nil
	}
	return withStatus(ctx)
}

// wrap returns err as an *Error of op, with what the HTTP answers said, if
// any.
func (s *Session) wrap(op, tool string, err error, status *answers) error {
	e := &Error{Server: s.name, Op: op, Tool: tool, Err: err, red: s.red}
	if status != nil {
		e.HTTPStatus = int(status.status.Load())
		e.Sent = status.sent.Load()
	}
	return e
}
