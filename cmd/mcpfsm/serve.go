package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/gateway"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// gatewayGCPercent is the garbage collector's target (GOGC) of mcpfsm serve when the
// environment does not set GOGC. The go-sdk allocates a 32 KB decoder buffer for every
// JSON value it unmarshals, several for every message, so a busy gateway makes garbage
// far faster than it keeps memory: at Go's default (100) it spent a third of its time
// collecting, and its calls per second at 64 clients fell short of the npm gateways'
// by a quarter. At 200 it collects half as often, for 10 MB more at its peak (see
// docs/performance.md, Gateway); an idle gateway's heap is small either way.
const gatewayGCPercent = 200

// gatewayGC sets the collector's target for serve, unless GOGC (read with getenv)
// says otherwise.
func gatewayGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(gatewayGCPercent)
	}
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("serve", "[--http ADDR [--stdio]] [--http-status ADDR] [flags] CONFIG", `
Serve one MCP server in front of every server of a servers config: the gateway.
Each server behind it is held by its own connection, kept alive and healed by
its lifecycle; its tools, prompts, resources and resource templates are shown
under names prefixed with the server's (files__read_file: see the config's
gateway.separator and each server's prefix, include, exclude and rename keys).
A server that is down keeps its tools listed, and a call to one of them fails at
once with a tool error result that says why (state, last failure, next try).

By default the gateway speaks MCP over stdin and stdout, for a host that launches
it as a command, and exits when its client closes stdin or stdout (at
stdin's end the requests in flight first get up to 5 s to be answered; a client
that closes stdin and leaves an answer unread for 30 s is gone); a line that is
not a message gets a JSON-RPC error and is skipped. At Ctrl-C or SIGTERM the
requests in flight (on stdio as over HTTP) get up to 5 s to be answered; those
left are then cancelled and answered with a JSON-RPC error (-32603) saying the
gateway is shutting down; a second Ctrl-C or SIGTERM exits at
once (1). With --http it
serves streamable HTTP on ADDR (a host without an address, such as :8080, binds
127.0.0.1; write 0.0.0.0:8080 to listen on every interface): stateful sessions
for clients before protocol 2026-07-28, stateless requests for clients on it.
--stdio serves stdio as well.

--token-env NAME makes the HTTP front require "Authorization: Bearer TOKEN",
TOKEN being the value of the environment variable NAME. Whoever its clients
are, the HTTP front holds at most --max-sessions sessions and 2026-07-28
subscriptions/listen streams, and --body-memory MiB of request bodies (each until its request is answered); past them a client gets
503 with Retry-After, and a request over 4 MiB gets 413 with its JSON-RPC
error (the request fails; its session goes on).

On SIGHUP (and, with --watch, when the config file or a spec it names changes) the config is read
again and adopted without a restart: servers added, removed, reconnected or
retuned; front sessions stay open and are told of the lists that changed. Each
reload is said on stderr; a config that does not load leaves the running one in
place, and its errors are logged with their file:line:column.

--replica I/N, for N replicas behind nginx hashing the Mcp-Session-Id header
(upstream { hash $http_mcp_session_id; server A; server B; }, this replica
being the I-th server line), mints session IDs that nginx sends back to this
replica. nginx must also send a loopback Host (proxy_set_header Host
localhost: a gateway on loopback refuses another with 403) and pass event
streams as they come (proxy_http_version 1.1; proxy_buffering off): the
README's Scale out has the whole block. A session whose replica is gone gets
404 from the other: clients must then initialize a new session.

With --http-status ADDR it also serves the status page of mcpfsm run (see
mcpfsm run --help): every server behind the gateway on its lifecycle picture,
/status as JSON and /metrics as Prometheus text; loopback only unless
--http-status-remote is given.

Log records (log/slog, text) go to stderr at warning level and above; a host
that leaves stderr unread holds up nothing (past 256 writes waiting, they are
dropped, and counted).

The garbage collector's target is GOGC=200 unless the environment sets GOGC: a
gateway makes garbage fast (the go-sdk's JSON decoding), and collecting half as
often buys a third more calls per second for about 10 MB at its peak.`, stderr)
	httpAddr := fs.String("http", "", "serve streamable HTTP on this address (host:port; no host binds 127.0.0.1)")
	alsoStdio := fs.Bool("stdio", false, "with --http, serve stdio as well")
	tokenEnv := fs.String("token-env", "", "require the bearer token held by this environment variable on HTTP")
	watch := fs.Bool("watch", false, "reload when the config file, or a spec file it names, changes (polled)")
	watchEvery := fs.Duration("watch-interval", time.Second, "how often --watch looks at the config file (a change is adopted once two looks in a row agree)")
	replica := fs.String("replica", "", "I/N: replica I of N behind nginx hashing Mcp-Session-Id")
	sessionTimeout := fs.Duration("session-timeout", 30*time.Minute, "close an HTTP front session idle this long (0: never)")
	maxSessions := fs.Int("max-sessions", gateway.DefaultMaxSessions, "the most HTTP front sessions and 2026-07-28 listen streams open at once; one more gets 503 (0: no bound)")
	bodyMemory := fs.Int64("body-memory", gateway.DefaultBodyMemory>>20, "MiB of request bodies the HTTP front holds at once; a request finding no room waits up to 10s, then gets 503 (0: no bound)")
	readyWait := fs.Duration("ready-wait", 0, "how long a request waits for a server that has no session (0: fail at once)")
	startupWait := fs.Duration("startup-wait", 5*time.Second, "at startup, how long listing waits for the servers to list theirs (0: not at all)")
	statusURI := fs.String("status-resource", "", "serve every server's status as JSON at this resource URI (such as mcpfsm://status)")
	var sf statusFlags
	sf.add(fs)
	if code, done := parse(fs, args, stdout); done {
		return code
	}
	// From here to the end, the close included: a write to a stdout (or stderr)
	// whose reader is gone fails (a host that closes the gateway's stdout ends its
	// stdio session, and the gateway closes its backends as at stdin's end), and
	// SIGHUP reloads (one that comes before the loop below reads it is kept).
	hup, stopSignals := catchHangupAndPipe()
	defer stopSignals()
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "mcpfsm serve: want exactly one CONFIG")
		return 2
	}
	if *watchEvery <= 0 {
		fmt.Fprintf(stderr, "mcpfsm serve: --watch-interval %v: must be positive\n", *watchEvery)
		return 2
	}
	// In MiB: past 1<<43 the bytes overflow an int64 (and wrapped into "no bound").
	if *bodyMemory < 0 || *bodyMemory >= 1<<43 || *maxSessions < 0 {
		fmt.Fprintf(stderr, "mcpfsm serve: --body-memory %d, --max-sessions %d: each must be 0 (no bound) or a positive number (--body-memory under 2^43 MiB)\n", *bodyMemory, *maxSessions)
		return 2
	}
	if *alsoStdio && *httpAddr == "" {
		fmt.Fprintln(stderr, "mcpfsm serve: --stdio goes with --http (stdio is the default without it)")
		return 2
	}
	token := ""
	if *tokenEnv != "" {
		token = os.Getenv(*tokenEnv)
		if token == "" {
			fmt.Fprintf(stderr, "mcpfsm serve: --token-env %s: the variable is not set or empty\n", printable(*tokenEnv, maxLine))
			return 2
		}
		if *httpAddr == "" {
			fmt.Fprintln(stderr, "mcpfsm serve: --token-env goes with --http")
			return 2
		}
	}
	if *startupWait <= 0 {
		*startupWait = -1 // not at all: to package gateway, 0 is its default
	}
	// Everything serve says from here on goes through a queue: a host may leave
	// stderr unread, and a write to a full pipe would block whoever logs.
	lw := newQueuedWriter(stderr, func(n int) []byte {
		return fmt.Appendf(nil, "mcpfsm serve: %d writes to stderr dropped: it was not read\n", n)
	})
	defer lw.close(time.Second)
	stderr = lw
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	opts := gateway.Options{
		Implementation: &mcp.Implementation{Name: "mcpfsm-gateway", Version: version()},
		Logger:         logger, History: 256, ReadyWait: *readyWait, StatusResource: *statusURI, StartupWait: *startupWait,
	}
	if *replica != "" {
		i, n, err := gateway.ParseReplica(*replica)
		if err == nil {
			opts.SessionID, err = gateway.NginxHashSessionID(i, n)
		}
		if err != nil {
			fmt.Fprintln(stderr, "mcpfsm serve:", err)
			return 2
		}
	}
	path := fs.Arg(0)
	last := stamp(path) // before the load: a change made meanwhile is not missed
	cfg, err := mcpfsm.LoadConfig(path)
	if err != nil {
		fmt.Fprintln(stderr, errorText(err))
		return 1
	}
	specs := specFiles(cfg) // the lifecycle files the config names, watched with it
	watched := watcher{last: last + stampFiles(specs)}
	web, err := newStatusServer(&sf)
	if err != nil {
		fmt.Fprintln(stderr, "mcpfsm serve:", errorText(err))
		return 2
	}
	if web != nil {
		opts.MeterProvider = web.MeterProvider()
		defer func() {
			// After the gateway's close (deferred below, so run first).
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = web.Close(cctx)
		}()
	}
	g, err := gateway.New(cfg, opts)
	if err != nil {
		fmt.Fprintln(stderr, "mcpfsm serve:", errorText(err))
		return 1
	}
	if web != nil {
		web.Serve(g.Manager())
		// Said on stderr: stdout may be the protocol's.
		fmt.Fprintf(stderr, "mcpfsm serve: status page at %s\n", web.URL())
	}
	ctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var srv *http.Server
	stdio := *httpAddr == "" || *alsoStdio
	out := &watchedWriter{w: os.Stdout}
	if stdio {
		if f, restore := cuttableStdout(); f != nil {
			defer restore() // after the close below
			out = &watchedWriter{w: f, f: f}
		}
	}
	var front *transport.StdioFront
	signalled := false // the loop ended at Ctrl-C or SIGTERM
	// The stdio session runs under a context of its own, not the signal's: the
	// go-sdk's Run closed the session at once as its context ended, and no answer
	// could be written then (see front.Shutdown below).
	frontCtx, stopFront := context.WithCancel(context.WithoutCancel(ctx))
	defer stopFront()
	defer func() {
		// In this order, whatever ended the loop below: at a signal, the HTTP
		// server's shutdown and the stdio front's, side by side, each giving its
		// requests in flight shutdownGrace to be answered (the stdio front then
		// answers those left with the shutdown error itself, and ends its
		// session, which cancels them); then the gateway's
		// close, which cancels the requests still in flight, closes the front's
		// sessions (a stdio front's Run returns then) and the backends; then the
		// fronts' goroutines end, within what is left of the close's 15 s: a
		// stdio front whose client reads no more answers never ends (the SDK's
		// close of its session waits for a write to stdout), and serve exits
		// without it, unless stdout's writes can be cut short (cuttableStdout):
		// then a write waits at most closeWriteGrace past the grace (so the
		// shutdown's answers, written once it is over, get it whole), and the
		// close is not held by a client that reads no more.
		cutAt := time.Now().Add(closeWriteGrace)
		var frontDone chan struct{}
		if front != nil && signalled {
			cutAt = cutAt.Add(shutdownGrace)
			frontDone = make(chan struct{})
			go func() {
				defer close(frontDone)
				fctx, cancel := context.WithDeadline(context.Background(), cutAt)
				defer cancel()
				_ = front.Shutdown(fctx, shutdownGrace, gateway.ShutdownMessage)
			}()
		}
		out.cut(cutAt)
		if srv != nil {
			sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
			_ = srv.Shutdown(sctx)
			cancel()
		}
		if frontDone != nil {
			<-frontDone
		}
		cctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		// The gateway's close leaves the fronts a moment of the 15 s: a close
		// that took them all (a backend slow to close) left the wait below none,
		// and it blamed a front that had ended.
		gctx, gcancel := context.WithTimeout(cctx, 15*time.Second-frontsGrace)
		err := g.Close(gctx)
		gcancel()
		if err != nil {
			fmt.Fprintln(stderr, "mcpfsm serve: closing:", errorText(err))
		}
		stop()
		stopFront()
		fronts := make(chan struct{})
		go func() {
			wg.Wait()
			close(fronts)
		}()
		select {
		case <-fronts:
		case <-cctx.Done():
			fmt.Fprintln(stderr, "mcpfsm serve: a front did not end (a stdio client that reads no answers?): exiting without it")
		}
	}()
	failed := make(chan error, 2)

	if *httpAddr != "" {
		addr := *httpAddr
		if host, port, err := net.SplitHostPort(addr); err == nil && host == "" {
			addr = net.JoinHostPort("127.0.0.1", port)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Fprintln(stderr, "mcpfsm serve:", err)
			return 1
		}
		srv = &http.Server{
			Handler:           bodyDeadline(requestBodyTimeout, g.Handler(gateway.HTTPOptions{Token: token, SessionTimeout: *sessionTimeout, MaxSessions: noBound(*maxSessions), BodyMemory: noBound(*bodyMemory << 20)})),
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       idleTimeout,
			ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		}
		// Said on stderr: with --stdio, stdout is the protocol's.
		fmt.Fprintf(stderr, "mcpfsm serve: http://%s/ (%s from %s)\n", ln.Addr(), count(len(cfg.Servers), "server"), printable(path, maxLine))
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				failed <- err
			}
		}()
	}
	stdioDone := make(chan error, 1)
	// hostCtx ends with the stdio session too (the host is gone): a reload under
	// way then stops at once, where serve's loop saw the end only once the reload
	// was over (up to its 30 s, a removed backend slow to close).
	hostCtx, hostGone := context.WithCancel(ctx)
	defer hostGone()
	var hungUp <-chan struct{}     // stdin's writer is gone
	var readerGone <-chan struct{} // stdout's reader is gone
	if stdio {
		front = transport.ServerStdio(os.Stdin, out)
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := g.Server().Run(frontCtx, front)
			stdioDone <- err
			hostGone()
		}()
		hungUp = watchHangup(ctx, 0, 250*time.Millisecond)
		readerGone = watchReaderGone(ctx, 1, 250*time.Millisecond)
	}
	var unread <-chan time.Time // once stdin is hung up: is stdout read?

	var tick <-chan time.Time
	if *watch {
		t := time.NewTicker(*watchEvery)
		defer t.Stop()
		tick = t.C
	}
	reload := func(why string) {
		next, err := mcpfsm.LoadConfig(path)
		if err != nil {
			logger.Warn("mcpfsm serve: reload failed, keeping the running config", "why", why, "err", errorText(err))
			return
		}
		specs = specFiles(next)
		rctx, cancel := context.WithTimeout(hostCtx, 30*time.Second)
		res, err := g.Reload(rctx, next)
		cancel()
		if err != nil {
			logger.Warn("mcpfsm serve: reloaded with errors", "why", why, "result", res.String(), "err", errorText(err))
			return
		}
		// Said on stderr, as the address is: serve logs warnings only.
		fmt.Fprintf(stderr, "mcpfsm serve: reloaded (%s): %s\n", why, res)
	}
	for {
		select {
		case <-ctx.Done():
			signalled = true
			return 0
		case err := <-stdioDone:
			// The client closed stdin: the host that launched the gateway is gone.
			if err != nil && ctx.Err() == nil && !errors.Is(err, io.EOF) {
				fmt.Fprintln(stderr, "mcpfsm serve: stdio:", errorText(err))
			}
			return 0
		case err := <-failed:
			fmt.Fprintln(stderr, "mcpfsm serve:", err)
			return 1
		case <-readerGone:
			// The host is gone (killed: stdin's end, and stdout broken): no
			// answer can reach it, and the requests in flight are not given the
			// 5 s at stdin's end (the front learnt of stdout's end only at a
			// write, and a call that did not end wrote nothing).
			fmt.Fprintln(stderr, "mcpfsm serve: stdout's reader is gone (a write would fail: broken pipe): exiting")
			return 0
		case <-hungUp:
			// The host closed stdin. The stdio session ends once its requests
			// are answered (or given up); but answers its host does not read
			// (stdout full) hold it for ever, and with it serve: the front
			// cannot read stdin's end past an answer it cannot write, nor the
			// go-sdk end the session with a write under way.
			hungUp = nil
			t := time.NewTicker(250 * time.Millisecond)
			defer t.Stop()
			unread = t.C
		case <-unread:
			if d := out.blocked(); d > hungUpUnread {
				fmt.Fprintf(stderr, "mcpfsm serve: stdin is closed, and stdout has not been read for %v: exiting\n", d.Round(time.Second))
				out.cut(time.Now()) // the host is gone: nothing is to wait for it
				return 0
			}
		case <-hup:
			reload("SIGHUP")
		case <-tick:
			if watched.changed(stamp(path) + stampFiles(specs)) {
				reload("the config file or a spec it names changed")
			}
		}
	}
}

// hungUpUnread is how long a write to stdout may wait, once stdin's writer is gone,
// before serve ends as at the end of stdin: the host has gone without reading what
// it was sent. As long as the HTTP front gives a client that leaves its writes
// waiting: a reader merely slow (a pager at the end of a pipeline) is not cut.
const hungUpUnread = 30 * time.Second

// A watchedWriter tells how long the write under way, if any, has waited (the stdio
// front writes one message at a time), and cuts its writes short where its file
// lets it.
type watchedWriter struct {
	w     io.Writer
	f     *os.File     // w, where its writes can be cut short (cuttableStdout); or nil
	cutAt time.Time    // the earliest cut asked for, if any
	since atomic.Int64 // when the write under way began (Unix nanoseconds), or 0
}

// cut has a write under way, and any later one, fail once it waits past at (or at
// once, at a time past), where the writer's file lets it; a failed write ends the
// stdio session. An earlier cut stands. serve's goroutine alone calls it.
func (w *watchedWriter) cut(at time.Time) {
	if w.f == nil || !w.cutAt.IsZero() && w.cutAt.Before(at) {
		return
	}
	w.cutAt = at
	_ = w.f.SetWriteDeadline(at)
}

// closeWriteGrace is how long, once serve begins to close, a write to stdout may
// wait (where it can be cut short): as long as the HTTP server's shutdown gives its
// requests.
const closeWriteGrace = 5 * time.Second

func (w *watchedWriter) Write(p []byte) (int, error) {
	w.since.Store(time.Now().UnixNano())
	defer w.since.Store(0)
	return w.w.Write(p)
}

// blocked is how long the write under way has waited, or 0.
func (w *watchedWriter) blocked() time.Duration {
	if s := w.since.Load(); s != 0 {
		return time.Since(time.Unix(0, s))
	}
	return 0
}

// shutdownGrace is how long, at Ctrl-C or SIGTERM, the requests in flight of each
// front (HTTP and stdio, side by side) are given to be answered before they are
// cancelled and answered with the shutdown error.
const shutdownGrace = 5 * time.Second

// frontsGrace is how long, at least, serve waits for its fronts to end once the
// gateway has closed.
const frontsGrace = 500 * time.Millisecond

// requestBodyTimeout bounds how long a client of the HTTP front takes to send a
// request's body, and idleTimeout how long a kept-alive connection (of the front, or
// of the status server) waits for its next request: without them a client that
// trickles a body (or opens connections and sends nothing more) holds a connection,
// two goroutines and their buffers for ever.
// The server's ReadTimeout cannot do it: it would also end the long-lived answers
// (an SSE stream, a long call), whose reads of the connection it would fail.
const requestBodyTimeout = 30 * time.Second

// idleTimeout: see requestBodyTimeout. A variable for tests.
var idleTimeout = 2 * time.Minute

// bodyDeadline gives the reading of each request's body d, from the moment its
// headers are read; the deadline is lifted once the body is read whole, so that the
// server's watch for the client going away (a read of the connection) is not cut.
func bodyDeadline(d time.Duration, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			rc := http.NewResponseController(w)
			if rc.SetReadDeadline(time.Now().Add(d)) == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, lift: func() { _ = rc.SetReadDeadline(time.Time{}) }}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// deadlineBody lifts its connection's read deadline once its body is read whole.
type deadlineBody struct {
	io.ReadCloser
	lift   func()
	lifted bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.lifted {
		b.lifted = true
		b.lift()
	}
	return n, err
}

// noBound maps a flag's 0 (no bound) to HTTPOptions' negative (0 there is the
// default).
func noBound[T int | int64](v T) T {
	if v <= 0 {
		return -1
	}
	return v
}

// stamp is what --watch compares: a digest of the config file's contents, or why it
// cannot be read. Not its modification time and size: a rewrite may keep both (cp -p,
// rsync -t, tar, two writes within the file system's timestamp granularity), and a
// file made readable again changes neither.
func stamp(path string) string {
	data, err := machine.ReadFile(path)
	if err != nil {
		return "unreadable: " + err.Error()
	}
	sum := sha256.Sum256(data)
	return string(sum[:])
}

// specFiles returns the lifecycle files cfg's servers name (spec), each once.
func specFiles(cfg *mcpfsm.Config) []string {
	var files []string
	for _, s := range cfg.Servers {
		if s.SpecFile != "" && !slices.Contains(files, s.SpecFile) {
			files = append(files, s.SpecFile)
		}
	}
	slices.Sort(files)
	return files
}

// stampFiles is stamp of each of files, in order: what --watch compares of the
// lifecycle files the config names, besides the config (a spec edited alone, or
// swapped with the config in a ConfigMap whose config is unchanged, is a change).
func stampFiles(files []string) string {
	var b strings.Builder
	for _, f := range files {
		b.WriteString("\x00" + f + "\x00" + stamp(f))
	}
	return b.String()
}

// A watcher tells, from the stamps --watch reads one interval apart, when the config
// file has changed: once two readings in a row agree on a stamp other than the one
// last adopted. A file written in place in several writes may be read between two
// (a config that parses, with half the servers, would be adopted for an interval).
type watcher struct {
	last    string // adopted
	pending string // read once, not yet adopted
}

// changed takes the stamp read now, and reports whether it is a change to adopt.
func (w *watcher) changed(s string) bool {
	if s == w.last {
		w.pending = ""
		return false
	}
	if s != w.pending {
		w.pending = s
		return false
	}
	w.last, w.pending = s, ""
	return true
}

// version is the module's version as the build recorded it.
func version() string {
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "dev"
}
