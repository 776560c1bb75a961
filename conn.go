package mcpfsm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Options configure a Conn. The zero value runs the default lifecycle with its
// default policies and answers nothing the server asks for.
type Options struct {
	// Spec is the lifecycle; DefaultSpec() when nil.
	Spec *machine.Spec
	// Policies override the spec's defaults as a whole; nil means the defaults.
	// Open refuses policies that machine.Policies.Validate refuses (an unset field is
	// an error, not a default: start from Spec.Defaults()).
	Policies *machine.Policies
	// Client is the client name and version sent in initialize.
	Client *mcp.Implementation
	// Handlers answer what the server sends on its own. The client advertises
	// sampling and elicitation only when their handler is set.
	Handlers Handlers
	// Roots, if not nil (even if empty), are the client's roots: the client
	// advertises the roots capability and answers roots/list with them; SetRoots
	// changes them. With nil Roots the client does not advertise roots.
	Roots []*mcp.Root
	// Logger receives the connection's log records; slog.Default() when nil.
	Logger *slog.Logger
	// Observer is called with every transition, on the connection's owner, in
	// order. It must return quickly and must not call Close.
	Observer func(machine.Transition)
	// History is how many transitions the connection remembers (see
	// machine.Options.History).
	History int
	// Rand draws the lifecycle's jitter; seed it for a repeatable run.
	Rand *rand.Rand
	// MeterProvider and TracerProvider receive the connection's metrics and spans
	// (docs/observability.md lists them); the global providers (otel.GetMeterProvider,
	// otel.GetTracerProvider) when nil, which record nothing until an application
	// sets them.
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider

	// client is the SDK client of a Manager's connections, shared among those with
	// the same handlers; nil: the Conn makes its own.
	client *mcp.Client
	// inherit is the connection this one replaces (a Manager's Reload with a new
	// lifecycle): the new one starts with its session state (level, subscriptions),
	// and its first session reports each subscription updated once, as after any
	// reconnect.
	inherit *Conn
	// onOpen and onClose see every session as it opens and closes, and dial opens
	// them (tests).
	onOpen, onClose func(*session)
	dial            transport.Dialer
}

// A Conn is one long-lived connection to an MCP server, kept healthy by its own state
// machine: it owns its sessions (opened and closed only by the machine's owner) and
// carries what the user established on them (log level, subscriptions, roots) from
// each session to the next. Its requests are those of an mcp.ClientSession, safe from
// any number of goroutines: each goes straight to the current session; only a failure
// is reported to the machine. Open one with Open.
type Conn struct {
	name string
	spec *machine.Spec
	m    *machine.Machine
	left sync.Once // closes the sessions a spec left open on its way to its final state (closeLeft)
	// auths are the OAuth clients withAuth built for the connection, which Close
	// closes (closeAuth).
	authMu sync.Mutex
	auths  []*transport.OAuth
	// closeAsked is set by Close; finalWG counts the goroutine that closes what
	// a spec that reached its final state by itself left open (see Open).
	closeAsked atomic.Bool
	finalWG    sync.WaitGroup
	opts       Options
	hs         *Handlers
	client     *mcp.Client
	shared     bool // client is a Manager's: roots are the Manager's
	answers    bool // the client answers requests of the server (sampling, elicitation, roots)
	// healthyAfter is how long a session must have lived for an answer on it to
	// prove the connection healthy: the breaker cooldown (see answeredOn).
	healthyAfter atomic.Int64
	// serverRequests counts the server's requests (sampling, elicitation) whose
	// handler is running, across sessions: at most maxServerRequests (see answer).
	serverRequests atomic.Int64

	// The sessions: see sessions.go.
	cfg     atomic.Pointer[versioned] // read by connect; replaced by Reconfigure
	nextID  uint64                    // the id of the last session; owner only
	current atomic.Pointer[session]
	retired *session // a session connect replaced, until retire closes it; owner only
	last    atomic.Pointer[attempt]
	listMu  sync.Mutex // orders list deliveries with changes of the current session
	sent    delivered  // under listMu

	// rootsMu orders SetRoots calls (see SetRoots).
	rootsMu sync.Mutex

	// The session state carried from session to session: see state.go.
	stateMu sync.Mutex
	// recordGate, held by a record of a change and by the last round of a restore
	// (see lockRecord): one at a time.
	recordGate chan struct{}
	stateVer   uint64 // counts the changes of the session state, for restores to notice
	resumed    bool   // the state came from a connection this one replaced (see Options.inherit)
	level      mcp.LoggingLevel
	levelMeta  atomic.Pointer[mcp.LoggingLevel] // level, for requests to carry (see withLogLevel)
	subs       []string                         // subscribed URIs, in the order they were subscribed

	ok  success    // the last request answered (see Status)
	tel *telemetry // metrics and spans (see otel.go)

	progress   sync.Map // progress token → func(*mcp.ProgressNotificationParams)
	progressID atomic.Uint64
}

// versioned is a transport config and its generation: 1 for Open's, then one more for
// each Reconfigure.
type versioned struct {
	cfg transport.Config
	gen uint64
}

// attempt is the outcome of a connect: the generation of the config it dialed, and why
// it failed, or nil if the session came up.
type attempt struct {
	gen uint64
	err error
}

// Open starts a connection to the server cfg describes and returns at once: the
// connection dials in the background, and calls wait for it to be ready. The error is
// about cfg or opts; connecting problems show up in the connection's transitions (and
// in the errors of calls that cannot be served) instead.
func Open(cfg transport.Config, opts Options) (*Conn, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default() // as its doc says; the connection logs through it unchecked
	}
	cfg, built, err := withAuth(cfg, transport.Config{}, opts.Logger)
	if err != nil {
		return nil, err
	}
	spec := opts.Spec
	if spec == nil {
		spec = DefaultSpec()
	}
	if opts.Policies != nil {
		if err := opts.Policies.Validate(); err != nil {
			return nil, fmt.Errorf("mcpfsm: server %q: %w", cfg.Name, err)
		}
	}
	if err := opts.Handlers.validate(); err != nil {
		return nil, fmt.Errorf("mcpfsm: server %q: %w", cfg.Name, err)
	}
	if opts.dial == nil {
		opts.dial = transport.DialClient
	}
	hs := opts.Handlers
	c := &Conn{name: cfg.Name, spec: spec, opts: opts, hs: &hs, client: opts.client, shared: opts.client != nil, recordGate: make(chan struct{}, 1)}
	c.cfg.Store(&versioned{cfg, 1})
	c.ownAuth(built)
	if old := opts.inherit; old != nil {
		old.stateMu.Lock()
		c.level, c.subs, c.resumed = old.level, slices.Clone(old.subs), true
		old.stateMu.Unlock()
		if c.level != "" {
			level := c.level
			c.levelMeta.Store(&level)
		}
	}
	c.answers = kindOf(&hs, opts.Roots != nil)&(kindRoots|kindSampling|kindSamplingTools|kindElicit) != 0
	if c.client == nil {
		c.client = newSDKClient(opts.Client, kindOf(&hs, opts.Roots != nil))
		if len(opts.Roots) > 0 {
			c.client.AddRoots(opts.Roots...)
		}
	}
	c.tel = newTelemetry(cfg.Name, spec, cfg, opts.MeterProvider, opts.TracerProvider)
	obs := opts.Observer
	observer := func(tr machine.Transition) {
		c.tel.transition(tr)
		if obs != nil {
			obs(tr)
		}
		if tr.From != tr.To && c.m.Calls() == 0 && !c.closeAsked.Load() { // Calls 0: a final state
			// The spec reached its final state by itself, not by Close: the
			// sessions it left open are closed now, not at a Close that may
			// come much later. Off the owner, whom an observer must not hold;
			// Close waits for it.
			c.finalWG.Go(func() {
				<-c.m.Done() // the owner, who owns the sessions until then, is gone
				ctx, cancel := context.WithTimeout(context.Background(), c.m.Policies().TeardownTimeout)
				defer cancel()
				c.closeLeft(ctx)
			})
		}
	}
	c.m = machine.New(spec, machine.Options{
		Name: cfg.Name, Effects: (*lifecycle)(c), Policies: opts.Policies, Logger: opts.Logger,
		Observer: observer, History: opts.History, Rand: opts.Rand,
	})
	c.healthyAfter.Store(int64(c.m.Policies().BreakerCooldown))
	c.m.Start()
	return c, nil
}

// Name returns the server's name, as its config gives it.
func (c *Conn) Name() string { return c.name }

// State returns the connection's state, as its lifecycle spec names it.
func (c *Conn) State() states.State { return c.m.State() }

// History returns the connection's latest transitions, oldest first (Options.History
// of them).
func (c *Conn) History() []machine.Transition { return c.m.History() }

// Watch returns a channel that receives every later transition, and a function that
// stops the watch and closes the channel (see machine.Machine.Watch).
func (c *Conn) Watch(buf int) (ch <-chan machine.Transition, stop func(), dropped func() int) {
	return c.m.Watch(buf)
}

// WaitState waits until ok accepts the connection's state, and returns that state. It
// returns early with ctx's error, or with ErrClosed once the connection has closed and
// its final state does not satisfy ok.
func (c *Conn) WaitState(ctx context.Context, ok func(states.State) bool) (states.State, error) {
	st, err := c.m.Wait(ctx, ok)
	if errors.Is(err, machine.ErrClosed) {
		err = ErrClosed
	}
	return st, err
}

// Policies returns the policies the connection runs with.
func (c *Conn) Policies() machine.Policies { return c.m.Policies() }

// SetPolicies retunes the live connection: it adopts p without leaving its state (the
// session, if any, is kept; timers already armed keep their deadlines). p must pass
// machine.Policies.Validate.
func (c *Conn) SetPolicies(p machine.Policies) error {
	err := c.m.SetPolicies(p)
	if errors.Is(err, machine.ErrClosed) {
		return ErrClosed
	}
	if err == nil {
		c.healthyAfter.Store(int64(p.BreakerCooldown))
	}
	return err
}

// Spec returns the lifecycle the connection runs.
func (c *Conn) Spec() *machine.Spec { return c.spec }

// Reconnect asks for a planned reconnect: a new session is opened while the current one
// serves calls, calls move to it once it is up (its state restored), and the old one is
// closed once the calls in flight on it have finished (those still running at the end
// of drain_timeout's share for them are cancelled, the server told, and fail as calls
// the close cut: see Close). It spends no retry budget. If the
// new session cannot be opened, the old one serves on and the failure counts. From a
// state without a session (backing off, breaker open, parked, unauthorized) it tries at
// once. A call or WaitReady made after Reconnect returns sees its effect: it does not
// fail fast on the state the reconnect leaves (an open breaker), but waits to see where
// it leads.
func (c *Conn) Reconnect() { c.m.Reconnect() }

// Reconfigure moves the connection to a new transport config (and policies, if p is
// not nil) with a planned reconnect, and waits, until ctx ends, for the first connect
// that dials it. It returns nil if that connect worked; otherwise why not, and then a
// live session (if any) serves on, on the old config, and a connection between sessions
// retries as after any failure.
func (c *Conn) Reconfigure(ctx context.Context, cfg transport.Config, p *machine.Policies) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if p != nil {
		if err := c.SetPolicies(*p); err != nil {
			return err
		}
	}
	var gen uint64
	for {
		old := c.cfg.Load()
		cfg, built, err := withAuth(cfg, old.cfg, c.opts.Logger)
		if err != nil {
			return err
		}
		if c.cfg.CompareAndSwap(old, &versioned{cfg, old.gen + 1}) {
			c.ownAuth(built) // one built for a config that lost the race was never used
			gen = old.gen + 1
			break
		}
	}
	c.m.Reconnect()
	tried := func() *attempt {
		if a := c.last.Load(); a != nil && a.gen >= gen {
			return a
		}
		return nil
	}
	st, err := c.m.Wait(ctx, func(st states.State) bool { return tried() != nil || c.spec.Final(st) })
	a := tried()
	switch {
	case a == nil && err != nil && !errors.Is(err, machine.ErrClosed):
		return err
	case a == nil:
		return fmt.Errorf("closed (%s) before the new config was tried", st)
	case a.err == nil:
		return nil
	case c.current.Load() != nil:
		return fmt.Errorf("the new config did not connect, the old session serves on: %w", a.err)
	}
	return fmt.Errorf("the new config did not connect: %w", a.err)
}

// Close closes the connection for good: it returns once the session is closed (bounded
// by the teardown timeout: see machine.Machine.Close for the rules) and the machine's
// owner has exited for good, or with ctx's error. Its OAuth client's token renewal
// under way, if any, is waited for within the same bound, then abandoned.
//
// Calls still in flight on a session as it is closed (by Close, or any teardown) are
// cancelled first, so that the server is told (notifications/cancelled; on protocol
// 2026-07-28 over streamable HTTP, the call's request ended), then the session is
// closed: their callers get a *CallError of cause artifact wrapping
// mcp.ErrConnectionClosed (and ErrMayHaveRun for a tool call that is not idempotent,
// which is not sent again).
func (c *Conn) Close(ctx context.Context) error {
	c.closeAsked.Store(true)
	// A token renewal under way is waited for within teardown_timeout from now, as
	// the machine's teardown is, or until ctx ends (see closeAuth).
	actx, acancel := context.WithTimeout(ctx, c.m.Policies().TeardownTimeout)
	defer acancel()
	if err := c.m.Close(ctx); err != nil {
		c.closeAuth(ctx) // ctx has ended: a renewal under way is abandoned
		return err
	}
	// The machine is final and its owner gone for good. A spec may have reached
	// its final state without a teardown (close straight from ready to closed, which
	// the validator allows): the sessions it left open are closed here, within
	// teardown_timeout, rather than left open for ever.
	tctx, cancel := context.WithTimeout(ctx, c.m.Policies().TeardownTimeout)
	defer cancel()
	c.closeLeft(tctx)
	c.finalWG.Wait()
	c.closeAuth(actx)
	return nil
}

// closeLeft closes, once, the sessions a spec left open on its way to its final state
// (the machine's owner is gone for good: nothing else touches them), within ctx.
func (c *Conn) closeLeft(ctx context.Context) {
	c.left.Do(func() {
		c.closeRetired(ctx, true)
		if s := c.current.Swap(nil); s != nil {
			s.draining.Store(true)
			_ = c.closeNow(ctx, s, true)
		}
	})
}

// WaitReady waits until the connection has a session that calls may use. It fails at
// once in a state where calls fail fast (ErrUnavailable, with the last failure),
// returns ErrClosed if the connection is closed, and ErrNotReady joined with ctx's
// error (and the last failure) if ctx ends first.
func (c *Conn) WaitReady(ctx context.Context) error {
	s, _, err := c.acquire(ctx, nil)
	if s != nil {
		c.release(s)
	}
	return err
}

// A Listing is what a connection last listed of its server: tools always; prompts,
// resources and resource templates when a handler listens for their changes.
type Listing struct {
	Tools             []*mcp.Tool
	Prompts           []*mcp.Prompt
	Resources         []*mcp.Resource
	ResourceTemplates []*mcp.ResourceTemplate
}

// Listed returns what the current session last listed, without asking the server; the
// zero Listing while no session is up.
func (c *Conn) Listed() Listing {
	s := c.current.Load()
	if s == nil {
		return Listing{}
	}
	var l Listing
	if p := s.tools.items.Load(); p != nil {
		l.Tools = *p
	}
	if p := s.prompts.items.Load(); p != nil {
		l.Prompts = *p
	}
	if p := s.resources.items.Load(); p != nil {
		l.Resources, l.ResourceTemplates = p.resources, p.templates
	}
	return l
}

// A ServerInfo is what the server of the current session said of itself.
type ServerInfo struct {
	// Implementation is the server's name and version.
	Implementation *mcp.Implementation `json:"implementation,omitempty"`
	// Capabilities are what the server said it can do.
	Capabilities *mcp.ServerCapabilities `json:"capabilities,omitempty"`
	// Instructions are the server's instructions to the client, if it gave any.
	Instructions string `json:"instructions,omitempty"`
	// ProtocolVersion is the negotiated protocol version.
	ProtocolVersion string `json:"protocolVersion,omitempty"`
	// SessionID is the MCP session ID: "" for stdio, in-memory, SSE and stateless
	// HTTP sessions.
	SessionID string `json:"sessionId,omitempty"`
	// Started is when the session came up.
	Started time.Time `json:"started"`
}

// Server returns what the server of the current session said of itself, and false
// while no session is up.
func (c *Conn) Server() (ServerInfo, bool) {
	s := c.current.Load()
	if s == nil {
		return ServerInfo{}, false
	}
	info := ServerInfo{SessionID: s.s.ID(), Started: s.start}
	if r := s.s.InitializeResult(); r != nil {
		info.Implementation, info.Capabilities, info.Instructions, info.ProtocolVersion = r.ServerInfo, r.Capabilities, r.Instructions, r.ProtocolVersion
	}
	return info, true
}

// Roots returns the client's roots, or nil if the connection has none (Options.Roots
// was nil).
func (c *Conn) Roots() []*mcp.Root {
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	return slices.Clone(c.opts.Roots)
}

// SetRoots replaces the client's roots: servers that ask (roots/list) get them from
// now on, and every session of the client is sent notifications/roots/list_changed
// (one still in its handshake is not: it asks for the roots once initialized). A
// connection opened without roots (Options.Roots nil) has not advertised them and
// refuses; so does a Manager's connection, whose roots are the Manager's (see
// Manager.SetRoots).
func (c *Conn) SetRoots(roots ...*mcp.Root) error {
	if c.shared {
		return errors.New("mcpfsm: the roots of a Manager's connection are the Manager's: use Manager.SetRoots")
	}
	// The sessions are told outside stateMu: a server that does not take the
	// notification holds SetRoots (the go-sdk gives it 10 s), not the restore of a
	// new session, nor Subscribe, Subscriptions and Roots. rootsMu keeps the
	// changes of the client's roots in the order of the SetRoots calls.
	c.rootsMu.Lock()
	defer c.rootsMu.Unlock()
	c.stateMu.Lock()
	if c.opts.Roots == nil {
		c.stateMu.Unlock()
		return errors.New("mcpfsm: the connection was opened without roots (Options.Roots), so it does not advertise them")
	}
	old := c.opts.Roots
	c.keepRoots(roots)
	c.stateMu.Unlock()
	setRoots(c.client, old, roots)
	return nil
}

// keepRoots records roots as the connection's own (what Roots returns and a
// restore announces), with stateMu held. The client that serves them is set
// by the caller: the connection's own, or the Manager's shared one.
func (c *Conn) keepRoots(roots []*mcp.Root) {
	c.opts.Roots = slices.Clone(roots)
	if c.opts.Roots == nil {
		c.opts.Roots = []*mcp.Root{}
	}
}

// failsFast reports whether calls fail fast in the connection's state (parked,
// unauthorized, an open breaker): a reload is a cue to look again.
func (c *Conn) failsFast() bool { return c.m.Calls() == machine.FailFast }
