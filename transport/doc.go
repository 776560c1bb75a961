// Package transport connects to MCP servers over the go-sdk's transports
// (stdio command, streamable HTTP, legacy SSE, in-memory) and hides them
// behind one type, Session. Nothing above this package needs the SDK's
// transport types.
//
// The one transport for the other side of the pipes, [ServerStdio], is the
// stdio front of mcpfsm serve: a server's stdin and stdout, read as this
// package reads a stdio server's, line by line, where a line that is not a
// message is answered with an error instead of ending the session.
//
// # Lifetimes
//
// [Dial] starts, connects and initializes a session. Its context bounds the
// dial only: the session lives until [Session.Close] or until the connection
// ends by itself, which [Options.OnEnd] reports (once, on its own goroutine,
// never after Close was called).
//
// [Session.Close] is graceful until its context ends, then forced: the stdio
// child's process group is killed and the child reaped, every HTTP request in
// flight is aborted, the in-memory pipe is closed. A forced Close returns
// within a short bound whatever the server does. Note that the graceful close
// (the SDK's) waits for the calls in flight, and for the cancellation notice
// the SDK sends for a call whose context ended (bounded by 5s): the teardown
// context decides how long a close may take. A stdio child is closed in the
// MCP specification's order: its stdin is closed; SIGTERM at half the time
// the close context leaves (2s without a deadline); SIGKILL when it ends.
//
// A stdio child runs in a process group of its own (on unix) and is reaped
// by a goroutine of the session as soon as it exits, whatever else happens: no
// zombie is left on any path. When the child exits, what is left of its group
// is killed too. On Linux the child is also killed when the client process
// dies (Pdeathsig; see setParentDeathSignal for its one caveat); a program that
// exits before its sessions have finished closing calls [KillAll] for the rest
// of their groups (mcpfsm's commands do). The last 4
// KiB of its stderr are kept (and passed on to Stdio.Stderr) for the errors
// of a child that fails to start or dies ([Error.StderrTail]). A line the
// child writes to stdout that is not a message and could not be one (a
// banner, a log record: a line that does not start as a JSON object or batch
// does, a JSON scalar, an object without a "jsonrpc" member, an array without
// such an object) goes the same way, after "stdout: ", and is skipped, as the
// TypeScript and Python SDKs' clients skip it; the session's first such line
// is logged. Such lines reach Stdio.Stderr in the order printed, but not in
// order with the child's stderr (two pipes), and without holding the session
// up: up to 64 KiB of them wait for a Stdio.Stderr that is slow to take them,
// the rest are dropped and counted. A broken message (a line that starts as
// one, an object with a "jsonrpc" member) ends the session, as in the go-sdk.
//
// Beyond the SDK's own, a session runs at most these goroutines while it
// lives, each ending with the session: for streamable HTTP, the watcher of
// [mcp.ClientSession.Wait] (OnEnd needs it: the streamable HTTP connection
// cannot be wrapped to see its end, because the SDK drives it through an
// unexported interface); for stdio, the reaper, exec's copier of the
// child's stderr, and, while lines the child printed to stdout wait for
// Stdio.Stderr, their passer (which, like exec's copier, ends when
// Stdio.Stderr takes them). A probe runs on a goroutine of its own while it is under
// way (see Bounds). Stdio, in-memory and SSE connections are wrapped instead:
// the SDK closes its connection once it stops for good, and a close that is
// not ours is the end, reported (on a goroutine started then) with the error
// Wait would have returned.
//
// # Bounds
//
// Nothing a server does wedges a session, nor grows its memory without bound:
//   - a write to a stdio child's stdin ends with its context and with the
//     session's life, also while a server that stopped reading its stdin
//     blocks it (the SDK writes a whole message under its own lock and looks
//     at the context only before it starts). A request waiting behind a
//     blocked write gives up with its own context, the stream intact; a write
//     interrupted after part of its message went out has broken the stream,
//     and the session ends (OnEnd) with its child killed.
//   - the SDK closes a connection while holding the lock every request needs:
//     that close never waits for the server. A stdio connection that ends by
//     itself (garbage or an over-size line on stdout, stdout closed) has its
//     child killed, at once or after a moment's grace to exit on its own, off
//     that lock, and OnEnd reports it promptly.
//   - [Session.Probe] returns by its context even if the SDK waits on its own
//     lock; a session whose SDK is still stuck 2s later is brought down.
//     Close returns by its context plus a short grace. Calls need no
//     goroutine of their own: the write interruption bounds them.
//   - an HTTP response body other than an event stream is read up to
//     [MaxResponseBody], the body of a non-2xx answer up to [MaxErrorBody];
//     the SDK bounds each event of a stream.
//   - a listing follows at most [MaxListPages] pages, [MaxListItems] items
//     and [MaxListBytes] bytes of them ([ErrListTooLong]).
//   - [Error.Error] quotes at most [MaxErrorText] bytes of its cause.
//
// # Probe
//
// [Session.Probe] puts a request on the wire on every transport and protocol
// version: ping, the cheapest (the SDK's server answers it on 2026-07-28 over
// stdio and in memory too), or, for a server that refuses ping with
// method-not-found or invalid-params (the SDK's stateless HTTP server on
// 2026-07-28), the first page of tools/list, at once and for the rest of the
// session. The session's client never caches tools/list results, so that
// request reaches the server even when the server gives them a TTL (the SDK
// would otherwise answer from its cache on 2026-07-28). Nor does it keep
// resources/read results: [ReadResource] reaches the server every time and
// leaves no copy in the SDK's session, which would otherwise keep every
// result it ever read, by URI, for the session's life; [ListPrompts],
// [ListResources] and [ListResourceTemplates] do the same for pages, which the
// SDK keeps by cursor.
//
// # Errors
//
// Every error is an [*Error] naming the server and the operation ([Error.Op])
// and wrapping the SDK's error unchanged, so that errors.Is and errors.As see
// mcp.ErrConnectionClosed, mcp.ErrSessionMissing, *jsonrpc.Error, context
// errors, io.EOF, syscall errors, *url.Error and *exec.ExitError through it.
// Over HTTP, [Error.HTTPStatus] holds the status of a non-2xx answer to the
// failed request (401, 403, 404, 429, 5xx...), which the SDK keeps only as
// text. Its text, the logs and [Config.String] never contain a secret of the
// configuration (header values, environment values, command arguments, URL
// userinfo and query values; and, where an argument or an environment value
// carries credentials as a header does, "Authorization: Bearer T" or a URL with
// a token in its query, the token alone, which a proxy quotes as its remote
// server said it).
//
// # Facts (go-sdk v1.8.0, measured with real servers, pinned by tests)
//
// Messages below omit the prefix `mcp server "NAME": OP: `. "bare" means the
// *Error wraps exactly that error. Codes: -32601 method not found, -32602
// invalid params, -32003 client closing, -32005 rejected by transport (the
// last two are internal to the SDK; test them with
// errors.Is(err, &jsonrpc.Error{Code: c})). After "client is closing:" the
// cause is text only: neither it nor -32003 is in the chain.
//
// Negotiated protocol (the SDK client tries server/discover first): stdio and
// in-memory (SDK servers) 2026-07-28; streamable HTTP 2025-11-25 with a
// session ID; stateless streamable HTTP 2026-07-28; SSE 2025-11-25 (Dial asks
// for it: 2026-07-28 has no SSE binding, yet the SDK's SSE server sometimes
// offers it to server/discover, because Server.Connect learns what its
// transport supports only after the SSE transport has told the client where
// to post). ID() is "" except for stateful streamable HTTP.
//
// A call's context ends (any transport, frozen or slow server): bare
// context.DeadlineExceeded (or context.Canceled). Over streamable HTTP, an answer
// already under way as one JSON message (not an event stream) is still read for up to
// 5s after that, and then cut: the go-sdk's client fails the whole session when it
// cannot read such a body.
//
// stdio:
//   - child SIGKILLed, call in flight: `calling "tools/call": EOF`, is io.EOF.
//   - later calls: `connection closed: calling "tools/call": client is
//     closing: EOF`, is mcp.ErrConnectionClosed (not io.EOF).
//   - OnEnd, within milliseconds: `signal: killed`, an *exec.ExitError (the
//     child's exit status: `exit status 3` if it exits by itself). Close
//     afterwards returns the same exit status. If a descendant that left the
//     child's process group (setsid) still holds its stdout and stderr, the
//     same end about 1.25s after the child's (exec's WaitDelay of 1s for
//     stderr, then 250ms for the reader to take the child's last words; then
//     the pipe is closed under the reader).
//   - Close of a clean server: nil.
//   - Close of a server that ignores stdin EOF but not SIGTERM: at half the
//     context's time, `signal: terminated`, an *exec.ExitError, not forced.
//   - Close of a server that ignores stdin EOF and SIGTERM: at the context's
//     end, `forced close: the close context ended first: context deadline
//     exceeded` + "\n" + `signal: killed`: is ErrForcedClose and
//     context.DeadlineExceeded, an *exec.ExitError.
//   - a server that stops reading stdin under a write: the call returns
//     bare context.DeadlineExceeded at its context's end; OnEnd `the write to
//     the server's stdin was interrupted part-way: the stream is broken
//     (after N bytes): context deadline exceeded`.
//   - a broken message on stdout mid-session: OnEnd within milliseconds,
//     `invalid character ...`; an over-size line: `inbound JSON-RPC frame exceeded the
//     configured maximum line length`; stdout closed: `EOF` after 250ms (the
//     child is given that long to exit: then its exit status instead).
//   - the SDK's ping works (even on 2026-07-28); refused:
//     `calling "ping": method not found: "ping"`, code -32601.
//   - Dial: initialize hangs: bare context.DeadlineExceeded; a broken
//     message on stdout: `connection closed: calling "initialize": client is closing:
//     invalid character ...`; no command: `fork/exec PATH: no such file or
//     directory`, is syscall.ENOENT. A failed handshake kills the child at
//     once (Dial does not wait for its context).
//
// streamable HTTP (stateful):
//   - server stopped, call in flight: `calling "tools/call": sending
//     "tools/call": rejected by transport: Post "URL": EOF`: code -32005,
//     is io.EOF, an *url.Error.
//   - server stopped, later calls: `... rejected by transport: Post "URL":
//     dial tcp ADDR: connect: connection refused`: code -32005, is
//     syscall.ECONNREFUSED, an *url.Error. The session stays open.
//   - the first POST after a server stopped or restarted may fail on a pooled
//     connection the server closed (net/http does not retry a POST):
//     `... rejected by transport: Post "URL": EOF` or `...: http: server
//     closed idle connection`: code -32005, an *url.Error. Also stateless.
//   - OnEnd only when the event stream has failed to reconnect
//     HTTP.MaxRetries times: `standalone SSE stream: failed to reconnect
//     (session ID: ID): connection failed after N attempts: Get "URL": ...`,
//     a plain string (no sentinel). The SDK waits 1s×1.5^k plus full jitter
//     between attempts: with the default 5, 13 to 26s (20s measured); with
//     MaxRetries -1, at once: `standalone SSE stream: exceeded 0 retries
//     without progress (session ID: ID)`. Calls after the end: is
//     mcp.ErrConnectionClosed. Close then: `Delete "URL": ... connection
//     refused`.
//   - HTTP 500, 502, 503, 504, 429: `calling "tools/call": rejected by
//     transport: sending "tools/call": Service Unavailable`: code -32005
//     (no *url.Error). The session stays usable.
//   - HTTP 400, 401, 403 without a JSON-RPC body: `calling "tools/call":
//     sending "tools/call": Unauthorized`: no sentinel, no code, and the
//     session is broken: OnEnd at once (same text), later calls
//     mcp.ErrConnectionClosed.
//   - HTTP 404 (the server forgot the session): `calling "tools/call":
//     sending "tools/call": failed to connect (session ID: ID): session not
//     found`: is mcp.ErrSessionMissing. The server did not run the call. The
//     session is broken: OnEnd at once, is mcp.ErrSessionMissing; later
//     calls: `connection closed: ... client is closing: ...session not
//     found`, is mcp.ErrConnectionClosed but not mcp.ErrSessionMissing. Close:
//     nil, no DELETE.
//   - ping refused: `calling "ping": method not found: "ping"`, code -32601.
//   - Close of a server that never answers DELETE: at the context's end,
//     `forced close: the close context ended first: context deadline
//     exceeded` + "\n" + `Delete "URL": forced close: ...`: is ErrForcedClose
//     and context.DeadlineExceeded, an *url.Error. Clean Close: nil.
//
// stateless streamable HTTP (2026-07-28):
//   - server stopped: the same -32005 errors; OnEnd never fires (nothing is
//     open between requests), and a restart loses nothing.
//   - a server's error answer comes as HTTP 400 with a JSON-RPC body: for an
//     unknown tool, `calling "tools/call": sending "tools/call": unknown tool
//     "x": rejected by transport: Bad Request`: the first *jsonrpc.Error
//     errors.As finds is the server's (-32602), and errors.Is(-32005) is true
//     as well (HTTPStatus 400). Only a first code of -32005 means the
//     transport rejected.
//   - the SDK's ping: `calling "ping": sending "ping": missing or invalid
//     _meta field "io.modelcontextprotocol/protocolVersion": rejected by
//     transport: Bad Request` (first code -32602): it reaches the HTTP handler,
//     never the MCP server. The SDK's ListTools answers from its cache while
//     the server's ttlMs lasts. Probe falls back to tools/list, uncached.
//   - Close: nil, no DELETE.
//
// SSE:
//   - server stopped: call in flight `calling "tools/call": EOF` (io.EOF);
//     OnEnd within milliseconds, `EOF`; later calls mcp.ErrConnectionClosed.
//     A restart of the server ends the session the same way.
//   - any non-2xx answer to a POST: `calling "tools/call": failed to write:
//     500 Internal Server Error`: a plain string (no sentinel, no code), and
//     the session is broken (OnEnd, then mcp.ErrConnectionClosed).
//   - ping refused: code -32601. Close: nil (it sends nothing to hang on).
//
// in-memory:
//   - server closes the session: call in flight `calling "tools/call": EOF`;
//     OnEnd `EOF`; later calls mcp.ErrConnectionClosed.
//   - Close with a call in flight is forced at the context's end; the call
//     gets `calling "tools/call": EOF`.
//
// The SDK transports' Connect context: SSE keeps it for its event stream (the
// session dies with it), streamable HTTP detaches from it, the command and
// in-memory transports ignore it. Dial hands them a context that outlives it.
//
// Handler contexts (the client's handlers, with Options.MCPClient): a
// notification's handler (tools/list_changed) gets a context with the values
// of Dial's context (never its end). A request the server makes while serving
// a call (sampling, elicitation) gets one with Dial's values on 2025-11-25,
// but on 2026-07-28 the SDK's client fulfils it inside the call (multi
// round-trip, SEP-2322): its handler gets the call's context.
package transport
