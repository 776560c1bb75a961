package mcpfsm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ErrUnknownServer is the error of a request to a server a Manager does not have.
var ErrUnknownServer = errors.New("unknown server")

// ManagerOptions configure a Manager.
type ManagerOptions struct {
	// Client is the client name and version sent in initialize.
	Client *mcp.Implementation
	// Handlers, if set, returns the handlers of each server's connection (see
	// Handlers), given the server's name. Connections whose handlers advertise the
	// same capabilities share one SDK client.
	Handlers func(server string) Handlers
	// Roots, if not nil (even if empty), are the client's roots for every server
	// (see Options.Roots); SetRoots changes them.
	Roots []*mcp.Root
	// Logger receives every connection's log records, each with the key "machine"
	// naming its server; slog.Default() when nil.
	Logger *slog.Logger
	// Observer is called with every transition of every server, on that server's
	// owner: one stream for all. It must return quickly.
	Observer func(server string, tr machine.Transition)
	// History is how many transitions each connection remembers.
	History int
	// MeterProvider and TracerProvider receive every connection's metrics and spans
	// (see Options.MeterProvider); the global providers when nil.
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
}

// A Manager keeps a connection to each server of a Config: it opens them all, routes
// requests by server, merges their transitions into one stream, and adopts a changed
// config without a restart. Its methods are safe for concurrent use. After Close,
// every request fails with ErrClosed and Reload opens nothing.
type Manager struct {
	opts ManagerOptions

	rootsMu sync.Mutex // orders SetRoots calls (see SetRoots)

	mu      sync.Mutex
	closed  bool
	conns   map[string]*managed
	order   []string                   // server names in config order
	clients map[clientKind]*mcp.Client // the SDK clients, shared by connections of a kind
	roots   []*mcp.Root                // under mu
	shut    []*Conn                    // the connections Close took, for every Close to wait for
	// dropped are the connections Reloads closed (removed servers, replaced
	// lifecycles), until they are closed: Close waits for them too, since a Reload
	// whose ctx ended returns while they are still closing.
	dropped []*Conn
}

type managed struct {
	conn *Conn
	cfg  ServerConfig
}

// NewManager opens a connection to every server of cfg. Connecting happens in the
// background; requests wait for their server to be ready.
func NewManager(cfg *Config, opts ManagerOptions) (*Manager, error) {
	if err := checkServers(cfg); err != nil {
		return nil, err
	}
	m := &Manager{opts: opts, conns: map[string]*managed{}, clients: map[clientKind]*mcp.Client{}, roots: slices.Clone(opts.Roots)}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range cfg.Servers {
		mc, err := m.openLocked(s, nil)
		if err != nil {
			_ = closeAll(context.Background(), m.shutLocked())
			return nil, err
		}
		m.conns[s.Name] = mc
		m.order = append(m.order, s.Name)
	}
	return m, nil
}

// checkServers refuses a config that names one server twice, as a config built in Go
// may (LoadConfig's map keys cannot): two connections under one name would leave the
// first out of reach, never closed; and policies that do not validate.
func checkServers(cfg *Config) error {
	if cfg == nil {
		return errors.New("mcpfsm: no config (nil)")
	}
	seen := make(map[string]bool, len(cfg.Servers))
	for i, s := range cfg.Servers {
		switch {
		case !serverName.MatchString(s.Name):
			return fmt.Errorf("mcpfsm: server %d: name %q: use letters, digits, - and _", i+1, s.Name)
		case seen[s.Name]:
			return fmt.Errorf("mcpfsm: server %q is named twice", s.Name)
		}
		seen[s.Name] = true
		if pol := policies(s); pol.Validate() != nil {
			return fmt.Errorf("mcpfsm: server %q: %w", s.Name, pol.Validate())
		}
	}
	return nil
}

// policies returns the policies s is to run with: its own, or its spec's defaults when
// it leaves them all zero (as a ServerConfig built in Go may). Policies that are set
// but incomplete are refused (see machine.Policies.Validate), not filled in.
func policies(s ServerConfig) machine.Policies {
	if s.Policies != (machine.Policies{}) {
		return s.Policies
	}
	if s.Spec != nil {
		return s.Spec.Defaults()
	}
	return DefaultSpec().Defaults()
}

// specChanged reports whether s runs another lifecycle than old: another file, other
// contents, or (for configs built in Go, which have no text) another Spec.
func specChanged(old, s ServerConfig) bool {
	if old.SpecFile != s.SpecFile || !bytes.Equal(old.specText, s.specText) {
		return true
	}
	return old.specText == nil && old.Spec != s.Spec
}

// openLocked opens the connection to s (replacing old, if not nil: it inherits its
// session state). m.mu is held.
func (m *Manager) openLocked(s ServerConfig, old *Conn) (*managed, error) {
	pol := policies(s)
	var hs Handlers
	if m.opts.Handlers != nil {
		hs = m.opts.Handlers(s.Name)
	}
	if err := hs.validate(); err != nil {
		return nil, fmt.Errorf("mcpfsm: server %q: %w", s.Name, err)
	}
	kind := kindOf(&hs, m.opts.Roots != nil)
	client := m.clients[kind]
	if client == nil {
		client = newSDKClient(m.opts.Client, kind)
		if len(m.roots) > 0 {
			client.AddRoots(m.roots...)
		}
		m.clients[kind] = client
	}
	opts := Options{
		Spec: s.Spec, Client: m.opts.Client, Handlers: hs, Roots: m.roots, Logger: m.opts.Logger,
		History: m.opts.History, Policies: &pol, client: client, inherit: old,
		MeterProvider: m.opts.MeterProvider, TracerProvider: m.opts.TracerProvider,
	}
	if obs := m.opts.Observer; obs != nil {
		opts.Observer = func(tr machine.Transition) { obs(s.Name, tr) }
	}
	conn, err := Open(s.Transport, opts)
	if err != nil {
		return nil, err
	}
	return &managed{conn: conn, cfg: s}, nil
}

// Servers returns the names of the servers, in config order.
func (m *Manager) Servers() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.order)
}

// Conn returns the connection to a server, or nil. A Reload may replace it (when the
// server's lifecycle spec changes): the Manager's own requests follow the replacement.
func (m *Manager) Conn(server string) *Conn {
	m.mu.Lock()
	defer m.mu.Unlock()
	if mc := m.conns[server]; mc != nil {
		return mc.conn
	}
	return nil
}

// States returns every server's state.
func (m *Manager) States() map[string]states.State {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]states.State, len(m.conns))
	for name, mc := range m.conns {
		out[name] = mc.conn.State()
	}
	return out
}

// A Tool is one tool of one server.
type Tool struct {
	Server string // the server that has it
	// Name is the server-qualified name, "server.tool", which Call accepts.
	Name string
	*mcp.Tool
}

// Listed returns the tools of every server that has a session up, as last listed
// (without asking the servers), sorted by qualified name.
func (m *Manager) Listed() []Tool {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Tool
	for name, mc := range m.conns {
		for _, t := range mc.conn.Listed().Tools {
			out = append(out, Tool{Server: name, Name: name + "." + t.Name, Tool: t})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// SetRoots replaces the client's roots for every server (ManagerOptions.Roots must not
// have been nil): servers that ask get them from now on, and every session is sent
// notifications/roots/list_changed (one still in its handshake is not: it asks for the
// roots once initialized).
func (m *Manager) SetRoots(roots ...*mcp.Root) error {
	// The servers are told outside m.mu: a server that does not take the
	// notification holds SetRoots (the go-sdk gives each round 10 s), not every
	// request of the Manager, which takes m.mu to find its connection. rootsMu keeps
	// the changes of the clients' roots in the order of the SetRoots calls; a client
	// made meanwhile (a Reload) starts with m.roots, already the new ones.
	m.rootsMu.Lock()
	defer m.rootsMu.Unlock()
	m.mu.Lock()
	if m.opts.Roots == nil {
		m.mu.Unlock()
		return errors.New("mcpfsm: the Manager was made without roots (ManagerOptions.Roots), so it does not advertise them")
	}
	var clients []*mcp.Client
	for kind, c := range m.clients {
		if kind&kindRoots != 0 {
			clients = append(clients, c)
		}
	}
	old := m.roots
	m.roots = slices.Clone(roots)
	for _, mc := range m.conns {
		mc.conn.stateMu.Lock()
		mc.conn.keepRoots(roots)
		mc.conn.stateMu.Unlock()
	}
	m.mu.Unlock()
	for _, c := range clients {
		setRoots(c, old, roots)
	}
	return nil
}

// on runs a request on a server's connection. A request that found the connection
// closed because a Reload replaced it is sent on the replacement when it never ran
// (it was not sent before the close), or when it was to be sent again anyway (the
// close broke the session under a request that is safe to send again: a read, a
// subscribe, an idempotent tool).
func on[T any](_ context.Context, m *Manager, server string, f func(*Conn) (T, error)) (T, error) {
	return onConn(m, server, false, f)
}

// onState is on for a request that changes the session state (Subscribe,
// Unsubscribe, SetLoggingLevel): one that succeeded on a connection a Reload replaced
// meanwhile is made again on the replacement, which took the session state of the old
// one when it was opened, perhaps before this change was recorded there.
func onState(m *Manager, server string, f func(*Conn) error) error {
	_, err := onConn(m, server, true, func(c *Conn) (struct{}, error) { return struct{}{}, f(c) })
	return err
}

func onConn[T any](m *Manager, server string, state bool, f func(*Conn) (T, error)) (T, error) {
	var zero T
	for range 3 {
		m.mu.Lock()
		closed, mc := m.closed, m.conns[server]
		m.mu.Unlock()
		switch {
		case closed:
			return zero, ErrClosed
		case mc == nil:
			return zero, fmt.Errorf("mcpfsm: %w %q", ErrUnknownServer, server)
		}
		res, err := f(mc.conn)
		replaced := func() bool { c := m.Conn(server); return c != nil && c != mc.conn }
		var ce *CallError
		if err != nil && errors.Is(err, ErrClosed) && errors.As(err, &ce) && (ce.unsent || ce.resend) && replaced() {
			continue
		}
		if err == nil && state && replaced() {
			continue
		}
		return res, err
	}
	return zero, fmt.Errorf("mcpfsm: server %q: its connection was replaced again and again", server)
}

// CallTool calls a tool of a server (see Conn.CallTool).
func (m *Manager) CallTool(ctx context.Context, server string, p *mcp.CallToolParams) (*mcp.CallToolResult, error) {
	return on(ctx, m, server, func(c *Conn) (*mcp.CallToolResult, error) { return c.CallTool(ctx, p) })
}

// Call calls a tool by its server-qualified name, "server.tool", with args (nil for
// none).
func (m *Manager) Call(ctx context.Context, qualified string, args any) (*mcp.CallToolResult, error) {
	server, tool, ok := strings.Cut(qualified, ".")
	if !ok {
		return nil, fmt.Errorf("mcpfsm: %q is not a qualified tool name (server.tool)", qualified)
	}
	return m.CallTool(ctx, server, &mcp.CallToolParams{Name: tool, Arguments: args})
}

// ListTools lists one page of a server's tools (see Conn.ListTools).
func (m *Manager) ListTools(ctx context.Context, server string, p *mcp.ListToolsParams) (*mcp.ListToolsResult, error) {
	return on(ctx, m, server, func(c *Conn) (*mcp.ListToolsResult, error) { return c.ListTools(ctx, p) })
}

// ListPrompts lists one page of a server's prompts.
func (m *Manager) ListPrompts(ctx context.Context, server string, p *mcp.ListPromptsParams) (*mcp.ListPromptsResult, error) {
	return on(ctx, m, server, func(c *Conn) (*mcp.ListPromptsResult, error) { return c.ListPrompts(ctx, p) })
}

// GetPrompt gets a prompt of a server.
func (m *Manager) GetPrompt(ctx context.Context, server string, p *mcp.GetPromptParams) (*mcp.GetPromptResult, error) {
	return on(ctx, m, server, func(c *Conn) (*mcp.GetPromptResult, error) { return c.GetPrompt(ctx, p) })
}

// ListResources lists one page of a server's resources.
func (m *Manager) ListResources(ctx context.Context, server string, p *mcp.ListResourcesParams) (*mcp.ListResourcesResult, error) {
	return on(ctx, m, server, func(c *Conn) (*mcp.ListResourcesResult, error) { return c.ListResources(ctx, p) })
}

// ListResourceTemplates lists one page of a server's resource templates.
func (m *Manager) ListResourceTemplates(ctx context.Context, server string, p *mcp.ListResourceTemplatesParams) (*mcp.ListResourceTemplatesResult, error) {
	return on(ctx, m, server, func(c *Conn) (*mcp.ListResourceTemplatesResult, error) { return c.ListResourceTemplates(ctx, p) })
}

// ReadResource reads a resource of a server.
func (m *Manager) ReadResource(ctx context.Context, server string, p *mcp.ReadResourceParams) (*mcp.ReadResourceResult, error) {
	return on(ctx, m, server, func(c *Conn) (*mcp.ReadResourceResult, error) { return c.ReadResource(ctx, p) })
}

// Subscribe subscribes to a resource of a server (see Conn.Subscribe).
func (m *Manager) Subscribe(ctx context.Context, server string, p *mcp.SubscribeParams) error {
	return onState(m, server, func(c *Conn) error { return c.Subscribe(ctx, p) })
}

// Unsubscribe cancels a subscription to a resource of a server.
func (m *Manager) Unsubscribe(ctx context.Context, server string, p *mcp.UnsubscribeParams) error {
	return onState(m, server, func(c *Conn) error { return c.Unsubscribe(ctx, p) })
}

// Complete asks a server to complete an argument.
func (m *Manager) Complete(ctx context.Context, server string, p *mcp.CompleteParams) (*mcp.CompleteResult, error) {
	return on(ctx, m, server, func(c *Conn) (*mcp.CompleteResult, error) { return c.Complete(ctx, p) })
}

// SetLoggingLevel sets a server's log level (see Conn.SetLoggingLevel).
func (m *Manager) SetLoggingLevel(ctx context.Context, server string, p *mcp.SetLoggingLevelParams) error {
	return onState(m, server, func(c *Conn) error { return c.SetLoggingLevel(ctx, p) })
}

// Ping checks that a server answers (see Conn.Ping).
func (m *Manager) Ping(ctx context.Context, server string, p *mcp.PingParams) error {
	_, err := on(ctx, m, server, func(c *Conn) (struct{}, error) { return struct{}{}, c.Ping(ctx, p) })
	return err
}

// Prompts iterates over every prompt of a server, page by page.
func (m *Manager) Prompts(ctx context.Context, server string, p *mcp.ListPromptsParams) iter.Seq2[*mcp.Prompt, error] {
	return each(ctx, m, server, func(c *Conn) iter.Seq2[*mcp.Prompt, error] { return c.Prompts(ctx, p) })
}

// Tools iterates over every tool of a server, page by page.
func (m *Manager) Tools(ctx context.Context, server string, p *mcp.ListToolsParams) iter.Seq2[*mcp.Tool, error] {
	return each(ctx, m, server, func(c *Conn) iter.Seq2[*mcp.Tool, error] { return c.Tools(ctx, p) })
}

// Resources iterates over every resource of a server, page by page.
func (m *Manager) Resources(ctx context.Context, server string, p *mcp.ListResourcesParams) iter.Seq2[*mcp.Resource, error] {
	return each(ctx, m, server, func(c *Conn) iter.Seq2[*mcp.Resource, error] { return c.Resources(ctx, p) })
}

// ResourceTemplates iterates over every resource template of a server, page by page.
func (m *Manager) ResourceTemplates(ctx context.Context, server string, p *mcp.ListResourceTemplatesParams) iter.Seq2[*mcp.ResourceTemplate, error] {
	return each(ctx, m, server, func(c *Conn) iter.Seq2[*mcp.ResourceTemplate, error] { return c.ResourceTemplates(ctx, p) })
}

// each is an iterator of a server's connection, or one that yields why there is none.
func each[T any](ctx context.Context, m *Manager, server string, seq func(*Conn) iter.Seq2[T, error]) iter.Seq2[T, error] {
	c, err := on(ctx, m, server, func(c *Conn) (*Conn, error) { return c, nil })
	if err != nil {
		return func(yield func(T, error) bool) {
			var zero T
			yield(zero, err)
		}
	}
	return seq(c)
}

// A ReloadResult says what a Reload did to each server.
type ReloadResult struct {
	Added       []string // opened
	Removed     []string // closed
	Reconnected []string // transport or lifecycle changed: a new session, with the new config
	Retuned     []string // policies alone changed: adopted, the session kept
	Unchanged   []string // nothing changed: left alone
}

// String lists the servers by what happened to them ("added a, b; retuned c"), leaving
// out what is empty.
func (r ReloadResult) String() string {
	var parts []string
	for _, p := range []struct {
		what  string
		names []string
	}{{"added", r.Added}, {"removed", r.Removed}, {"reconnected", r.Reconnected}, {"retuned", r.Retuned}, {"unchanged", r.Unchanged}} {
		if len(p.names) > 0 {
			parts = append(parts, p.what+" "+strings.Join(p.names, ", "))
		}
	}
	return strings.Join(parts, "; ")
}

// Reload adopts a changed config without a restart. A server that is gone is closed; a
// new one is opened; a server whose transport changed is reconfigured (Conn.Reconfigure:
// a planned reconnect to the new config; if it cannot connect, the old session serves on
// and Reload says why); one whose lifecycle spec changed gets a new connection (requests
// waiting on the old one move to it); one whose policies alone changed adopts them and
// keeps its session; the others are not touched, except that one whose calls fail fast
// (parked, unauthorized, breaker open) tries again at once, with its credentials
// reloaded. Reload waits for the closes and reconnects until ctx ends. After Close it
// does nothing and returns ErrClosed.
func (m *Manager) Reload(ctx context.Context, cfg *Config) (ReloadResult, error) {
	if err := checkServers(cfg); err != nil {
		return ReloadResult{}, err
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ReloadResult{}, ErrClosed
	}
	var res ReloadResult
	var closing []*Conn
	type move struct {
		c   *Conn
		cfg ServerConfig
	}
	var moving []move
	var poke []*Conn
	next := map[string]*managed{}
	var order []string
	var errs []error
	for _, s := range cfg.Servers {
		old := m.conns[s.Name]
		order = append(order, s.Name)
		switch {
		case old == nil:
			mc, err := m.openLocked(s, nil)
			if err != nil {
				errs = append(errs, err)
				order = order[:len(order)-1]
				continue
			}
			next[s.Name] = mc
			res.Added = append(res.Added, s.Name)
		case specChanged(old.cfg, s):
			mc, err := m.openLocked(s, old.conn)
			if err != nil {
				errs = append(errs, err)
				next[s.Name] = old
				continue
			}
			closing = append(closing, old.conn)
			next[s.Name] = mc
			res.Reconnected = append(res.Reconnected, s.Name)
		case !reflect.DeepEqual(old.cfg.Transport, s.Transport):
			if err := s.Transport.Validate(); err != nil {
				errs = append(errs, err)
				next[s.Name] = old
				continue
			}
			moving = append(moving, move{old.conn, s})
			next[s.Name] = &managed{conn: old.conn, cfg: s}
			res.Reconnected = append(res.Reconnected, s.Name)
		case policies(old.cfg) != policies(s):
			if err := old.conn.SetPolicies(policies(s)); err != nil {
				errs = append(errs, fmt.Errorf("retuning %s: %w", s.Name, err))
			}
			next[s.Name] = &managed{conn: old.conn, cfg: s}
			res.Retuned = append(res.Retuned, s.Name)
			if old.conn.failsFast() {
				poke = append(poke, old.conn)
			}
		default:
			next[s.Name] = old
			res.Unchanged = append(res.Unchanged, s.Name)
			if old.conn.failsFast() {
				// A reload is a person's cue to look again: a connection that fails
				// fast (parked, unauthorized after a login elsewhere, an open
				// breaker) tries again now, with the credentials as they are.
				poke = append(poke, old.conn)
			}
		}
	}
	for _, name := range m.order {
		if _, kept := next[name]; !kept {
			closing = append(closing, m.conns[name].conn)
			res.Removed = append(res.Removed, name)
		}
	}
	m.conns, m.order = next, order
	m.dropped = slices.DeleteFunc(m.dropped, func(c *Conn) bool { return c.spec.Final(c.State()) })
	m.dropped = append(m.dropped, closing...)
	m.mu.Unlock()
	for _, c := range poke {
		c.CredentialsChanged()
		c.Reconnect()
	}
	conns := make([]*Conn, len(moving))
	for i, mv := range moving {
		conns[i] = mv.c
	}
	errs = append(errs, closeAll(ctx, closing), forEach(conns, "reconnecting", func(i int, c *Conn) error {
		pol := policies(moving[i].cfg)
		return c.Reconfigure(ctx, moving[i].cfg.Transport, &pol)
	}))
	return res, errors.Join(errs...)
}

// Close closes every connection, at once, and returns when all have closed or ctx has
// ended: the current ones, and those earlier Reloads removed that are still closing
// (a Reload whose ctx ended returns before they have). From then on requests fail with
// ErrClosed and Reload does nothing.
func (m *Manager) Close(ctx context.Context) error {
	// The lock is not held while the connections close (for up to their teardown
	// timeouts): a request made meanwhile must find ErrClosed at once, not wait.
	m.mu.Lock()
	conns := m.shutLocked()
	m.mu.Unlock()
	return closeAll(ctx, conns)
}

// shutLocked marks the Manager closed, the first time, and returns the connections it
// had then: every Close waits for all of them (Conn.Close may be called again). m.mu
// is held.
func (m *Manager) shutLocked() []*Conn {
	if !m.closed {
		m.closed = true
		for _, name := range m.order {
			m.shut = append(m.shut, m.conns[name].conn)
		}
		m.shut, m.dropped = append(m.shut, m.dropped...), nil
		m.conns, m.order = map[string]*managed{}, nil
	}
	return m.shut
}

func closeAll(ctx context.Context, conns []*Conn) error {
	return forEach(conns, "closing", func(_ int, c *Conn) error { return c.Close(ctx) })
}

// forEach runs fn on every connection (and its index) at once, and joins their errors,
// each saying what was being done to which server.
func forEach(conns []*Conn, doing string, fn func(int, *Conn) error) error {
	errs := make([]error, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			if err := fn(i, c); err != nil {
				errs[i] = fmt.Errorf("%s %s: %w", doing, c.Name(), err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Status returns the status of every server, in config order.
func (m *Manager) Status() []Status {
	m.mu.Lock()
	conns := make([]*Conn, 0, len(m.order))
	for _, name := range m.order {
		conns = append(conns, m.conns[name].conn)
	}
	m.mu.Unlock()
	out := make([]Status, len(conns))
	for i, c := range conns {
		out[i] = c.Status()
	}
	return out
}
