package transport

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpfsm/mcpfsm/internal/turn"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// This file makes a subscription on protocol 2026-07-28 mean what it means before it:
// in force once Subscribe returns, or refused with the server's error.
//
// Before 2026-07-28 a subscription is a request (resources/subscribe) whose answer
// says the server has it. On 2026-07-28 it is a subscriptions/listen stream: the
// server registers the subscription, then sends notifications/subscriptions/
// acknowledged (naming the listen by its request ID, and listing what it agreed to
// honor), and answers the listen only when the stream ends, or at once with an error
// when it refuses. An update of the resource before the registration is not sent.
//
//   - The SDK drops the listen's answer unread, and so a refusal.
//   - Over stdio and in memory it sends the listen and returns at once. The session's
//     connection wrapper (orderConn) sees the listen go out, and its acknowledgment or
//     its error come in; Subscribe waits for one of them (at most ackWait, for a
//     server that sends neither).
//   - Over streamable HTTP its send returns once the response to the listen's POST has
//     begun, which the server starts after the registration, or with its refusal. The
//     session's round tripper sees the POST (by its Mcp-Method header) and the
//     messages of its response (sseMarks, or read ahead if it is one JSON message), and
//     Subscribe waits for the first of them in the same way.
//
// A refused subscription is also taken off the SDK session's own list, which would
// otherwise keep a later Subscribe of the resource from sending anything; and one
// Subscribe (or Unsubscribe) at a time per resource finds that list as the last one
// left it.
//
// Two faults of the go-sdk's server (v1.8.0) are worked around where the session
// sees its answers (stdio and in memory; a stateless HTTP listen is a session of its
// own, which they do not touch). When a listen ends, the server's cleanup
//   - unsubscribes its resources by session and resource: a Subscribe of a
//     resource whose listen is being cancelled (by Unsubscribe, or by a Subscribe
//     that failed) therefore waits until the answer ending it has come (the cleanup
//     has run), at most ackWait, so that the new subscription is not undone;
//   - forgets every list-changed registration of the session: the list-changed
//     listen is then sent again (relistenRule).

// ackWait bounds how long Subscribe waits for a server to acknowledge or refuse a
// subscription.
const ackWait = 2 * time.Second

// listens are a session's subscriptions/listen requests, from their sending to the
// first word of the server about them, and the Subscribe calls waiting for that word.
type listens struct {
	on bool // the session's connection shows them its messages; set before it connects
	// send, set by the session's orderConn, sends a message of the session's own
	// (see relistenRule); nil where no orderConn is (streamable HTTP).
	send    func(msg jsonrpc.Message)
	n       atomic.Int32 // len(sent) + len(open): answers are looked up only while there are any
	mu      sync.Mutex
	sent    map[jsonrpc.ID][]string // the resources each listen in flight asked for
	waiting []*listenWait
	// turns are the resources a Subscribe or Unsubscribe is under way for: one at a
	// time per resource, so that each finds the SDK session's list as the last one
	// left it (holding the resource, or not after a refusal).
	turns turn.Turns
	// lost, set with send, is told when the server answers (ends) a resource
	// listen it had agreed to and that was not cancelled (Session.listenLost).
	lost func(error)
	// changes are the params of the list-changed listen the SDK opened at connect;
	// nil if it opened none. open are the resource listens sent and not yet
	// answered, where send is set. relisten is the list-changed listen sent again.
	changes  json.RawMessage
	open     map[jsonrpc.ID]*openListen
	relisten relisten
}

// openListen is a resource listen sent whose answer, which ends it, has not come.
type openListen struct {
	uris      []string
	ended     chan struct{} // closed when the answer comes
	cancelled time.Time     // when Unsubscribe (or a failed Subscribe) cancelled it; zero: not
	agreed    bool          // the server's acknowledgment agreed to a resource of it
}

// cancelledFor reports whether ol, cancelled, asked for uri.
func (ol *openListen) cancelledFor(uri string) bool {
	return !ol.cancelled.IsZero() && slices.Contains(ol.uris, uri)
}

// counted brings n up to date after sent or open changed. l.mu is held.
func (l *listens) counted() { l.n.Store(int32(len(l.sent) + len(l.open))) }

// relisten is the state of the list-changed listen the session sends again
// (relistenRule): at most one is open on the server at a time.
type relisten struct {
	n          int        // listens sent so far; the next one's ID is relistenID(n)
	open       bool       // one is open on the server
	id         jsonrpc.ID // its ID
	acked      bool       // the server has acknowledged it
	cancelling bool       // its cancellation has been sent
	again      bool       // another is to be sent once its answer comes
}

// relistenRule: a go-sdk server (v1.8.0) forgets every list-changed registration of
// a session whenever any subscriptions/listen of that session ends, whatever that
// listen asked for: an Unsubscribe, a refused subscription, or one a server without
// subscriptions answers at once. Its tools/prompts/resources list_changed
// notifications then stop for good on 2026-07-28 over stdio and in memory (a
// stateless HTTP listen has a session of its own). So once the answer that ends a
// resource listen of the session comes (the server has run its cleanup by then),
// the list-changed listen the SDK opened at connect is sent again, with the SDK's
// own params. One is kept open at a time: if one is open, it is cancelled first
// (once the server has acknowledged it), and the next is sent once its answer comes
// (its end, too, made the server forget).
// Their answers are the session's own, not the SDK's (ownAnswer).

// relistenPrefix begins the request IDs of the listens relisten sends.
const relistenPrefix = "mcpfsm-relisten-"

// A listenWait is a Subscribe waiting for the server's word on its resource.
type listenWait struct {
	uri  string
	id   jsonrpc.ID // the listen that asked for it, once sent
	sent bool
	got  chan error // nil: in force; else the refusal
}

// expect registers a wait for the server's word on uri. Call done with it.
func (l *listens) expect(uri string) *listenWait {
	w := &listenWait{uri: uri, got: make(chan error, 1)}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.waiting = append(l.waiting, w)
	return w
}

// done forgets w, and its listen once no wait is on it: a listen its server
// neither acknowledged nor answered (Subscribe took it as made after ackWait) was
// kept for the session's life, one more for each such Subscribe.
func (l *listens) done(w *listenWait) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.waiting = slices.DeleteFunc(l.waiting, func(x *listenWait) bool { return x == w })
	if w.sent && !slices.ContainsFunc(l.waiting, func(x *listenWait) bool { return x.sent && x.id == w.id }) {
		delete(l.sent, w.id)
		l.counted()
	}
}

// wasSent reports whether a listen for w has gone out.
func (l *listens) wasSent(w *listenWait) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return w.sent
}

// settle gives every wait on listen id its answer, as answer says for each resource
// the listen asked for; the listen is then forgotten (its first word is all a wait
// needs).
func (l *listens) settle(id jsonrpc.ID, answer func(uri string) error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.sent[id]; !ok {
		return
	}
	delete(l.sent, id)
	l.counted()
	l.waiting = slices.DeleteFunc(l.waiting, func(w *listenWait) bool {
		if !w.sent || w.id != id {
			return false
		}
		w.got <- answer(w.uri)
		return true
	})
}

// wrote notes a message the session sends: a subscriptions/listen request.
func (l *listens) wrote(msg jsonrpc.Message) {
	req, ok := msg.(*jsonrpc.Request)
	if !ok || req.Method != "subscriptions/listen" || !req.IsCall() {
		return
	}
	var p listenParams
	if json.Unmarshal(req.Params, &p) != nil {
		return
	}
	n := p.Notifications
	if len(n.ResourceSubscriptions) == 0 {
		if n.ToolsListChanged || n.PromptsListChanged || n.ResourcesListChanged {
			l.mu.Lock()
			if l.changes == nil {
				l.changes = slices.Clone(req.Params)
			}
			l.mu.Unlock()
		}
		return
	}
	uris := n.ResourceSubscriptions
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sent == nil {
		l.sent = map[jsonrpc.ID][]string{}
		l.open = map[jsonrpc.ID]*openListen{}
	}
	l.sent[req.ID] = uris
	if l.send != nil {
		// Only where the answers that end listens are seen (orderConn): over
		// streamable HTTP a listen's stream may end without one. A listen
		// cancelled longer than ackWait ago is forgotten: its server does not
		// answer cancelled requests.
		for id, ol := range l.open {
			if !ol.cancelled.IsZero() && time.Since(ol.cancelled) > ackWait {
				delete(l.open, id)
			}
		}
		l.open[req.ID] = &openListen{uris: uris, ended: make(chan struct{})}
	}
	l.counted()
	for _, w := range l.waiting {
		if !w.sent && slices.Contains(uris, w.uri) {
			w.id, w.sent = req.ID, true
		}
	}
}

// wroteBody notes the subscriptions/listen request of an HTTP POST, from a copy of its
// body, and returns its ID, if it did.
func (l *listens) wroteBody(req *http.Request) (jsonrpc.ID, bool) {
	if req.GetBody == nil {
		return jsonrpc.ID{}, false // the SDK's requests have one; without it, the listen goes unwatched
	}
	body, err := req.GetBody()
	if err != nil {
		return jsonrpc.ID{}, false
	}
	defer body.Close()
	data, err := io.ReadAll(io.LimitReader(body, maxMarkedEvent))
	if err != nil {
		return jsonrpc.ID{}, false
	}
	msg, err := decodeMessage(data)
	req2, ok := msg.(*jsonrpc.Request)
	if err != nil || !ok {
		return jsonrpc.ID{}, false
	}
	l.wrote(msg)
	return req2.ID, true
}

// failed settles the waits on listen id with err: the listen never reached the
// server, or its answer was no JSON-RPC message.
func (l *listens) failed(id jsonrpc.ID, err error) {
	l.settle(id, func(string) error { return err })
}

// read notes a message the session receives: the acknowledgment of a listen, or the
// answer to one. It returns the list-changed notifications the session is to be
// handed after msg, if msg puts a list-changed listen sent again in force (see
// missedChanges).
func (l *listens) read(msg jsonrpc.Message) []jsonrpc.Message {
	switch m := msg.(type) {
	case *jsonrpc.Response:
		if l.n.Load() == 0 {
			return nil
		}
		defer l.ended(m.ID)
		l.settle(m.ID, func(string) error {
			if m.Error != nil {
				return m.Error // the server's refusal
			}
			return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the server ended subscriptions/listen without acknowledging it"}
		})
	case *jsonrpc.Request:
		if m.Method != "notifications/subscriptions/acknowledged" {
			return nil
		}
		var p struct {
			Meta          map[string]any `json:"_meta"`
			Notifications struct {
				ResourceSubscriptions []string `json:"resourceSubscriptions"`
			} `json:"notifications"`
		}
		if json.Unmarshal(m.Params, &p) != nil {
			return nil
		}
		id, err := jsonrpc.MakeID(p.Meta[mcp.MetaKeySubscriptionID])
		if err != nil || !id.IsValid() {
			return nil
		}
		if isRelisten(id) {
			out, inForce := l.relistenAcked(id)
			if out != nil {
				l.send(out)
			}
			if inForce {
				return l.missedChanges()
			}
			return nil
		}
		honored := p.Notifications.ResourceSubscriptions
		if len(honored) > 0 {
			l.mu.Lock()
			if ol := l.open[id]; ol != nil {
				ol.agreed = true
			}
			l.mu.Unlock()
		}
		l.settle(id, func(uri string) error {
			if slices.Contains(honored, uri) {
				return nil
			}
			return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("the server's acknowledgment of subscriptions/listen left out %q: the subscription is refused", uri)}
		})
	}
	return nil
}

// missedChanges returns a list-changed notification for each list the session's
// list-changed listen is for: handed to the SDK as the server's, once a listen sent
// again is in force, they have the session's user list again. Between the server's
// forgetting of the session's registration and its registration of the listen sent
// again (a round trip, two when an open one is cancelled first), a change of its
// lists is notified to no one (relistenRule); it was lost until the next change.
// The cost is a re-list of each after a resource listen ends (an Unsubscribe, a
// refused Subscribe).
func (l *listens) missedChanges() []jsonrpc.Message {
	var p listenParams
	if json.Unmarshal(l.changes, &p) != nil {
		return nil
	}
	var out []jsonrpc.Message
	for _, n := range []struct {
		on     bool
		method string
	}{
		{p.Notifications.ToolsListChanged, "notifications/tools/list_changed"},
		{p.Notifications.PromptsListChanged, "notifications/prompts/list_changed"},
		{p.Notifications.ResourcesListChanged, "notifications/resources/list_changed"},
	} {
		if n.on {
			out = append(out, &jsonrpc.Request{Method: n.method, Params: json.RawMessage("{}")})
		}
	}
	return out
}

// agreed reports whether msg is the acknowledgment of a listen in which the server
// agreed to hold something: a resource's updates, or a list's changes. (One that
// agreed to nothing, a refusal, ends at once.)
func agreed(msg *jsonrpc.Request) bool {
	if msg.Method != "notifications/subscriptions/acknowledged" {
		return false
	}
	var p listenParams
	if json.Unmarshal(msg.Params, &p) != nil {
		return false
	}
	n := p.Notifications
	return len(n.ResourceSubscriptions) > 0 || n.ToolsListChanged || n.PromptsListChanged || n.ResourcesListChanged
}

// listenParams are what a subscriptions/listen request and its acknowledgment say
// the listen holds.
type listenParams struct {
	Notifications struct {
		ResourceSubscriptions []string `json:"resourceSubscriptions"`
		ToolsListChanged      bool     `json:"toolsListChanged"`
		PromptsListChanged    bool     `json:"promptsListChanged"`
		ResourcesListChanged  bool     `json:"resourcesListChanged"`
	} `json:"notifications"`
}

// ended notes the answer to request id: if it ends a resource listen, the
// list-changed listen is sent again (relistenRule).
func (l *listens) ended(id jsonrpc.ID) {
	l.mu.Lock()
	ol := l.open[id]
	if ol == nil {
		l.mu.Unlock()
		return
	}
	delete(l.open, id)
	l.counted()
	close(ol.ended)
	// The server ended, by itself, a listen it had agreed to: it no longer sends
	// what it listened for.
	lost := ol.agreed && ol.cancelled.IsZero() && l.lost != nil
	var out jsonrpc.Message
	if l.changes != nil && l.send != nil {
		r := &l.relisten
		switch {
		case !r.open:
			out = l.relistenLocked()
		case r.acked && !r.cancelling:
			r.cancelling, r.again = true, true
			out = &jsonrpc.Request{Method: "notifications/cancelled", Params: cancelParams(r.id)}
		default:
			r.again = true // sent once its acknowledgment, or its answer, comes
		}
	}
	l.mu.Unlock()
	if out != nil {
		l.send(out)
	}
	if lost {
		l.lost(io.EOF)
	}
}

// relistenLocked returns the next list-changed listen to send, and notes it open.
// l.mu is held.
func (l *listens) relistenLocked() jsonrpc.Message {
	r := &l.relisten
	r.id, r.open, r.acked, r.cancelling, r.again = relistenID(r.n), true, false, false, false
	r.n++
	return &jsonrpc.Request{ID: r.id, Method: "subscriptions/listen", Params: l.changes}
}

// relistenAcked notes the acknowledgment of the list-changed listen the session
// sent again, and returns its cancellation if another is due: a cancellation sent
// before the server had the listen would be lost, and the listen would stay open.
// inForce reports that none is due: the listen acknowledged is the one in force.
func (l *listens) relistenAcked(id jsonrpc.ID) (cancel jsonrpc.Message, inForce bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := &l.relisten
	if !r.open || r.id != id || l.send == nil {
		return nil, false
	}
	r.acked = true
	if r.again {
		if !r.cancelling {
			r.cancelling = true
			return &jsonrpc.Request{Method: "notifications/cancelled", Params: cancelParams(r.id)}, false
		}
		return nil, false
	}
	return nil, true
}

// relistenEnded notes the answer to a list-changed listen the session sent again,
// and returns the next one to send, if one is due.
func (l *listens) relistenEnded(id jsonrpc.ID) jsonrpc.Message {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := &l.relisten
	if !r.open || r.id != id {
		return nil
	}
	r.open = false
	if r.again && l.send != nil {
		return l.relistenLocked()
	}
	return nil
}

func cancelParams(id jsonrpc.ID) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"requestId": id.Raw(), "reason": "sent again"})
	return b
}

// relistenID is the request ID of the n-th listen relisten sends.
func relistenID(n int) jsonrpc.ID {
	id, _ := jsonrpc.MakeID(relistenPrefix + strconv.Itoa(n))
	return id
}

// isRelisten reports whether id is that of a listen relisten sent.
func isRelisten(id jsonrpc.ID) bool {
	s, ok := id.Raw().(string)
	return ok && strings.HasPrefix(s, relistenPrefix)
}

// ownAnswer reports whether msg answers a listen relisten sent: the session's own,
// which the SDK, never having sent it, must not see.
func ownAnswer(msg jsonrpc.Message) bool {
	r, ok := msg.(*jsonrpc.Response)
	return ok && isRelisten(r.ID)
}

// errNoURI is the error of a Subscribe or Unsubscribe without a URI on protocol
// 2026-07-28: a subscription is a listen there, which the go-sdk refuses to open
// (or cancel) for no resource, with an error that says nothing of the kind.
var errNoURI = fmt.Errorf("%w: no resource URI", ErrInvalidRequest)

// newProtocol reports whether cs speaks protocol 2026-07-28 or later.
func newProtocol(cs *mcp.ClientSession) bool {
	r := cs.InitializeResult()
	return r != nil && NewProtocol(r.ProtocolVersion)
}

// NewProtocol reports whether an MCP protocol version is 2026-07-28 or later: no
// session on streamable HTTP (each request carries its client's capabilities and
// log level in its _meta), subscriptions as subscriptions/listen streams, and a
// server's requests during a call answered inside the call (multi round-trip).
func NewProtocol(version string) bool { return version >= "2026-07-28" }

// Subscribe subscribes the session to the resource uri. On protocol 2026-07-28 it
// returns once the server has the subscription, or with the server's refusal, or
// ackWait after it was sent from a server that says neither (see the top of this
// file). Errors are wrapped as Request's are.
func (s *Session) Subscribe(ctx context.Context, uri string) error {
	return s.Request(ctx, OpRequest, uri, func(ctx context.Context, cs *mcp.ClientSession) error {
		if !newProtocol(cs) {
			return s.sdkSubscribe(ctx, cs, uri)
		}
		if uri == "" {
			return errNoURI
		}
		if !s.listens.on {
			return s.sdkSubscribe(ctx, cs, uri)
		}
		release, err := s.listens.turns.Acquire(ctx, uri)
		if err != nil {
			return err
		}
		defer release()
		if s.listens.send != nil {
			if err := s.awaitCancelled(ctx, uri); err != nil {
				return err
			}
		}
		w := s.listens.expect(uri)
		err = s.awaitListen(ctx, cs, w)
		s.listens.done(w)
		if err != nil {
			// Off the SDK session's list too, or a later Subscribe sends nothing.
			s.listens.cancelled(uri)
			_ = cs.Unsubscribe(context.WithoutCancel(ctx), &mcp.UnsubscribeParams{URI: uri})
		}
		return err
	})
}

// awaitListen subscribes cs to w's resource and waits for the server's word on the
// listen, if one was sent (the SDK sends none for a resource it is subscribed to).
func (s *Session) awaitListen(ctx context.Context, cs *mcp.ClientSession, w *listenWait) error {
	if err := s.sdkSubscribe(ctx, cs, w.uri); err != nil {
		return err
	}
	if !s.listens.wasSent(w) {
		return nil // the SDK holds the subscription already
	}
	t := time.NewTimer(ackWait)
	defer t.Stop()
	select {
	case err := <-w.got:
		return err
	case <-t.C:
		return nil // taken as made, as the SDK takes it
	case <-ctx.Done():
		return ctx.Err()
	case <-s.life.Done():
		return mcp.ErrConnectionClosed
	}
}

// sdkSubscribe is cs.Subscribe, undone if the session is closing. On 2026-07-28
// the SDK's Close cancels the subscriptions/listen calls the session holds, each
// awaited by a goroutine of its own; one registered after (a Subscribe racing the
// close) would never be cancelled, and its goroutine would hold the closed session
// for ever. Close marks the session closing before it closes the SDK's.
func (s *Session) sdkSubscribe(ctx context.Context, cs *mcp.ClientSession, uri string) error {
	err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri})
	if s.closing.Load() && newProtocol(cs) {
		_ = cs.Unsubscribe(context.WithoutCancel(ctx), &mcp.UnsubscribeParams{URI: uri})
		if err == nil {
			err = mcp.ErrConnectionClosed // the SDK's Subscribe does not await its listen
		}
	}
	return err
}

// Unsubscribe cancels the session's subscription to uri, once no Subscribe for it is
// under way.
func (s *Session) Unsubscribe(ctx context.Context, uri string) error {
	return s.Request(ctx, OpRequest, uri, func(ctx context.Context, cs *mcp.ClientSession) error {
		if uri == "" && newProtocol(cs) {
			return errNoURI
		}
		release, err := s.listens.turns.Acquire(ctx, uri)
		if err != nil {
			return err
		}
		defer release()
		s.listens.cancelled(uri)
		return cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri})
	})
}

// cancelled notes that the open listens for uri are being cancelled.
func (l *listens) cancelled(uri string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ol := range l.open {
		if ol.cancelled.IsZero() && slices.Contains(ol.uris, uri) {
			ol.cancelled = time.Now()
		}
	}
}

// awaitCancelled waits until the cancelled listens for uri have ended, at most
// ackWait (a go-sdk server unsubscribes an ended listen's resources by session and
// resource: a subscription made before that would be taken away). Those that do
// not end by then are forgotten.
func (s *Session) awaitCancelled(ctx context.Context, uri string) error {
	l := &s.listens
	l.mu.Lock()
	var ends []<-chan struct{}
	for _, ol := range l.open {
		if ol.cancelledFor(uri) {
			ends = append(ends, ol.ended)
		}
	}
	l.mu.Unlock()
	if len(ends) == 0 {
		return nil
	}
	t := time.NewTimer(ackWait)
	defer t.Stop()
	for _, end := range ends {
		select {
		case <-end:
		case <-t.C:
			l.mu.Lock()
			for id, ol := range l.open {
				if ol.cancelledFor(uri) {
					delete(l.open, id)
				}
			}
			l.counted()
			l.mu.Unlock()
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-s.life.Done():
			return mcp.ErrConnectionClosed
		}
	}
	return nil
}
