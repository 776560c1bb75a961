package mcpfsm

import (
	"context"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"weak"

	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// This file is what package gateway (mcpfsm serve) needs of a Manager beyond its
// requests: to see what servers send before the SDK's client checks it, and to tell
// which server a message came from.

// clientMiddleware remembers, per Manager, the receiving middleware added with
// AddReceivingMiddleware and which SDK clients have it (a Manager's struct is not
// this file's to extend).
// Its keys are weak, and an entry goes when its Manager is collected.
var clientMiddleware struct {
	sync.Mutex
	by map[weak.Pointer[Manager]]*managerMiddleware
}

type managerMiddleware struct {
	mw      []mcp.Middleware
	applied map[*mcp.Client]int // how many of mw each client has
	// inputs is, per client, the middleware it has, in the order it wraps the
	// client's requests: what a 2026-07-28 server's input requests go through
	// (see inputMiddleware).
	inputs map[*mcp.Client]mcp.Middleware
}

// AddReceivingMiddleware wraps what the Manager's servers send (requests and
// notifications), before the SDK's client checks and handles it, in mw: a gateway
// answers elicitation/create and roots/list itself there (the go-sdk's client refuses
// some elicitation schemas before any handler sees them, and answers roots/list from
// one list per client, not per call). ServerName tells mw which server a message came
// from. A server on protocol 2026-07-28 asks inside a call's answer (input requests):
// those go through mw too, as requests of their method, under the call's context.
// A panic of mw's fails the message it was handling, as a handler's does.
// It wraps every SDK client the Manager has; connections share a client when
// their handlers advertise the same capabilities, and a client made later (a Reload
// adding a server whose handlers advertise others) is wrapped by the next call of
// AddReceivingMiddleware or Wrap: call Wrap after a Reload. mw must not block a
// notification for long: it runs on the connection's reading goroutine.
func (m *Manager) AddReceivingMiddleware(mw ...mcp.Middleware) {
	clientMiddleware.Lock()
	if clientMiddleware.by == nil {
		clientMiddleware.by = map[weak.Pointer[Manager]]*managerMiddleware{}
	}
	key := weak.Make(m)
	mm := clientMiddleware.by[key]
	if mm == nil {
		mm = &managerMiddleware{applied: map[*mcp.Client]int{}, inputs: map[*mcp.Client]mcp.Middleware{}}
		clientMiddleware.by[key] = mm
		runtime.AddCleanup(m, func(key weak.Pointer[Manager]) {
			clientMiddleware.Lock()
			delete(clientMiddleware.by, key)
			clientMiddleware.Unlock()
		}, key)
	}
	for _, w := range mw {
		mm.mw = append(mm.mw, skipMarks(contained(w)))
	}
	clientMiddleware.Unlock()
	m.Wrap()
}

// Wrap gives every SDK client of the Manager the middleware added with
// AddReceivingMiddleware that it does not have yet.
func (m *Manager) Wrap() {
	m.mu.Lock()
	clients := make([]*mcp.Client, 0, len(m.clients))
	for _, c := range m.clients {
		clients = append(clients, c)
	}
	m.mu.Unlock()
	clientMiddleware.Lock()
	defer clientMiddleware.Unlock()
	mm := clientMiddleware.by[weak.Make(m)]
	if mm == nil {
		return
	}
	for _, c := range clients {
		if n := mm.applied[c]; n < len(mm.mw) {
			c.AddReceivingMiddleware(mm.mw[n:]...)
			mm.applied[c] = len(mm.mw)
			mm.inputs[c] = stacked(mm.mw[n:], mm.inputs[c])
		}
	}
}

// stacked is the middleware that wraps a handler as AddReceivingMiddleware(added...)
// wraps one already wrapped in inner (nil for none): added's first outermost.
func stacked(added []mcp.Middleware, inner mcp.Middleware) mcp.Middleware {
	added = slices.Clone(added)
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		if inner != nil {
			next = inner(next)
		}
		for _, m := range slices.Backward(added) {
			next = m(next)
		}
		return next
	}
}

// inputMiddleware returns the receiving middleware the Manager whose client c is has
// given it (none if c is not a Manager's, or it has none): a 2026-07-28 server's
// input requests go through it too (see inputRounds).
func inputMiddleware(c *mcp.Client) mcp.Middleware {
	clientMiddleware.Lock()
	defer clientMiddleware.Unlock()
	for _, mm := range clientMiddleware.by {
		if mw := mm.inputs[c]; mw != nil {
			return mw
		}
	}
	return func(next mcp.MethodHandler) mcp.MethodHandler { return next }
}

// ServerName returns the name of the server whose connection a context belongs to:
// the context a connection's handlers, and middleware added with
// AddReceivingMiddleware, are given for what that server sends.
func ServerName(ctx context.Context) (string, bool) {
	if s := sessionFrom(ctx); s != nil && s.conn != nil {
		return s.conn.name, true
	}
	return "", false
}

// contained makes a panic of mw's, while it handles what a server sent, that
// message's error (a request's the server sees; on 2026-07-28, the call's), as a
// handler's is: it ran on a goroutine of the go-sdk's (or of the call's input
// requests), and ended the process.
func contained(mw mcp.Middleware) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		h := mw(next)
		return func(ctx context.Context, method string, req mcp.Request) (res mcp.Result, err error) {
			defer func() {
				if v := recover(); v != nil {
					log, server := slog.Default(), ""
					if s := sessionFrom(ctx); s != nil && s.conn != nil {
						log, server = s.conn.opts.Logger, s.conn.name
					}
					res, err = nil, callerPanicked(log, server, "middleware on "+method, v)
				}
			}()
			return h(ctx, method, req)
		}
	}
}

// skipMarks has mw pass over a session's marks of the order of its notifications
// (see transport.Session.Settle), which are not the server's.
func skipMarks(mw mcp.Middleware) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		h := mw(next)
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if transport.IsOrderMark(method, req) {
				return next(ctx, method, req)
			}
			return h(ctx, method, req)
		}
	}
}
