package mcpfsm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"syscall"

	"github.com/mcpfsm/mcpfsm/effects"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Options configure a Conn. The zero value runs the default lifecycle.
type Options struct {
	// Spec is the lifecycle; DefaultSpec() when nil.
	Spec *machine.Spec
	// Policies override the spec's defaults; nil means the defaults.
	Policies *machine.Policies
	// Client is the client name and version sent in initialize.
	Client *mcp.Implementation
	// Logger receives the connection's log records; slog.Default() when nil.
	Logger *slog.Logger
	// Observer is called with every transition, on the connection's owner
	// goroutine, in order. It must return quickly.
	Observer func(machine.Transition)
	// OnTools is called with the server's tool list each time it is listed: when a
	// session comes up, and after the server says the list changed.
	OnTools func([]*mcp.Tool)
	// History is how many transitions the connection remembers (see
	// machine.Options.History).
	History int
	// Rand draws the lifecycle's jitter; seed it for a repeatable run.
	Rand *rand.Rand

	// onOpen and onClose see every session as it opens and closes, and dial opens
	// them (tests).
	onOpen, onClose func(*effects.Session)
	dial            transport.Dialer
}

// A Conn is one long-lived connection to an MCP server, kept healthy by its own state
// machine. Calls are safe from any number of goroutines: each goes straight to the
// current session; only a failure is reported to the machine. Open one with Open.
type Conn struct {
	name string
	m    *machine.Machine
	fx   *effects.Conn
}

// Open starts a connection to the server cfg describes and returns at once: the
// connection dials in the background, and calls wait for it to be ready. The error is
// about cfg; connecting problems show up in the connection's transitions instead.
func Open(cfg transport.Config, opts Options) (*Conn, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	spec := opts.Spec
	if spec == nil {
		spec = DefaultSpec()
	}
	fx := effects.NewConn(cfg, effects.ConnOptions{
		Client: opts.Client, Logger: opts.Logger, OnTools: opts.OnTools,
		OnOpen: opts.onOpen, OnClose: opts.onClose, Dial: opts.dial,
	})
	m := machine.New(spec, machine.Options{
		Name: cfg.Name, Invoker: fx, Policies: opts.Policies, Logger: opts.Logger,
		Observer: opts.Observer, History: opts.History, Rand: opts.Rand,
	})
	fx.Bind(func(ev machine.Event) { m.Post(ev) })
	m.Start()
	return &Conn{name: cfg.Name, m: m, fx: fx}, nil
}

// Name returns the server's name, as its config gives it.
func (c *Conn) Name() string { return c.name }

// State returns the connection's state.
func (c *Conn) State() states.State { return c.m.State() }

// Machine returns the connection's state machine, for its history, transitions and
// waits.
func (c *Conn) Machine() *machine.Machine { return c.m }

// Tools returns the server's tools as last listed, or nil while no session is up.
func (c *Conn) Tools() []*mcp.Tool {
	if s := c.fx.Current(); s != nil {
		return s.Tools()
	}
	return nil
}

// Reconnect asks for a planned reconnect: a new session is opened while the current one
// serves calls, calls move to it once it is up, and the old one is closed once the calls
// in flight on it have finished. It spends no retry budget. If the new session cannot be
// opened, the old one serves on and the failure counts.
func (c *Conn) Reconnect() { c.m.Reconnect() }

// Close closes the connection for good (see machine.Machine.Close): it returns once
// the session is closed (bounded by the teardown timeout) and the machine's owner has
// exited for good, or with ctx's error.
func (c *Conn) Close(ctx context.Context) error { return c.m.Close(ctx) }

// WaitReady waits until the connection has a session that calls may use. It returns
// ErrBreakerOpen at once if the breaker is open, ErrClosed if the connection is closed,
// and ErrNotReady joined with ctx's error if ctx ends first.
func (c *Conn) WaitReady(ctx context.Context) error {
	s, err := c.acquire(ctx, nil)
	if s != nil {
		s.Release()
	}
	return err
}

// CallTool calls a tool on the current session, waiting for one if none is ready.
//
// A tool that fails returns a result with IsError set and a nil error: that is the
// tool's answer, and it says nothing about the connection. An error is a *CallError.
// A call that fails because the session broke is reported to the machine (once per
// session), which replaces the session; the call is then retried once on the next
// session if the server cannot have run it (the session had expired: HTTP 404, or the
// server could not be reached at all) or if the tool is annotated readOnlyHint or
// idempotentHint. Otherwise the error wraps ErrMayHaveRun: a non-idempotent call is
// never run twice. Every call returns before its context ends.
func (c *Conn) CallTool(ctx context.Context, name string, args any) (*mcp.CallToolResult, error) {
	params := &mcp.CallToolParams{Name: name, Arguments: args}
	var failed *effects.Session // the session a first attempt failed on
	var first *CallError        // and how it failed
	for {
		s, err := c.acquire(ctx, failed)
		if err != nil {
			return nil, c.noSession(name, err, first)
		}
		res, err := s.S.CallTool(ctx, params)
		ownClose := s.OwnClose()
		s.Release()
		if err == nil {
			return res, nil
		}
		if ctx.Err() != nil {
			// The caller gave up; that says nothing about the connection.
			return nil, &CallError{Server: c.name, Tool: name, State: c.m.State(), Cause: states.CauseCanceled, Retried: failed != nil, Err: err}
		}
		cause := effects.Classify(err, ownClose)
		c.fx.Report(s, cause, err)
		if mayHaveRun(cause, err) {
			err = fmt.Errorf("%w: %w", ErrMayHaveRun, err)
		}
		ce := &CallError{Server: c.name, Tool: name, State: c.m.State(), Cause: cause, Retried: failed != nil, Err: err}
		retry := failed == nil && (cause.Counts() || cause == states.CauseArtifact) &&
			(notRun(cause, err) || idempotent(s.Tool(name)))
		if !retry {
			return nil, ce
		}
		failed, first = s, ce
	}
}

// ListTools lists the server's tools from the current session (it asks the server),
// waiting for a session if none is ready, and retrying once on the next session if the
// first one breaks. An error is a *CallError.
func (c *Conn) ListTools(ctx context.Context) ([]*mcp.Tool, error) {
	var failed *effects.Session
	var first *CallError
	for {
		s, err := c.acquire(ctx, failed)
		if err != nil {
			return nil, c.noSession("", err, first)
		}
		tools, err := s.S.ListTools(ctx)
		ownClose := s.OwnClose()
		s.Release()
		if err == nil {
			return tools, nil
		}
		cause := states.CauseCanceled
		if ctx.Err() == nil {
			cause = effects.Classify(err, ownClose)
			c.fx.Report(s, cause, err)
		}
		ce := &CallError{Server: c.name, State: c.m.State(), Cause: cause, Retried: failed != nil, Err: err}
		if failed != nil || !(cause.Counts() || cause == states.CauseArtifact) {
			return nil, ce
		}
		failed, first = s, ce
	}
}

// acquire returns a session to call on, counted in flight, other than avoid: at once
// if one is ready, else once the machine has one. It fails fast while the breaker is
// open.
func (c *Conn) acquire(ctx context.Context, avoid *effects.Session) (*effects.Session, error) {
	if s := c.fx.Acquire(); s != nil {
		if s != avoid {
			return s, nil
		}
		s.Release()
	}
	for {
		st, err := c.m.Wait(ctx, func(st states.State) bool {
			cur := c.fx.Current()
			return cur != nil && cur != avoid || st == states.BreakerOpen
		})
		switch {
		case errors.Is(err, machine.ErrClosed):
			return nil, ErrClosed
		case err != nil:
			return nil, fmt.Errorf("%w: %w", ErrNotReady, err)
		case st == states.BreakerOpen:
			return nil, ErrBreakerOpen
		}
		if s := c.fx.Acquire(); s != nil {
			if s != avoid {
				return s, nil
			}
			s.Release()
		}
	}
}

// noSession is the error of a call that found no session to run on: err says why. When
// a first attempt had failed and this was to be the retry, the call ran once, not
// twice: the error is the first attempt's, with why it was not retried.
func (c *Conn) noSession(tool string, err error, first *CallError) error {
	if first != nil {
		first.State = c.m.State()
		first.Err = fmt.Errorf("%w (not retried: %w)", first.Err, err)
		return first
	}
	cause := states.CauseNone
	if errors.Is(err, ErrNotReady) {
		cause = states.CauseCanceled
	}
	return &CallError{Server: c.name, Tool: tool, State: c.m.State(), Cause: cause, Err: err}
}

// idempotent reports whether running the tool twice is safe, by its annotations.
func idempotent(t *mcp.Tool) bool {
	return t != nil && t.Annotations != nil && (t.Annotations.ReadOnlyHint || t.Annotations.IdempotentHint)
}

// unsent reports whether err says the request never reached a server.
func unsent(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// notRun reports whether a call that failed with err, of the given cause, cannot have
// run: the session had expired or the server could not be reached, and the server did
// not take the call's request. (The SDK fails every call in flight with the 404 that
// one request met, including calls the server took and is running.)
func notRun(cause states.Cause, err error) bool {
	if cause != states.CauseExpired && !unsent(err) {
		return false
	}
	var te *transport.Error
	return !errors.As(err, &te) || !te.Sent
}

// mayHaveRun reports whether a call that failed with err, of the given cause, may have
// run on the server: the connection broke (or we closed it) with the call in flight, or
// what came back could not be read (garbage on a stdio server's stdout: a protocol
// error that is no JSON-RPC answer). Not if the session had expired or the server was
// never reached, nor if the server answered with an error.
func mayHaveRun(cause states.Cause, err error) bool {
	switch {
	case notRun(cause, err):
		return false
	case cause.Counts() || cause == states.CauseArtifact:
		return true
	case cause == states.CauseProtocol:
		var answer *jsonrpc.Error
		return !errors.As(err, &answer)
	}
	return false
}
