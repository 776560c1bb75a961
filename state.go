package mcpfsm

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/mcpfsm/mcpfsm/effects"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The session state: what a user establishes on a session (the log level, resource
// subscriptions), which a Conn re-establishes on every new session before calls move
// to it (see restoreAndSwap). The roots are the client's and need no restoring: a new
// session's server asks for them.

// SetLoggingLevel sets the lowest level of the log messages the server sends
// (Handlers.LoggingMessage sees them). Once the server has accepted it, the level is
// part of the connection: every later session is set to it before calls move there.
// On protocol 2026-07-28 every request also carries it, which is all a server over
// streamable HTTP (stateless there) uses: such a server is not asked. A level that is
// not one of the protocol's eight is refused before anything is sent (cause request).
func (c *Conn) SetLoggingLevel(ctx context.Context, p *mcp.SetLoggingLevelParams) error {
	level := orEmpty(p).Level
	if levelRank(level) == len(logLevels) {
		return &CallError{Server: c.name, Method: "logging/setLevel", Name: capText(string(level), 60), State: c.m.State(), Cause: states.CauseRequest,
			Err: fmt.Errorf("%w: not a log level (one of %v)", transport.ErrInvalidRequest, logLevels)}
	}
	return c.changeState(ctx, "logging/setLevel", string(level), false, func(ctx context.Context, s *session) error {
		return setLevel(ctx, s, string(level), level)
	}, func() {
		c.level = level
		c.levelMeta.Store(&level)
	})
}

// setLevel sets the log level of the server of s (name: what errors say the request
// is about). On protocol 2026-07-28 over streamable HTTP the server keeps no session:
// the level each request carries in its _meta (see withLogLevel) is the one that
// counts, and nothing is sent (the go-sdk sends logging/setLevel there without the
// _meta such a server requires, and it is refused).
func setLevel(ctx context.Context, s *session, name string, level mcp.LoggingLevel) error {
	if s.stateless {
		return nil
	}
	return s.s.Request(ctx, transport.OpRequest, name, func(ctx context.Context, cs *mcp.ClientSession) error {
		return cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: level})
	})
}

// Subscribe asks the server for notifications/resources/updated about a resource
// (Handlers.ResourceUpdated sees them). Once the server has accepted it, the
// subscription is part of the connection: every later session subscribes before calls
// move there, and after a reconnect the resource is reported updated once, since an
// update may have been missed while no session was up. A subscription the server
// rejects is an error and is not kept; so is one that a later session's server
// rejects (the resource is gone from a restarted server): that session comes up
// without it, and the resource is reported updated once, so that a read finds out.
// On protocol 2026-07-28, where a subscription is a stream the server acknowledges or
// refuses apart from the request, Subscribe (and a restore) waits for that word, so
// that no update made once it returns is missed, and a refusal is the server's error
// (the go-sdk drops it unread); a server that says nothing costs a wait of 2 s (see
// transport.Session.Subscribe). A Subscribe (or Unsubscribe) whose ctx ends while its
// request is in flight may have taken effect on the server all the same, unrecorded:
// until the next session, which holds what the connection records, that server may
// send updates for a resource Subscriptions does not list (or none for one it does).
func (c *Conn) Subscribe(ctx context.Context, p *mcp.SubscribeParams) error {
	uri := orEmpty(p).URI
	return c.changeState(ctx, "resources/subscribe", uri, false, func(ctx context.Context, s *session) error {
		return s.s.Subscribe(ctx, uri)
	}, func() {
		if !slices.Contains(c.subs, uri) {
			c.subs = append(c.subs, uri)
		}
	})
}

// Unsubscribe cancels a subscription; later sessions do not restore it. With no
// session up (the server is down, or the connection fails fast), there is nothing to
// tell a server: the subscription is forgotten at once. So it is when the session it
// is sent on breaks under it and no other is up to send it again on.
func (c *Conn) Unsubscribe(ctx context.Context, p *mcp.UnsubscribeParams) error {
	uri := orEmpty(p).URI
	return c.changeState(ctx, "resources/unsubscribe", uri, true, func(ctx context.Context, s *session) error {
		return s.s.Unsubscribe(ctx, uri)
	}, func() {
		c.subs = slices.DeleteFunc(c.subs, func(s string) bool { return s == uri })
	})
}

// Subscriptions returns the URIs the connection is subscribed to, in the order they
// were subscribed.
func (c *Conn) Subscriptions() []string {
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	return slices.Clone(c.subs)
}

// changeState sends a request that changes the session state (idempotent, so safe to
// send again), and records the change once the server has accepted it. If calls moved
// to a new session while the request was in flight, that session's restore could not
// know of the change: it is sent there too. (A session that comes up after the record
// restores it: a restore notices a change recorded while it ran, and its last round
// holds records back until the swap; see lockRecord.) A change that only takes
// something away (offline) is recorded at once when no session is up: no server holds
// it, and the next session's restore will not give it; so is one whose session broke
// under it with no session up to send it again on.
func (c *Conn) changeState(ctx context.Context, method, name string, offline bool, f func(context.Context, *session) error, record func()) error {
	unrecorded := func(err error) error {
		return &CallError{Server: c.name, Method: method, Name: name, State: c.m.State(), Cause: states.CauseCanceled, Err: err}
	}
	if offline {
		if err := c.lockRecord(ctx); err != nil {
			return unrecorded(err)
		}
		if c.current.Load() == nil {
			record()
			c.stateVer++
			c.unlockRecord()
			return nil
		}
		c.unlockRecord()
	}
	var on *session
	send := func() error {
		_, err := call(ctx, c, request{method: method, name: name, rule: effects.RetrySafe}, func(ctx context.Context, s *session) (struct{}, error) {
			on = s
			return struct{}{}, f(ctx, s)
		})
		return err
	}
	if err := send(); err != nil {
		var ce *CallError
		if !offline || !errors.As(err, &ce) || !(ce.unsent || ce.resend) {
			return err
		}
		// It found no session to run on, or the session it was sent on broke and
		// no other was up to send it on again: no server holds the session state
		// any more, as if no session had been up when it began.
	}
	if err := c.lockRecord(ctx); err != nil {
		// The server has the change, the connection does not keep it: as when
		// the caller gives up while the request is in flight.
		return unrecorded(fmt.Errorf("%w: sent, but given up before it was recorded (a new session was being set up)", err))
	}
	record()
	c.stateVer++
	moved := c.current.Load()
	c.unlockRecord()
	if moved != nil && moved != on {
		return send()
	}
	return nil
}

// lockRecord takes what recording a change of the session state needs: the record
// gate, which the last round of a restore holds until its swap (while it sends on the
// new session: see restoreAndSwap), waited for until ctx ends (a free gate is taken
// even if ctx has ended), then stateMu, which is held only briefly.
func (c *Conn) lockRecord(ctx context.Context) error {
	select {
	case c.recordGate <- struct{}{}: // a free gate is taken whatever ctx says
	default:
		select {
		case c.recordGate <- struct{}{}:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	c.stateMu.Lock()
	return nil
}

func (c *Conn) unlockRecord() {
	c.stateMu.Unlock()
	<-c.recordGate
}

// subscribedLocked returns the subscriptions to restore. stateMu is held.
func (c *Conn) subscribedLocked() []string { return slices.Clone(c.subs) }
