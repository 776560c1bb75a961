package mcpfsm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sort"
	"strings"
	"sync"

	"github.com/mcpfsm/mcpfsm/effects"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ErrUnknownServer is the error of a call to a server a Manager does not have.
var ErrUnknownServer = errors.New("unknown server")

// ManagerOptions configure a Manager.
type ManagerOptions struct {
	// Client is the client name and version sent in initialize.
	Client *mcp.Implementation
	// Logger receives every connection's log records, each with the key "machine"
	// naming its server; slog.Default() when nil.
	Logger *slog.Logger
	// Observer is called with every transition of every server, on that server's
	// owner: one stream for all. It must return quickly.
	Observer func(server string, tr machine.Transition)
	// OnTools is called with a server's tool list each time it is listed.
	OnTools func(server string, tools []*mcp.Tool)
	// History is how many transitions each connection remembers.
	History int
}

// A Manager keeps a connection to each server of a Config: it opens them all, routes
// calls by server and tool, merges their transitions into one stream, and adopts a
// changed config without a restart. Its methods are safe for concurrent use.
type Manager struct {
	opts ManagerOptions

	mu    sync.Mutex
	conns map[string]*managed
	order []string // server names in config order
}

type managed struct {
	conn *Conn
	cfg  ServerConfig
}

// NewManager opens a connection to every server of cfg. Connecting happens in the
// background; calls wait for their server to be ready.
func NewManager(cfg *Config, opts ManagerOptions) (*Manager, error) {
	if err := checkNames(cfg); err != nil {
		return nil, err
	}
	m := &Manager{opts: opts, conns: map[string]*managed{}}
	for _, s := range cfg.Servers {
		mc, err := m.open(s)
		if err != nil {
			m.Close(context.Background())
			return nil, err
		}
		m.conns[s.Name] = mc
		m.order = append(m.order, s.Name)
	}
	return m, nil
}

// checkNames refuses a config that names no server or one server twice, as a config
// built in Go may (LoadConfig's map keys cannot): two connections under one name would
// leave the first out of reach, never closed.
func checkNames(cfg *Config) error {
	seen := make(map[string]bool, len(cfg.Servers))
	for i, s := range cfg.Servers {
		switch {
		case !serverName.MatchString(s.Name):
			return fmt.Errorf("mcpfsm: server %d: name %q: use letters, digits, - and _", i+1, s.Name)
		case seen[s.Name]:
			return fmt.Errorf("mcpfsm: server %q is named twice", s.Name)
		}
		seen[s.Name] = true
	}
	return nil
}

// policies returns the policies s is to run with: its own, or its spec's defaults when
// it leaves them zero (as a ServerConfig built in Go may).
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

func (m *Manager) open(s ServerConfig) (*managed, error) {
	pol := policies(s)
	opts := Options{Spec: s.Spec, Client: m.opts.Client, Logger: m.opts.Logger, History: m.opts.History, Policies: &pol}
	if obs := m.opts.Observer; obs != nil {
		opts.Observer = func(tr machine.Transition) { obs(s.Name, tr) }
	}
	if on := m.opts.OnTools; on != nil {
		opts.OnTools = func(tools []*mcp.Tool) { on(s.Name, tools) }
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
	return append([]string(nil), m.order...)
}

// Conn returns the connection to a server, or nil.
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
	Server string
	// Name is the server-qualified name, "server.tool", which Call accepts.
	Name string
	*mcp.Tool
}

// Tools returns the tools of every server that has a session up, sorted by qualified
// name.
func (m *Manager) Tools() []Tool {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Tool
	for name, mc := range m.conns {
		for _, t := range mc.conn.Tools() {
			out = append(out, Tool{Server: name, Name: name + "." + t.Name, Tool: t})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// CallTool calls a tool of a server (see Conn.CallTool).
func (m *Manager) CallTool(ctx context.Context, server, tool string, args any) (*mcp.CallToolResult, error) {
	c := m.Conn(server)
	if c == nil {
		return nil, fmt.Errorf("mcpfsm: %w %q", ErrUnknownServer, server)
	}
	return c.CallTool(ctx, tool, args)
}

// Call calls a tool by its server-qualified name, "server.tool".
func (m *Manager) Call(ctx context.Context, qualified string, args any) (*mcp.CallToolResult, error) {
	server, tool, ok := strings.Cut(qualified, ".")
	if !ok {
		return nil, fmt.Errorf("mcpfsm: %q is not a qualified tool name (server.tool)", qualified)
	}
	return m.CallTool(ctx, server, tool, args)
}

// A ReloadResult says what a Reload did to each server.
type ReloadResult struct {
	Added       []string // opened
	Removed     []string // closed
	Reconnected []string // transport or lifecycle changed: a new session, with the new config
	Retuned     []string // policies alone changed: adopted, the session kept
	Unchanged   []string
}

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
// new one is opened; a server whose transport changed is reconnected to the new one (a
// planned reconnect: a new session is opened, calls move to it, and the old session is
// closed once its calls have finished; if the new session cannot be opened, the old one
// serves on and Reload says why); one whose lifecycle spec changed gets a new
// connection; one whose policies alone changed adopts them and keeps its session; the
// others are not touched. Reload waits for the closes and reconnects until ctx ends.
func (m *Manager) Reload(ctx context.Context, cfg *Config) (ReloadResult, error) {
	if err := checkNames(cfg); err != nil {
		return ReloadResult{}, err
	}
	m.mu.Lock()
	var res ReloadResult
	var closing []*Conn
	var moving []move
	next := map[string]*managed{}
	var order []string
	var errs []error
	for _, s := range cfg.Servers {
		old := m.conns[s.Name]
		order = append(order, s.Name)
		switch {
		case old == nil:
			mc, err := m.open(s)
			if err != nil {
				errs = append(errs, err)
				order = order[:len(order)-1]
				continue
			}
			next[s.Name] = mc
			res.Added = append(res.Added, s.Name)
		case specChanged(old.cfg, s):
			mc, err := m.open(s)
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
			gen := old.conn.fx.SetConfig(s.Transport)
			old.conn.m.SetPolicies(policies(s))
			old.conn.Reconnect()
			moving = append(moving, move{old.conn, gen})
			old.cfg = s
			next[s.Name] = old
			res.Reconnected = append(res.Reconnected, s.Name)
		case policies(old.cfg) != policies(s):
			old.conn.m.SetPolicies(policies(s))
			old.cfg = s
			next[s.Name] = old
			res.Retuned = append(res.Retuned, s.Name)
		default:
			next[s.Name] = old
			res.Unchanged = append(res.Unchanged, s.Name)
		}
	}
	for _, name := range m.order {
		if _, kept := next[name]; !kept {
			closing = append(closing, m.conns[name].conn)
			res.Removed = append(res.Removed, name)
		}
	}
	m.conns, m.order = next, order
	m.mu.Unlock()
	errs = append(errs, closeAll(ctx, closing), waitMoved(ctx, moving))
	return res, errors.Join(errs...)
}

// A move is a reconnect Reload asked for: the connection, and the generation of the
// config it is to dial (see effects.Conn.SetConfig).
type move struct {
	c   *Conn
	gen uint64
}

// waitMoved waits until each connection Reload moved has tried its new config, and says
// which could not connect and why: a live session then serves on, on the old config,
// and a connection between sessions retries as after any failure.
func waitMoved(ctx context.Context, moves []move) error {
	conns := make([]*Conn, len(moves))
	for i, mv := range moves {
		conns[i] = mv.c
	}
	return forEach(conns, "reconnecting", func(i int, c *Conn) error {
		tried := func() *effects.Attempt {
			if a := c.fx.LastAttempt(); a != nil && a.Gen >= moves[i].gen {
				return a
			}
			return nil
		}
		st, err := c.m.Wait(ctx, func(st states.State) bool { return tried() != nil || st.Final() })
		a := tried()
		switch {
		case a == nil && err != nil:
			return err
		case a == nil:
			return fmt.Errorf("closed (%s) before the new config was tried", st)
		case a.Err == nil:
			return nil
		case st.HasSession():
			return fmt.Errorf("the new config did not connect, the old session serves on: %w", a.Err)
		}
		return fmt.Errorf("the new config did not connect: %w", a.Err)
	})
}

// Close closes every connection, at once, and returns when all have closed or ctx has
// ended.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	var conns []*Conn
	for _, mc := range m.conns {
		conns = append(conns, mc.conn)
	}
	m.conns, m.order = map[string]*managed{}, nil
	m.mu.Unlock()
	return closeAll(ctx, conns)
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
