package transport

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// This file makes a subscription on protocol 2026-07-28 mean what it means before it:
// in force once Subscribe returns.
//
// Before 2026-07-28 a subscription is a request (resources/subscribe) whose answer
// says the server has it. On 2026-07-28 it is a subscriptions/listen stream, which
// the go-sdk's client sends without waiting for anything (the stream's answer comes
// only when it ends); the server registers the subscription and then says so with
// notifications/subscriptions/acknowledged, listing what it agreed to honor. An update
// of the resource between the two is not sent. So Session.Subscribe waits for that
// acknowledgment: a restore (a new session given the connection's subscriptions) is
// then complete before calls move to the session, and a user's Subscribe has the
// server's word. An acknowledgment that leaves the resource out is the server's
// refusal. A server that acknowledges nothing (or answers the listen with an error,
// which the SDK drops unread) costs a wait of ackWait, after which the subscription
// is taken as made, as the SDK takes it.

// ackWait bounds how long Subscribe waits for a subscription's acknowledgment.
const ackWait = 2 * time.Second

// acks are the acknowledgments of a session's subscriptions on 2026-07-28.
type acks struct {
	mu      sync.Mutex
	held    map[string]bool // acknowledged, and not unsubscribed since
	waiting []*ackWaiter
}

// An ackWaiter waits for the acknowledgment of one subscription: got receives true
// when the server lists the resource, false when it refused it.
type ackWaiter struct {
	uri string
	got chan bool
}

// expect registers a wait for uri's acknowledgment; nil if the session already holds
// it (the SDK then sends nothing). Call done with what it returns.
func (a *acks) expect(uri string) *ackWaiter {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.held[uri] {
		return nil
	}
	w := &ackWaiter{uri: uri, got: make(chan bool, 1)}
	a.waiting = append(a.waiting, w)
	return w
}

// done removes w, acknowledged or not.
func (a *acks) done(w *ackWaiter) {
	if w == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.waiting = slices.DeleteFunc(a.waiting, func(x *ackWaiter) bool { return x == w })
}

// forget records that uri is no longer subscribed.
func (a *acks) forget(uri string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.held, uri)
}

// acked settles the waits an acknowledgment answers: every resource it lists is
// held. One that lists no resource and no list-changed stream refused the one
// subscription it was for, which is known only when a single one is waiting (the
// acknowledgment names its listen by a request ID that the SDK keeps to itself).
func (a *acks) acked(n *mcp.NotificationSubscriptions) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(n.ResourceSubscriptions) == 0 {
		if !n.ToolsListChanged && !n.PromptsListChanged && !n.ResourcesListChanged && len(a.waiting) == 1 {
			a.waiting[0].got <- false
			a.waiting = nil
		}
		return
	}
	if a.held == nil {
		a.held = map[string]bool{}
	}
	for _, uri := range n.ResourceSubscriptions {
		a.held[uri] = true
	}
	a.waiting = slices.DeleteFunc(a.waiting, func(w *ackWaiter) bool {
		if slices.Contains(n.ResourceSubscriptions, w.uri) {
			w.got <- true
			return true
		}
		return false
	})
}

// passAcks is a receiving middleware of the clients NewClient makes: it hands the
// acknowledgments of subscriptions to the session they are for.
func passAcks(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method == "notifications/subscriptions/acknowledged" {
			if p, ok := req.GetParams().(*mcp.SubscriptionsAcknowledgedParams); ok && p != nil {
				if s, _ := ctx.Value(orderKey{}).(*Session); s != nil {
					s.acks.acked(&p.Notifications)
				}
			}
		}
		return next(ctx, method, req)
	}
}

// newProtocol reports whether cs speaks protocol 2026-07-28 or later.
func newProtocol(cs *mcp.ClientSession) bool {
	r := cs.InitializeResult()
	return r != nil && r.ProtocolVersion >= "2026-07-28"
}

// Subscribe subscribes the session to the resource uri. On protocol 2026-07-28 it
// returns once the server has acknowledged the subscription, or ackWait after it was
// sent if the server does not say (see the top of this file); an acknowledgment that
// leaves the resource out is returned as the server's error. Errors are wrapped as
// Request's are.
func (s *Session) Subscribe(ctx context.Context, uri string) error {
	return s.Request(ctx, OpRequest, uri, func(ctx context.Context, cs *mcp.ClientSession) error {
		if !s.ackable || !newProtocol(cs) {
			return cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri})
		}
		w := s.acks.expect(uri)
		defer s.acks.done(w)
		if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil || w == nil {
			return err
		}
		t := time.NewTimer(ackWait)
		defer t.Stop()
		select {
		case ok := <-w.got:
			if !ok {
				return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("the server's acknowledgment of subscriptions/listen left out %q: the subscription is refused", uri)}
			}
			return nil
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-s.life.Done():
			return mcp.ErrConnectionClosed
		}
	})
}

// Unsubscribe cancels the session's subscription to uri.
func (s *Session) Unsubscribe(ctx context.Context, uri string) error {
	s.acks.forget(uri)
	return s.Request(ctx, OpRequest, uri, func(ctx context.Context, cs *mcp.ClientSession) error {
		return cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri})
	})
}
