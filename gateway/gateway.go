package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/internal/turn"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Options configure a Gateway. The zero value is ready to use.
type Options struct {
	// Implementation is the gateway's name and version, as its clients see them;
	// {"mcpfsm-gateway", "dev"} when nil. Its Title, when empty, lists the servers
	// behind the gateway.
	Implementation *mcp.Implementation
	// Logger receives the gateway's records and its backends' (see
	// mcpfsm.ManagerOptions.Logger); slog.Default() when nil.
	Logger *slog.Logger
	// Observer, History, Client, MeterProvider and TracerProvider are passed to
	// the Manager (see mcpfsm.ManagerOptions).
	Observer       func(server string, tr machine.Transition)
	History        int
	Client         *mcp.Implementation
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
	// ReadyWait is how long a request waits for a backend that has no session (one
	// reconnecting, say) before it fails; 0 fails at once. A backend whose state
	// fails calls fast (breaker open, parked) fails at once whatever ReadyWait says.
	ReadyWait time.Duration
	// SessionID, if set, mints the IDs of the front's HTTP sessions (see
	// NginxHashSessionID, for replicas behind a load balancer that hashes them).
	SessionID func() string
	// StatusResource, if set, is the URI of a resource the gateway serves itself:
	// every backend's status as JSON (mcpfsm.Status), read at the time of reading.
	StatusResource string
	// StartupWait bounds how long, after New, a front request that lists or uses
	// names (tools/list, tools/call, resources/subscribe, ...) waits for the
	// backends to list theirs: a host that launches the gateway and lists its tools
	// at once gets them all, not an empty list. A backend that fails to connect stops being waited for. 5s when
	// 0; negative: no wait.
	StartupWait time.Duration
	// SweepInterval is how often the gateway forgets what it kept for front sessions
	// that have ended (log levels, roots, subscriptions), and the log levels that
	// 2026-07-28 requests asked of older backends more than five minutes ago; 30s
	// when 0.
	SweepInterval time.Duration
}

// A Gateway is one MCP server in front of every server of a servers config, each
// reached through its own connection of an mcpfsm.Manager. See the package
// documentation for what it forwards and how.
type Gateway struct {
	opts   Options
	log    *slog.Logger
	server *mcp.Server
	m      *mcpfsm.Manager

	cfgMu sync.Mutex // serializes Reload
	rules atomic.Pointer[[]rules]
	sep   atomic.Pointer[string]

	listMu sync.Mutex
	lists  map[string]*listing // each backend's last lists, by server
	table  atomic.Pointer[table]
	dirty  chan struct{} // a list changed: the syncer recomputes the table

	regMu   sync.Mutex // the syncer's: what is registered on the front server
	reg     *table
	refused map[string]*mcp.Tool // tools the front server refused, as they were

	calls    calls    // front requests in flight, by backend
	inflight inflight // front requests in flight, to cancel
	// answerless are the requests stateful HTTP front clients cancelled, whose
	// answer is not written (answerless.go)
	answerless answerless
	// passed are the backends' errors of code -32601 a POST's requests were
	// answered with, whose data its answers lack (passed.go)
	passed passedOn
	parked parked // 2026-07-28 front calls waiting for their client's answers
	// elicitations are the URL-mode elicitations forwarded, for their end
	elicitations elicitations

	sessMu sync.Mutex
	levels map[*mcp.ServerSession]mcp.LoggingLevel // set by 2025-11-25 front sessions
	level  mcp.LoggingLevel                        // the backends', the most verbose of levels
	// levelWaits are the backends without a session that a goroutine waits for,
	// to set their level (see applyLevel)
	levelWaits map[string]bool
	// bridges are, by backend, the levels 2026-07-28 front requests asked of it
	// and the level it was set to (see levels.go); levelTurns orders the sets of
	// each backend's level.
	bridges    sync.Map // server → *levelBridge
	levelTurns turn.Turns
	roots      map[*mcp.ServerSession][]*mcp.Root
	// rootsAsked are the front sessions being asked their roots: true if they
	// announced a change meanwhile (see askRoots)
	rootsAsked map[*mcp.ServerSession]bool
	subs       map[*mcp.ServerSession]map[string]bool // front subscriptions, by session
	subCount   map[string]int                         // front subscriptions, by URI
	subConn    map[string]route                       // the backend each subscribed URI went to
	// subPending are the subscribes under way (their backend's answer awaited),
	// by session, and subPendingNew those of them to a URI no front session
	// holds: they count against the bounds (see subscribe).
	subPending    map[*mcp.ServerSession]int
	subPendingNew int
	// subTurns holds, per URI, the change of its front subscriptions and the
	// backend subscribe or unsubscribe it leads to (see dropSub).
	subTurns turn.Turns

	broadcast *outbox // notifications not tied to a call

	// sdk is the front server's own handling of requests, inside the gateway's
	// middleware (see forgetSubscription).
	sdk mcp.MethodHandler

	// Startup: the backends not yet settled (listed, or failed), and opened, closed
	// when none is left or StartupWait has passed.
	settleMu  sync.Mutex
	unsettled map[string]bool
	listed    map[string]bool // listed, not yet registered by the syncer
	opened    chan struct{}

	ctx    context.Context // ends at Close: background work stops
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool
	// spawnMu orders spawn's look at closed and its wg.Add before Close's wg.Wait.
	spawnMu sync.Mutex
}

// New opens a connection to every server of cfg (an mcpfsm.Manager) and returns a
// gateway whose MCP server (Server) shows their tools, prompts, resources and
// resource templates as their lists come in. Serve it over any transport: stdio
// (mcp.Server.Run), streamable HTTP (Handler), or several at once.
func New(cfg *mcpfsm.Config, opts Options) (*Gateway, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Implementation == nil {
		opts.Implementation = &mcp.Implementation{Name: "mcpfsm-gateway", Version: "dev"}
	}
	if opts.SweepInterval <= 0 {
		opts.SweepInterval = 30 * time.Second
	}
	if opts.StartupWait == 0 {
		opts.StartupWait = 5 * time.Second
	}
	g := &Gateway{
		opts: opts, log: opts.Logger, lists: map[string]*listing{}, dirty: make(chan struct{}, 1),
		levels: map[*mcp.ServerSession]mcp.LoggingLevel{}, roots: map[*mcp.ServerSession][]*mcp.Root{},
		rootsAsked: map[*mcp.ServerSession]bool{}, levelWaits: map[string]bool{}, refused: map[string]*mcp.Tool{},
		subs: map[*mcp.ServerSession]map[string]bool{}, subCount: map[string]int{}, subConn: map[string]route{},
		subPending: map[*mcp.ServerSession]int{},
		reg:        &table{tools: map[string]shownTool{}, prompts: map[string]shownPrompt{}, resources: map[string]shownResource{}},
	}
	g.calls.by, g.calls.linger = map[string]map[*frontCall]struct{}{}, cutLinger
	g.inflight.gone = expiring[string, struct{}]{ttl: time.Minute, max: maxRemembered}
	g.inflight.deleted = expiring[string, struct{}]{ttl: time.Minute, max: maxRemembered}
	g.elicitations.by = expiring[[2]string, *mcp.ServerSession]{ttl: elicitationTTL, max: maxElicitations}
	g.opened, g.unsettled, g.listed = make(chan struct{}), map[string]bool{}, map[string]bool{}
	for _, sc := range cfg.Servers {
		g.unsettled[sc.Name] = true
	}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.broadcast = &outbox{g: g}
	g.setRules(cfg)
	g.table.Store(compute(*g.rules.Load(), *g.sep.Load(), nil, g.opts.StatusResource))
	g.server = g.newServer()
	m, err := mcpfsm.NewManager(cfg, mcpfsm.ManagerOptions{
		Client: opts.Client, Handlers: g.handlersFor, Roots: []*mcp.Root{}, Logger: opts.Logger,
		Observer: g.observe, History: opts.History,
		MeterProvider: opts.MeterProvider, TracerProvider: opts.TracerProvider,
	})
	if err != nil {
		g.cancel()
		return nil, err
	}
	g.m = m
	m.AddReceivingMiddleware(g.backendMiddleware)
	g.wg.Add(2)
	go g.syncer()
	go g.sweeper()
	if opts.StartupWait < 0 {
		g.settle("")
	} else {
		stop := time.AfterFunc(opts.StartupWait, func() { g.settle("") })
		context.AfterFunc(g.ctx, func() { stop.Stop() })
	}
	return g, nil
}

// observe sees every backend's transitions: a failure settles a backend that has not
// listed yet (it will not list soon).
func (g *Gateway) observe(server string, tr machine.Transition) {
	if tr.Cause.Failure() {
		g.settle(server)
	}
	if g.opts.Observer != nil {
		g.opts.Observer(server, tr)
	}
}

// settle marks a backend settled ("" settles them all), and opens the front once
// every one is.
func (g *Gateway) settle(server string) {
	g.settleMu.Lock()
	defer g.settleMu.Unlock()
	if len(g.unsettled) == 0 && server != "" {
		return
	}
	if server == "" {
		clear(g.unsettled)
	}
	delete(g.unsettled, server)
	if len(g.unsettled) == 0 {
		select {
		case <-g.opened:
		default:
			close(g.opened)
		}
	}
}

// waitSettled waits, at startup, for the backends to have listed or failed.
func (g *Gateway) waitSettled(ctx context.Context) {
	select {
	case <-g.opened:
	case <-ctx.Done():
	}
}

func (g *Gateway) setRules(cfg *mcpfsm.Config) {
	rs := rulesOf(cfg)
	sep := cfg.NameSeparator()
	g.rules.Store(&rs)
	g.sep.Store(&sep)
}

// Server returns the gateway's MCP server.
func (g *Gateway) Server() *mcp.Server { return g.server }

// Manager returns the Manager that holds the gateway's backends.
func (g *Gateway) Manager() *mcpfsm.Manager { return g.m }

// Reload adopts a changed config (see mcpfsm.Manager.Reload): backends added,
// removed, reconnected or retuned, and names shown by the new rules. Front sessions
// stay open; those whose lists change are sent list-changed notifications.
func (g *Gateway) Reload(ctx context.Context, cfg *mcpfsm.Config) (mcpfsm.ReloadResult, error) {
	g.cfgMu.Lock()
	defer g.cfgMu.Unlock()
	before := map[string]*mcpfsm.Conn{}
	for _, name := range g.m.Servers() {
		before[name] = g.m.Conn(name)
	}
	// The rules first: lists of a new server are taken from its first session on.
	g.setRules(cfg)
	// The calls parked at a server removed are given up first: their retries can
	// reach them no more, and a backend's request waiting on one (before
	// 2026-07-28, its session's) held its close for teardown_timeout.
	g.parked.giveUp(func(server string) bool { _, ok := cfg.Server(server); return !ok })
	res, err := g.m.Reload(ctx, cfg)
	g.m.Wrap()
	g.listMu.Lock()
	for name := range g.lists {
		if _, ok := cfg.Server(name); !ok {
			delete(g.lists, name)
		}
	}
	g.listMu.Unlock()
	g.changed()
	// A server whose connection was replaced (its lifecycle changed) starts without
	// the front's subscriptions and log level; one that was added, without the level.
	var fresh []string
	for _, name := range g.m.Servers() {
		if c := g.m.Conn(name); c != nil && before[name] != c {
			fresh = append(fresh, name)
		}
	}
	g.restore(fresh)
	return res, err
}

// Close cancels the front's requests in flight (each answered with an error saying
// the gateway is shutting down; a stateful HTTP session's POSTs are given up to
// postsGrace to write the answers), closes the front's sessions (waiting
// for them at most half of what is left of ctx), then the backends, and stops the
// gateway's background work, all bounded by ctx. Shut down
// whatever serves Handler first (an HTTP server's Shutdown leaves the sessions it
// served open); a stdio front's Server.Run returns once its session is closed.
func (g *Gateway) Close(ctx context.Context) error {
	if !g.closed.CompareAndSwap(false, true) {
		return nil
	}
	// A spawn that saw the gateway open has added to wg once this returns, so
	// wg.Wait below never races an Add.
	g.spawnMu.Lock()
	g.spawnMu.Unlock()
	// The SDK's ServerSession.Close waits for the session's requests in flight,
	// which wait for their backends: they are cancelled first.
	g.inflight.close()
	// The POSTs carrying them answer them (the go-sdk ends a POST's stream when
	// its session closes, a 2026-07-28 request's session included: the client got
	// "request terminated without response" instead of its answer), for at most
	// postsGrace.
	grace := time.NewTimer(postsGrace)
	select {
	case <-g.inflight.postsEnded():
	case <-grace.C:
	case <-ctx.Done():
	}
	grace.Stop()
	front := make(chan struct{})
	var closing sync.WaitGroup
	for ss := range g.server.Sessions() {
		closing.Go(func() { _ = ss.Close() }) // each on its own: one may be stuck
	}
	g.wg.Go(func() {
		closing.Wait()
		close(front)
	})
	// The front's sessions get half of what is left of ctx, so that one stuck
	// in the SDK (an answer no client reads) leaves the backends time to close
	// gracefully; the wait for the gateway's goroutines below reports it.
	fctx, cancel := context.WithCancel(ctx)
	if deadline, ok := ctx.Deadline(); ok {
		fctx, cancel = context.WithDeadline(ctx, time.Now().Add(time.Until(deadline)/2))
	}
	select {
	case <-front:
	case <-fctx.Done():
	}
	cancel()
	g.cancel()
	g.parked.closeAll()
	// The backends' calls, all cancelled by now, are waited for by their
	// connections' closes, which tell the servers of the cancels before they
	// close the sessions (see mcpfsm's cutCalls).
	err := g.m.Close(ctx)
	done := make(chan struct{})
	go func() { g.wg.Wait(); close(done) }()
	select {
	case <-done:
		return err
	default: // a backend's close may have taken all of ctx: done is looked at first
	}
	select {
	case <-done:
	case <-ctx.Done():
		// Said with what was waited for: a bare "context deadline exceeded"
		// followed a backend's close that took all of ctx, on a line of its own.
		return errors.Join(err, fmt.Errorf("the gateway's own work did not end: %w", ctx.Err()))
	}
	return err
}

// ShutdownMessage is the message of the JSON-RPC error (-32603) answering a front
// request cancelled because the gateway is shutting down: Close's, and that of
// mcpfsm serve's stdio front (see transport.StdioFront.Shutdown).
const ShutdownMessage = "mcpfsm gateway: shutting down: the request was cancelled"

// postsGrace is how long Close waits for the POSTs carrying requests to write the
// answers to their requests it cancelled, before it closes the sessions.
const postsGrace = time.Second

// spawn runs f on a goroutine of the gateway's, unless the gateway is closed.
func (g *Gateway) spawn(f func()) bool {
	g.spawnMu.Lock()
	if g.closed.Load() {
		g.spawnMu.Unlock()
		return false
	}
	g.wg.Add(1)
	g.spawnMu.Unlock()
	go func() {
		defer g.wg.Done()
		f()
	}()
	return true
}

// changed tells the syncer that a list or the rules changed.
func (g *Gateway) changed() {
	select {
	case g.dirty <- struct{}{}:
	default:
	}
}

// setList records a backend's new list, of kind (listTools, listPrompts or
// listResources), from its connection's handlers, on its owner: it must not block.
// At startup a backend has listed once it has delivered every kind, each once as its
// first session comes up: until then a front request that lists or uses names waits
// (StartupWait). (Its tools alone once settled it: a front that listed resources, or
// subscribed to one, as soon as the tools were in could find none.)
func (g *Gateway) setList(server string, kind uint8, f func(*listing)) {
	if !slices.ContainsFunc(*g.rules.Load(), func(r rules) bool { return r.server == server }) {
		return // a removed server's last word
	}
	g.listMu.Lock()
	l := g.lists[server]
	if l == nil {
		l = &listing{}
		g.lists[server] = l
	}
	f(l)
	l.delivered |= kind
	all := l.delivered == listAll
	g.listMu.Unlock()
	g.settleMu.Lock()
	if g.unsettled[server] && all {
		g.listed[server] = true
	}
	g.settleMu.Unlock()
	g.changed()
}

// syncer recomputes the table when a list or the rules change, and registers the
// difference on the front server (which notifies the front sessions of it).
func (g *Gateway) syncer() {
	defer g.wg.Done()
	var warned map[warning]bool // logged, and still so
	for {
		select {
		case <-g.ctx.Done():
			return
		case <-g.dirty:
		}
		g.settleMu.Lock()
		listed := g.listed
		g.listed = map[string]bool{}
		g.settleMu.Unlock()
		g.listMu.Lock()
		lists := make(map[string]*listing, len(g.lists))
		for k, v := range g.lists {
			c := *v
			lists[k] = &c
		}
		g.listMu.Unlock()
		t := compute(*g.rules.Load(), *g.sep.Load(), lists, g.opts.StatusResource)
		// The table first: a client calls only what it has seen listed, and the
		// front server lists only what register adds.
		g.table.Store(t)
		if refused := g.register(t); len(refused) > 0 {
			c := *t
			c.tools = maps.Clone(t.tools)
			for _, name := range refused {
				delete(c.tools, name)
			}
			g.table.Store(&c)
			g.regMu.Lock()
			g.reg = &c
			g.regMu.Unlock()
		}
		g.rehome(g.table.Load())
		for server := range listed {
			g.settle(server) // its names are registered: the front may list them
		}
		// Each warning is logged once, when it appears: every list change
		// (another backend's, a reconnect's) recomputes them all.
		now := make(map[warning]bool, len(t.warnings))
		for _, w := range t.warnings {
			now[w] = true
			if !warned[w] {
				g.log.Warn("mcpfsm gateway: "+w.what, "detail", w.detail)
			}
		}
		warned = now
	}
}

// register makes the front server show t: it adds what is new or changed and removes
// what is gone, so that only real changes notify the front sessions. It returns the
// tools the SDK's server refused (an input schema that is not an object).
func (g *Gateway) register(t *table) (refused []string) {
	g.regMu.Lock()
	defer g.regMu.Unlock()
	old := g.reg
	var gone []string
	for name := range old.tools {
		if _, ok := t.tools[name]; !ok {
			gone = append(gone, name)
		}
	}
	if len(gone) > 0 {
		g.server.RemoveTools(gone...)
	}
	for name := range g.refused {
		if _, ok := t.tools[name]; !ok {
			delete(g.refused, name)
		}
	}
	for name, st := range t.tools {
		if prev, ok := old.tools[name]; ok && reflect.DeepEqual(prev.front, st.front) {
			continue
		}
		if prev, ok := g.refused[name]; ok && reflect.DeepEqual(prev, st.front) {
			refused = append(refused, name) // refused already, and logged
			continue
		}
		if err := addTool(g.server, st.front, g.callTool); err != nil {
			g.log.Warn("mcpfsm gateway: a tool cannot be shown", "server", st.server, "tool", st.name, "err", err)
			refused = append(refused, name)
			g.refused[name] = st.front
		}
	}
	gone = gone[:0]
	for name := range old.prompts {
		if _, ok := t.prompts[name]; !ok {
			gone = append(gone, name)
		}
	}
	if len(gone) > 0 {
		g.server.RemovePrompts(gone...)
	}
	for name, sp := range t.prompts {
		if prev, ok := old.prompts[name]; ok && reflect.DeepEqual(prev.front, sp.front) {
			continue
		}
		g.server.AddPrompt(sp.front, g.getPrompt)
	}
	gone = gone[:0]
	for uri := range old.resources {
		if _, ok := t.resources[uri]; !ok && uri != g.opts.StatusResource {
			gone = append(gone, uri)
		}
	}
	if len(gone) > 0 {
		g.server.RemoveResources(gone...)
	}
	for uri, sr := range t.resources {
		if prev, ok := old.resources[uri]; ok && prev.server == sr.server && reflect.DeepEqual(prev.front, sr.front) {
			continue
		}
		g.server.AddResource(sr.front, g.readResource)
	}
	oldTemplates := map[string]shownTemplate{}
	for _, st := range old.templates {
		oldTemplates[st.name] = st
	}
	gone = gone[:0]
	newTemplates := map[string]bool{}
	for _, st := range t.templates {
		newTemplates[st.name] = true
	}
	for name := range oldTemplates {
		if !newTemplates[name] {
			gone = append(gone, name)
		}
	}
	if len(gone) > 0 {
		g.server.RemoveResourceTemplates(gone...)
	}
	for _, st := range t.templates {
		if prev, ok := oldTemplates[st.name]; ok && prev.server == st.server && reflect.DeepEqual(prev.front, st.front) {
			continue
		}
		g.server.AddResourceTemplate(st.front, g.readResource)
	}
	g.reg = t
	return refused
}

// addTool adds a tool to the front server, turning the SDK's panic on a tool it
// refuses (an input schema that is not an object) into an error. Its schemas go in
// encoded: the SDK marshals a tool's input schema on every 2026-07-28 call (to look
// for x-mcp-header parameters) and both schemas on every tools/list, and a
// json.RawMessage is copied where the map a backend's list decoded into is walked
// and its keys sorted each time.
func addTool(s *mcp.Server, t *mcp.Tool, h mcp.ToolHandler) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%v", v)
		}
	}()
	c := *t
	if c.InputSchema == nil {
		c.InputSchema = map[string]any{"type": "object"}
	}
	if c.InputSchema, err = encoded(c.InputSchema); err != nil {
		return fmt.Errorf("its input schema: %w", err)
	}
	if c.OutputSchema, err = encoded(c.OutputSchema); err != nil {
		return fmt.Errorf("its output schema: %w", err)
	}
	s.AddTool(&c, h)
	return nil
}

// encoded returns a schema as JSON (nil stays nil).
func encoded(schema any) (any, error) {
	switch schema := schema.(type) {
	case nil, json.RawMessage:
		return schema, nil
	}
	data, err := json.Marshal(schema)
	if err != nil {
		return nil, err
	}
	return json.RawMessage(data), nil
}

// newServer builds the front server: its capabilities are all the gateway can
// forward, whatever its backends turn out to have.
func (g *Gateway) newServer() *mcp.Server {
	s := mcp.NewServer(g.opts.Implementation, &mcp.ServerOptions{
		Capabilities: &mcp.ServerCapabilities{
			Logging:     &mcp.LoggingCapabilities{},
			Completions: &mcp.CompletionCapabilities{},
			Tools:       &mcp.ToolCapabilities{ListChanged: true},
			Prompts:     &mcp.PromptCapabilities{ListChanged: true},
			Resources:   &mcp.ResourceCapabilities{ListChanged: true, Subscribe: true},
		},
		Logger:                  slog.New(undeliveredQuiet{g.log.Handler()}).With("component", "gateway front"),
		CompletionHandler:       g.complete,
		SubscribeHandler:        g.subscribe,
		UnsubscribeHandler:      g.unsubscribe,
		InitializedHandler:      func(ctx context.Context, req *mcp.InitializedRequest) { g.askRoots(req.Session) },
		RootsListChangedHandler: func(ctx context.Context, req *mcp.RootsListChangedRequest) { g.askRoots(req.Session) },
		GetSessionID:            g.opts.SessionID,
	})
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler { g.sdk = next; return next })
	s.AddReceivingMiddleware(g.frontMiddleware)
	s.AddSendingMiddleware(elicitSchemaMiddleware, quietBeforeInitialize)
	if uri := g.opts.StatusResource; uri != "" {
		s.AddResource(&mcp.Resource{
			URI: uri, Name: "mcpfsm-gateway-status", MIMEType: "application/json",
			Description: "The status of every server behind this gateway: state, last success, last failure, next move.",
		}, func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			data, err := json.MarshalIndent(g.m.Status(), "", "  ")
			if err != nil {
				return nil, err
			}
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "application/json", Text: string(data)}}}, nil
		})
	}
	return s
}

// undeliveredQuiet is the front server's log handler: it makes debug records of the
// go-sdk's warnings that a notification could not be sent to a front session that
// has no stream to take it (an HTTP session that opened no GET stream, which the
// spec lets a client not open). The go-sdk warned once per such session at every
// list change: at each reload, three times the sessions open (30,000 with the
// default --max-sessions), drowning the warnings that matter.
//
// It also makes a debug record of the go-sdk's error that Server.Run's context ended
// ("server run cancelled"): that is how a stdio front is stopped (serve's SIGTERM or
// Ctrl-C), and every ordinary shutdown of a stdio-launched gateway logged an error,
// which a host shows as the server's failure.
type undeliveredQuiet struct{ slog.Handler }

func (h undeliveredQuiet) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn && strings.HasPrefix(r.Message, "calling notifications/") &&
		strings.HasSuffix(r.Message, "undelivered message: stream not connected or already closed") ||
		r.Level == slog.LevelError && r.Message == "server run cancelled" {
		if !h.Handler.Enabled(ctx, slog.LevelDebug) {
			return nil
		}
		r.Level = slog.LevelDebug
	}
	return h.Handler.Handle(ctx, r)
}

func (h undeliveredQuiet) WithAttrs(attrs []slog.Attr) slog.Handler {
	return undeliveredQuiet{h.Handler.WithAttrs(attrs)}
}

func (h undeliveredQuiet) WithGroup(name string) slog.Handler {
	return undeliveredQuiet{h.Handler.WithGroup(name)}
}

// frontMiddleware answers what the SDK's server cannot know by itself: a refusal for
// a session with too many requests in flight, a clear error for a name no backend
// shows, the servers behind the gateway in initialize, and the backends' log level
// when a front session sets its own.
func (g *Gateway) frontMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		ss, _ := req.GetSession().(*mcp.ServerSession)
		ctx, untrack, ok := g.inflight.track(ctx, ss, req, !strings.HasPrefix(method, "notifications/"))
		if !ok {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("mcpfsm gateway: this session has %d requests in flight, as many as it may: wait for their answers", maxSessionRequests)}
		}
		defer untrack()
		switch method {
		case "tools/list", "prompts/list", "resources/list", "resources/templates/list", "tools/call", "prompts/get", "resources/read", "completion/complete":
			g.waitSettled(ctx)
		}
		switch method {
		case "initialize":
			// The go-sdk's server answers a second initialize with an error of
			// code 0, no JSON-RPC code (and an error record in the log).
			if ss != nil && ss.InitializeParams() != nil {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "Invalid request: the session is initialized already: initialize comes once, first"}
			}
		case "tools/call":
			if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok {
				if t := g.table.Load(); t.tools[p.Name].front == nil {
					return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: t.unknown("tool", p.Name)}
				}
			}
		case "prompts/get":
			if p, ok := req.GetParams().(*mcp.GetPromptParams); ok {
				if t := g.table.Load(); t.prompts[p.Name].front == nil {
					return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: t.unknown("prompt", p.Name)}
				}
			}
		case "logging/setLevel":
			// The go-sdk's server takes any level, and the gateway would keep it
			// as the session's: the client told it was set, the backends refusing
			// it (or, as the least verbose of all, set to it).
			if p, ok := req.GetParams().(*mcp.SetLoggingLevelParams); ok && levelRank(p.Level) == len(levelOrder) {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("mcpfsm gateway: %.40q is not a log level: want one of %s", p.Level, levelList)}
			}
		}
		res, err := next(ctx, method, req)
		if err != nil {
			if errors.Is(err, context.Canceled) && g.closed.Load() {
				// Cancelled by Close: said so, where the go-sdk's server
				// answered "context canceled" with code 0, which a host
				// shows as if its user had cancelled the request.
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: ShutdownMessage}
			}
			var je *jsonrpc.Error
			if errors.As(err, &je) && je.Message == "Resource not found" {
				// The go-sdk's server's own, for a URI it does not have,
				// whose data may be no JSON (see resourceNotFound).
				switch p := req.GetParams().(type) {
				case *mcp.ReadResourceParams:
					return nil, resourceNotFound(p.URI)
				case *mcp.SubscribeParams:
					return nil, resourceNotFound(p.URI)
				}
			}
			return res, err
		}
		switch r := res.(type) {
		case *mcp.InitializeResult:
			r.Instructions, r.ServerInfo = g.instructions(), g.implementation()
		case *mcp.DiscoverResult:
			r.Instructions = g.instructions()
			if r.Meta == nil {
				r.Meta = mcp.Meta{}
			}
			r.Meta[mcp.MetaKeyServerInfo] = g.implementation()
		}
		if method == "logging/setLevel" {
			if ss, ok := req.GetSession().(*mcp.ServerSession); ok {
				if p, ok := req.GetParams().(*mcp.SetLoggingLevelParams); ok {
					g.setLevel(ctx, ss, p.Level)
				}
			}
		}
		return res, err
	}
}

// quietBeforeInitialize is the front server's sending middleware that drops a
// notification to a session not yet initialized: the go-sdk's server tells every
// session of a change of its lists, and a stdio front's session is open from the
// start, so a backend listed before the host's initialize was read had the host
// told of list changes before the server's capabilities (or its own protocol
// version) were agreed. The lists it then asks for are current.
func quietBeforeInitialize(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if strings.HasPrefix(method, "notifications/") {
			if ss, ok := req.GetSession().(*mcp.ServerSession); ok && ss.InitializeParams() == nil {
				return nil, nil
			}
		}
		return next(ctx, method, req)
	}
}

// implementation is the gateway's Implementation, titled with its servers.
func (g *Gateway) implementation() *mcp.Implementation {
	impl := *g.opts.Implementation
	if impl.Title == "" {
		var names []string
		for _, r := range *g.rules.Load() {
			names = append(names, r.server)
		}
		impl.Title = "mcpfsm gateway: " + strings.Join(names, ", ")
	}
	return &impl
}

// instructions say what is behind the gateway, how its names are made, and each
// backend's own instructions (their first maxInstructions bytes).
func (g *Gateway) instructions() string {
	var b strings.Builder
	rs := *g.rules.Load()
	sep := *g.sep.Load()
	fmt.Fprintf(&b, "This server is an mcpfsm gateway in front of %s, each kept connected and healed on its own. ", count(len(rs), "MCP server"))
	b.WriteString("A name shows its server's prefix. A server that is down keeps its tools listed; calling one returns an error result that says why (state and last failure).\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "\n## %s", r.server)
		if r.prefix != "" {
			fmt.Fprintf(&b, " (names start with %s%s)", r.prefix, sep)
		}
		b.WriteString("\n")
		c := g.m.Conn(r.server)
		if c == nil {
			continue
		}
		info, up := c.Server()
		if !up {
			st := c.Status()
			fmt.Fprintf(&b, "Not connected (%s).\n", st.State)
			continue
		}
		if info.Implementation != nil {
			fmt.Fprintf(&b, "Server %s %s.\n", cut(info.Implementation.Name, maxServerName), cut(info.Implementation.Version, maxServerName))
		}
		if s := strings.TrimSpace(info.Instructions); s != "" {
			b.WriteString(cut(s, maxInstructions))
			b.WriteString("\n")
		}
	}
	return b.String()
}

// What instructions takes of each backend's initialize, at most, in bytes: every
// front initialize answer carries it, and a host's model reads it whole.
const (
	maxInstructions = 8 << 10
	maxServerName   = 200
)

// cut shortens s to at most n bytes, at a rune's start, marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// unavailable is the text of a request to a backend that cannot take it: the server,
// its state, since when, its last failure and its next move.
func (g *Gateway) unavailable(server string, err error) string {
	var b strings.Builder
	fmt.Fprintf(&b, "mcpfsm gateway: server %q is unavailable", server)
	c := g.m.Conn(server)
	if c == nil {
		fmt.Fprintf(&b, ": it is not configured any more")
		return b.String()
	}
	st := c.Status()
	now := time.Now()
	fmt.Fprintf(&b, " (%s for %s)", st.State, now.Sub(st.Since).Round(time.Millisecond))
	if f := st.LastFailure; f != nil {
		fmt.Fprintf(&b, "; last failure %s ago: %s: %s", now.Sub(f.At).Round(time.Millisecond), f.Cause, f.Message)
	}
	if n := st.Next; n != nil {
		fmt.Fprintf(&b, "; next: %s in %s", n.What, n.At.Sub(now).Round(time.Millisecond))
	}
	if err != nil && st.LastFailure == nil {
		fmt.Fprintf(&b, "; %s", machine.ErrorText(err))
	}
	return b.String()
}

// count says n things: "1 MCP server", "2 MCP servers".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
