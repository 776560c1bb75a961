package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// This file forwards the front's requests to the backends: each goes through the
// backend's connection (mcpfsm.Conn), with its call path's retry rules, after a
// check that the backend has a session (a backend without one fails the request at
// once, saying why, unless Options.ReadyWait says to wait).

// ready checks that a server can take a request now (or within ReadyWait), and
// returns its connection; otherwise nil and the error saying why.
func (g *Gateway) ready(ctx context.Context, server string) (*mcpfsm.Conn, error) {
	c := g.m.Conn(server)
	if c == nil {
		return nil, fmt.Errorf("server %q is not configured", server)
	}
	wctx, cancel := context.WithTimeout(ctx, g.opts.ReadyWait)
	defer cancel()
	if err := c.WaitReady(wctx); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return c, nil
}

// forwardMeta returns the _meta of a front request to send on to a backend: without
// the protocol's own keys (a 2026-07-28 front request's protocol version, client info
// and capabilities are the front's, not ours) but for its log level (on 2026-07-28 a
// client asks for a request's log messages with it; the connection keeps the more
// verbose of it and its own), and without the progress token (the connection sets its
// own).
func forwardMeta(m mcp.Meta) mcp.Meta {
	var out mcp.Meta
	for k, v := range m {
		if k == "progressToken" || strings.HasPrefix(k, "io.modelcontextprotocol/") && k != mcp.MetaKeyLogLevel {
			continue
		}
		if out == nil {
			out = mcp.Meta{}
		}
		out[k] = v
	}
	return out
}

// ownMeta drops a backend's server info from its result (on 2026-07-28): the front's
// is the gateway's, which the front's server adds where it is missing.
func ownMeta(res any) {
	if r, ok := res.(mcp.Result); ok {
		if v := reflect.ValueOf(r); v.Kind() != reflect.Pointer || !v.IsNil() {
			delete(r.GetMeta(), mcp.MetaKeyServerInfo)
		}
	}
}

// withoutResultType returns a copy of a backend's tools/call, prompts/get or
// resources/read result without the resultType its 2026-07-28 answer carried (the
// go-sdk keeps it, unexported, and writes it again): the front's server sets it
// itself for a front session on 2026-07-28, and leaves it unset before, where the
// protocol has no such field; the gateway wrote "resultType":"complete" to front
// sessions on 2025-06-18 and 2025-03-26, which a go-sdk server does not. The copy
// carries every exported field; the result the connection returned is left as it
// is (a read may be cached, and shared). Other results pass as they are.
func withoutResultType[R any](res R) R {
	if _, ok := any(res).(interface{ NeedsInput() bool }); !ok {
		return res
	}
	v := reflect.ValueOf(res)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return res
	}
	e := v.Elem()
	out := reflect.New(e.Type())
	for i := range e.NumField() {
		if e.Type().Field(i).IsExported() {
			out.Elem().Field(i).Set(e.Field(i))
		}
	}
	return out.Interface().(R)
}

// callTool forwards tools/call. A backend that cannot take the call, or whose session
// breaks under it (and the call is not retried), makes a tool error result that says
// why: hosts take a protocol error for a broken server, and a tool error is the
// answer an LLM can read. A backend's own protocol error (an unknown tool, say) is
// passed on as it is.
func (g *Gateway) callTool(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	st, ok := g.table.Load().tools[req.Params.Name]
	if !ok {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: g.table.Load().unknown("tool", req.Params.Name)}
	}
	p := &mcp.CallToolParams{Name: st.name, Meta: forwardMeta(req.Params.Meta)}
	if len(req.Params.Arguments) > 0 && string(req.Params.Arguments) != "null" {
		p.Arguments = req.Params.Arguments
	}
	res, err := forward(g, ctx, req.Session, req, st.server, request[*mcp.CallToolResult]{
		method: "tools/call", name: req.Params.Name,
		state: req.Params.RequestState, responses: req.Params.InputResponses,
		send: func(ctx context.Context, c *mcpfsm.Conn, fc *frontCall) (*mcp.CallToolResult, error) {
			if req.Params.GetProgressToken() != nil {
				ctx = mcpfsm.WithProgress(ctx, func(p *mcp.ProgressNotificationParams) {
					fc.out.push(func() { fc.notifyProgress(p) })
				})
			}
			return c.CallTool(ctx, p)
		},
		inputRequired: func(reqs mcp.InputRequestMap, state string) *mcp.CallToolResult {
			return &mcp.CallToolResult{InputRequests: reqs, RequestState: state}
		},
		failed: func(text string) (*mcp.CallToolResult, error) { return toolError(text), nil },
	})
	return res, err
}

// A request is how forward sends one kind of front request.
type request[R any] struct {
	// method and name (or URI) name the request: a retry resumes only a parked
	// call of the same request (see what).
	method, name string
	// state and responses are a 2026-07-28 front request's multi-round-trip
	// fields: a retry of a call the gateway parked (see mrtr.go).
	state     string
	responses mcp.InputResponseMap
	// send sends it on the backend's connection; fc is the front call.
	send func(ctx context.Context, c *mcpfsm.Conn, fc *frontCall) (R, error)
	// inputRequired makes the input-required result of a parked call.
	inputRequired func(mcp.InputRequestMap, string) R
	// failed, if set, makes the answer to a request its backend could not take (a
	// JSON-RPC error otherwise).
	failed func(text string) (R, error)
}

// what names the request, as a parked call remembers it (on 2026-07-28 only: the
// others do not pay for it).
func (r request[R]) what() string { return r.method + " " + strconv.Quote(r.name) }

// forward runs a front request on a backend: at once if the backend has a session
// (or within ReadyWait), failing with the backend's state and last failure otherwise;
// a backend's own protocol error passed on as it is, the others as failed says. On a
// 2026-07-28 front, a backend's requests during the call go to the front as input
// requests (see roundTrip), and a backend that takes a log level only by
// logging/setLevel is first given the request's (see bridgeLevel).
func forward[R any](g *Gateway, ctx context.Context, ss *mcp.ServerSession, req mcp.Request, server string, r request[R]) (R, error) {
	var zero R
	fail := r.failed
	if fail == nil {
		fail = func(text string) (R, error) { return zero, requestError(text) }
	}
	var c *mcpfsm.Conn // the backend's connection the request was sent on
	answer := func(ctx context.Context, res R, err error) (R, error) {
		if err == nil {
			ownMeta(res)
			return withoutResultType(res), nil
		}
		if ctx.Err() != nil {
			return zero, ctx.Err()
		}
		if je := backendError(err); je != nil {
			return zero, g.passOn(req, je)
		}
		return fail(g.failedOn(server, c, err))
	}
	newer := false
	if v, ok := req.(interface{ ProtocolVersion() string }); ok {
		newer = transport.NewProtocol(v.ProtocolVersion())
	}
	if newer && r.state != "" && r.inputRequired != nil {
		return roundTrip(g, ctx, nil, streamOf(ctx, ss, req), r.what(), r.state, r.responses, nil, r.inputRequired)
	}
	c, err := g.ready(ctx, server)
	if err != nil {
		if ctx.Err() != nil {
			return zero, ctx.Err()
		}
		return fail(g.unavailable(server, err))
	}
	level := len(levelOrder) // the log level the request asks for, by rank (none before 2026-07-28)
	if newer {
		level = requestLevel(req)
		g.bridgeLevel(ctx, server, c, level)
	}
	var p *parking
	if newer && r.inputRequired != nil {
		p = newParking(r.what())
	}
	fc := g.calls.start(ctx, ss, req, server, p, newer, level)
	ctx = context.WithValue(context.WithValue(ctx, frontCallKey{}, fc), transport.FinishedKey{}, fc.mark)
	if p != nil {
		return roundTrip(g, ctx, fc, frontStream{}, p.what, "", nil, func(bctx context.Context) (R, error) {
			res, err := r.send(bctx, c, fc)
			fc.out.flush(bctx) // as below: the call's progress and log messages first
			return answer(bctx, res, err)
		}, r.inputRequired)
	}
	res, err := r.send(ctx, c, fc)
	fc.out.flush(ctx) // the call's progress and log messages go out before its result
	g.calls.end(fc, err != nil && ctx.Err() != nil)
	return answer(ctx, res, err)
}

// backendError returns the JSON-RPC error a backend answered with, if that is what
// err is: the connection is fine, the request was refused.
func backendError(err error) *jsonrpc.Error {
	var ce *mcpfsm.CallError
	var je *jsonrpc.Error
	if errors.As(err, &ce) && ce.Cause == states.CauseServer && errors.As(err, &je) {
		return je
	}
	return nil
}

// failedOn is the text of a request that failed on its backend's connection c
// (nil if not known): failed's, unless a reload removed the server, or replaced
// its connection, while the request ran, which is then said first (the request's
// own error, the session's close under it, said only that the session broke).
func (g *Gateway) failedOn(server string, c *mcpfsm.Conn, err error) string {
	msg := g.failed(server, err)
	if c == nil || g.closed.Load() || errors.Is(err, mcpfsm.ErrUnavailable) || errors.Is(err, mcpfsm.ErrNotReady) {
		return msg // a closed gateway's Manager has no server any more
	}
	what := ""
	switch now := g.m.Conn(server); {
	case now == nil:
		what = "removed"
	case now != c:
		what = "replaced"
	default:
		return msg
	}
	return fmt.Sprintf("mcpfsm gateway: server %q was %s by a reload while the request ran: %s", server, what,
		strings.TrimPrefix(msg, fmt.Sprintf("mcpfsm gateway: server %q: ", server)))
}

// failed is the text of a request that failed on its backend.
func (g *Gateway) failed(server string, err error) string {
	if errors.Is(err, mcpfsm.ErrUnavailable) || errors.Is(err, mcpfsm.ErrNotReady) {
		return g.unavailable(server, err)
	}
	// The connection's error names its server first, as this text does: said once
	// (it was said twice, "mcpfsm gateway: server "x": mcpfsm: server "x": ...").
	detail := strings.TrimPrefix(machine.ErrorText(err), fmt.Sprintf("mcpfsm: server %q: ", server))
	msg := fmt.Sprintf("mcpfsm gateway: server %q: %s", server, detail)
	if errors.Is(err, mcpfsm.ErrMayHaveRun) {
		msg += " (it was not sent again)" // the error says it may have run
	}
	return msg
}

func toolError(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

// requestError is the JSON-RPC error of a request other than a tool call that its
// backend could not take.
func requestError(text string) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: text}
}

func (g *Gateway) getPrompt(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	sp, ok := g.table.Load().prompts[req.Params.Name]
	if !ok {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: g.table.Load().unknown("prompt", req.Params.Name)}
	}
	return forward(g, ctx, req.Session, req, sp.server, request[*mcp.GetPromptResult]{
		method: "prompts/get", name: req.Params.Name,
		state: req.Params.RequestState, responses: req.Params.InputResponses,
		send: func(ctx context.Context, c *mcpfsm.Conn, _ *frontCall) (*mcp.GetPromptResult, error) {
			return c.GetPrompt(ctx, &mcp.GetPromptParams{Name: sp.name, Arguments: req.Params.Arguments, Meta: forwardMeta(req.Params.Meta)})
		},
		inputRequired: func(reqs mcp.InputRequestMap, state string) *mcp.GetPromptResult {
			return &mcp.GetPromptResult{InputRequests: reqs, RequestState: state}
		},
	})
}

// resourceNotFound is the go-sdk's mcp.ResourceNotFoundError for uri, with its
// data encoded as JSON: the go-sdk's quotes the URI as Go does (%q), which is no
// JSON for a URI holding a control character (\x01, \a): its answer could not be
// encoded, and the session that asked ended (the stdio front's, and with it
// mcpfsm serve; a streamable HTTP session, its requests unanswered from then). A
// URI longer than maxEchoedURI is not quoted back.
func resourceNotFound(uri string) error {
	e := &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "Resource not found"}
	if len(uri) <= maxEchoedURI {
		e.Data, _ = json.Marshal(struct {
			URI string `json:"uri"`
		}{uri})
	}
	return e
}

// maxEchoedURI bounds the URI a resource-not-found error quotes back.
const maxEchoedURI = 1024

func (g *Gateway) readResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	r, ok := g.table.Load().resourceRoute(req.Params.URI)
	if !ok {
		return nil, resourceNotFound(req.Params.URI)
	}
	return forward(g, ctx, req.Session, req, r.server, request[*mcp.ReadResourceResult]{
		method: "resources/read", name: req.Params.URI,
		state: req.Params.RequestState, responses: req.Params.InputResponses,
		send: func(ctx context.Context, c *mcpfsm.Conn, _ *frontCall) (*mcp.ReadResourceResult, error) {
			return c.ReadResource(ctx, &mcp.ReadResourceParams{URI: req.Params.URI, Meta: forwardMeta(req.Params.Meta)})
		},
		inputRequired: func(reqs mcp.InputRequestMap, state string) *mcp.ReadResourceResult {
			return &mcp.ReadResourceResult{InputRequests: reqs, RequestState: state}
		},
	})
}

// complete forwards completion/complete by its reference: a prompt by its shown name,
// a resource template by its URI template.
func (g *Gateway) complete(ctx context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	t := g.table.Load()
	p := *req.Params
	p.Meta = forwardMeta(p.Meta)
	ref := *p.Ref
	p.Ref = &ref
	var server string
	switch ref.Type {
	case "ref/prompt":
		sp, ok := t.prompts[ref.Name]
		if !ok {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: t.unknown("prompt", ref.Name)}
		}
		server, ref.Name = sp.server, sp.name
	case "ref/resource":
		for _, st := range t.templates {
			if st.name == ref.URI {
				server = st.server
				break
			}
		}
		if server == "" {
			if r, ok := t.resourceRoute(ref.URI); ok {
				server = r.server
			}
		}
		if server == "" {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("no server of this gateway shows the resource template %.256q", ref.URI)}
		}
	default:
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown reference type %.40q", ref.Type)}
	}
	return forward(g, ctx, req.Session, req, server, request[*mcp.CompleteResult]{
		send: func(ctx context.Context, c *mcpfsm.Conn, _ *frontCall) (*mcp.CompleteResult, error) {
			return c.Complete(ctx, &p)
		},
	})
}

// subscribe forwards resources/subscribe: the first front subscription to a URI
// subscribes the backend (whose connection keeps it across reconnects), later ones
// count. The SDK's server keeps which front session gets which update. A front
// session holds at most maxSessionSubscriptions, and the front sessions together
// at most maxSubscriptions resources: past them a subscribe gets an error. At startup
// it waits for the backends to list theirs, as a read does (see frontMiddleware):
// here, for a resources/subscribe and for the subscriptions a 2026-07-28
// subscriptions/listen carries alike.
func (g *Gateway) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	g.waitSettled(ctx)
	uri := req.Params.URI
	r, ok := g.table.Load().resourceRoute(uri)
	if !ok {
		return resourceNotFound(uri)
	}
	release, err := g.subTurns.Acquire(ctx, uri)
	if err != nil {
		return err
	}
	defer release()
	if now, ok := g.table.Load().resourceRoute(uri); ok {
		r = now // the table may have changed while the turn was awaited
	}
	g.sessMu.Lock()
	if g.subs[req.Session][uri] {
		g.sessMu.Unlock()
		return nil
	}
	first := g.subCount[uri] == 0
	// The subscribes under way count: subscribes sent together (a session's
	// requests in flight, the sessions') all passed bounds that counted only
	// those done.
	mine, all := len(g.subs[req.Session])+g.subPending[req.Session], len(g.subCount)+g.subPendingNew
	switch {
	case mine >= maxSessionSubscriptions:
		g.sessMu.Unlock()
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("mcpfsm gateway: this session has %d subscriptions, as many as it may: unsubscribe from one first", maxSessionSubscriptions)}
	case first && all >= maxSubscriptions:
		g.sessMu.Unlock()
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("mcpfsm gateway: the front sessions are subscribed to %d resources, as many as the gateway holds", maxSubscriptions)}
	}
	g.subPending[req.Session]++
	if first {
		g.subPendingNew++
	}
	g.sessMu.Unlock()
	done := func() { // sessMu is held
		if g.subPending[req.Session]--; g.subPending[req.Session] == 0 {
			delete(g.subPending, req.Session)
		}
		if first {
			g.subPendingNew--
		}
	}
	if first {
		if _, err := forward(g, ctx, req.Session, req, r.server, request[struct{}]{
			send: func(ctx context.Context, c *mcpfsm.Conn, _ *frontCall) (struct{}, error) {
				return struct{}{}, c.Subscribe(ctx, &mcp.SubscribeParams{URI: uri})
			},
		}); err != nil {
			g.sessMu.Lock()
			done()
			g.sessMu.Unlock()
			return err
		}
	}
	g.sessMu.Lock()
	defer g.sessMu.Unlock()
	done()
	if g.subs[req.Session] == nil {
		g.subs[req.Session] = map[string]bool{}
	}
	if !g.subs[req.Session][uri] {
		g.subs[req.Session][uri] = true
		g.subCount[uri]++
		g.subConn[uri] = r
	}
	return nil
}

// maxSessionSubscriptions is the most resources one front session is subscribed to,
// maxSubscriptions the most the front sessions are subscribed to together (each a
// subscription of a backend's, kept across its reconnects): nothing else bounded
// them, and a client subscribing to URIs a backend's template matches (a new one
// each time) grew the gateway without end: on protocol 2026-07-28 each is a
// subscriptions/listen stream of the backend's, with its goroutines (some 12 KB
// each in process; over streamable HTTP, a connection each, with its file
// descriptor). Variables for tests.
var (
	maxSessionSubscriptions = 1024
	maxSubscriptions        = 4096
)

// unsubscribe forwards resources/unsubscribe, and the end of a 2026-07-28
// subscriptions/listen stream: the go-sdk's server undoes a listen's subscriptions
// with the listen's context, which has ended by then. So it is carried out whatever
// becomes of its request, within a bound of its own; once the gateway closes (its
// front's listens end then too) only the front's count is kept: the backends close
// next, and one that does not answer would hold the front's close.
func (g *Gateway) unsubscribe(ctx context.Context, req *mcp.UnsubscribeRequest) error {
	if ctx.Value(forgettingKey{}) != nil {
		return nil // the sweeper's, for the front server alone (see forgetSubscription)
	}
	if !g.closed.Load() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(g.ctx, 10*time.Second)
		defer cancel()
	}
	return g.dropSub(ctx, ctx, req.Session, req.Params.URI)
}

// dropSub forgets a front subscription and, if it was the last to the URI,
// unsubscribes the backend. The count and the backend's subscription change in the
// URI's turn (subTurns), as in subscribe and restore: a subscribe racing the last
// unsubscribe would otherwise reach the backend first and be undone.
// The turn is waited for until turnCtx ends; the backend's unsubscribe is bounded by
// ctx.
func (g *Gateway) dropSub(turnCtx, ctx context.Context, ss *mcp.ServerSession, uri string) error {
	release, err := g.subTurns.Acquire(turnCtx, uri)
	if err != nil {
		return err
	}
	defer release()
	g.sessMu.Lock()
	last := g.dropSubLocked(ss, uri)
	g.sessMu.Unlock()
	if last != nil {
		g.unsubscribeBackend(ctx, *last, uri)
	}
	return nil
}

// dropSubLocked forgets a front subscription, and returns the backend route of the
// URI if it was the last. sessMu is held.
func (g *Gateway) dropSubLocked(ss *mcp.ServerSession, uri string) *route {
	if !g.subs[ss][uri] {
		return nil
	}
	delete(g.subs[ss], uri)
	if len(g.subs[ss]) == 0 {
		delete(g.subs, ss)
	}
	g.subCount[uri]--
	if g.subCount[uri] > 0 {
		return nil
	}
	r := g.subConn[uri]
	delete(g.subCount, uri)
	delete(g.subConn, uri)
	return &r
}

// rehome moves the backend subscriptions of URIs that t routes to another server
// than the one subscribed (a reload renamed, removed or reordered servers, or
// changed what they show): the new server is subscribed, then the old one, if still
// there, unsubscribed. A URI that t routes nowhere stays where it is (its new server
// may not have listed yet).
func (g *Gateway) rehome(t *table) {
	type move struct {
		uri      string
		from, to route
	}
	var moves []move
	g.sessMu.Lock()
	for uri, r := range g.subConn {
		if to, ok := t.resourceRoute(uri); ok && to.server != r.server {
			moves = append(moves, move{uri, r, to})
		}
	}
	g.sessMu.Unlock()
	for _, mv := range moves {
		g.spawn(func() {
			ctx, cancel := context.WithTimeout(g.ctx, 5*time.Minute)
			defer cancel()
			release, err := g.subTurns.Acquire(ctx, mv.uri)
			if err != nil {
				return
			}
			defer release()
			g.sessMu.Lock()
			still := g.subCount[mv.uri] > 0 && g.subConn[mv.uri] == mv.from
			g.sessMu.Unlock()
			if !still {
				return // unsubscribed, or moved, meanwhile
			}
			if err := g.m.Subscribe(ctx, mv.to.server, &mcp.SubscribeParams{URI: mv.uri}); err != nil {
				g.log.Debug("mcpfsm gateway: moving a subscription", "server", mv.to.server, "err", err)
				return
			}
			g.sessMu.Lock()
			g.subConn[mv.uri] = mv.to
			g.sessMu.Unlock()
			if g.m.Conn(mv.from.server) != nil {
				g.unsubscribeBackend(ctx, mv.from, mv.uri)
			}
		})
	}
}

func (g *Gateway) unsubscribeBackend(ctx context.Context, r route, uri string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := g.m.Unsubscribe(ctx, r.server, &mcp.UnsubscribeParams{URI: uri}); err != nil {
		g.log.Debug("mcpfsm gateway: unsubscribing a backend", "server", r.server, "err", err)
	}
}

// restore gives backends whose connection is new (a reload replaced or added it)
// the front's log level and subscriptions.
func (g *Gateway) restore(servers []string) {
	if len(servers) == 0 {
		return
	}
	g.newConns(servers)
	g.applyLevel(g.ctx, servers)
	g.sessMu.Lock()
	var uris []string
	var routes []route
	for uri, r := range g.subConn {
		for _, s := range servers {
			if r.server == s {
				uris, routes = append(uris, uri), append(routes, r)
			}
		}
	}
	g.sessMu.Unlock()
	for i, uri := range uris {
		r := routes[i]
		g.spawn(func() {
			ctx, cancel := context.WithTimeout(g.ctx, 5*time.Minute)
			defer cancel()
			release, err := g.subTurns.Acquire(ctx, uri)
			if err != nil {
				return
			}
			defer release()
			g.sessMu.Lock()
			still := g.subCount[uri] > 0 && g.subConn[uri] == r
			g.sessMu.Unlock()
			if !still {
				return // unsubscribed meanwhile
			}
			if err := g.m.Subscribe(ctx, r.server, &mcp.SubscribeParams{URI: uri}); err != nil {
				g.log.Debug("mcpfsm gateway: restoring a subscription", "server", r.server, "err", err)
			}
		})
	}
}

// askRoots lists a front session's roots, if it has them, and gives the backends the
// union of every front session's roots. A session is asked once at a time: a change
// it announces while it is asked makes one more ask when that one is over (a client
// flooding roots/list_changed held a goroutine and a request per notification).
func (g *Gateway) askRoots(ss *mcp.ServerSession) {
	p := ss.InitializeParams()
	if p == nil || p.Capabilities == nil || (p.Capabilities.RootsV2 == nil && !p.Capabilities.Roots.ListChanged) {
		return
	}
	g.sessMu.Lock()
	if _, asking := g.rootsAsked[ss]; asking {
		g.rootsAsked[ss] = true // again, once this ask is over
		g.sessMu.Unlock()
		return
	}
	g.rootsAsked[ss] = false
	g.sessMu.Unlock()
	if !g.spawn(func() {
		for {
			g.listRoots(ss)
			g.sessMu.Lock()
			if !g.rootsAsked[ss] {
				delete(g.rootsAsked, ss)
				g.sessMu.Unlock()
				return
			}
			g.rootsAsked[ss] = false
			g.sessMu.Unlock()
		}
	}) {
		g.sessMu.Lock()
		delete(g.rootsAsked, ss)
		g.sessMu.Unlock()
	}
}

// rootsRetry is how long listRoots tries again a roots/list the front session could
// not be sent. A variable for tests.
var rootsRetry = 5 * time.Second

// codeRejected is the code of the go-sdk's jsonrpc2.ErrRejected (internal, not
// exported): the error of a message its transport did not send.
const codeRejected = -32005

// listRoots asks a front session for its roots and gives the backends the union.
//
// Over streamable HTTP the ask, made when the session is initialized, goes on the
// session's standalone stream, which a client opens with a GET only once its
// notifications/initialized has been answered (the TypeScript SDK's does): until then
// the go-sdk, without an event store, rejects the write at once, and the ask was
// lost, leaving the backends without the session's roots until it announced a
// change. So a roots/list the transport rejected, unsent, is sent again, for up to
// rootsRetry.
func (g *Gateway) listRoots(ss *mcp.ServerSession) {
	ctx, cancel := context.WithTimeout(g.ctx, 10*time.Second)
	defer cancel()
	var res *mcp.ListRootsResult
	var err error
	for wait, until := 10*time.Millisecond, time.Now().Add(rootsRetry); ; wait = min(2*wait, 500*time.Millisecond) {
		res, err = ss.ListRoots(ctx, nil)
		var rejected *jsonrpc.Error
		if !errors.As(err, &rejected) || rejected.Code != codeRejected || ctx.Err() != nil || time.Now().Add(wait).After(until) {
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	if err != nil {
		g.log.Debug("mcpfsm gateway: listing a front session's roots", "err", err)
		return
	}
	g.sessMu.Lock()
	g.roots[ss] = res.Roots
	g.sessMu.Unlock()
	g.pushRoots()
}

// pushRoots gives the backends the union of the front sessions' roots.
func (g *Gateway) pushRoots() {
	g.sessMu.Lock()
	seen := map[string]bool{}
	var union []*mcp.Root
	for _, rs := range g.roots {
		for _, r := range rs {
			if r != nil && !seen[r.URI] {
				seen[r.URI] = true
				union = append(union, r)
			}
		}
	}
	g.sessMu.Unlock()
	if err := g.m.SetRoots(union...); err != nil {
		g.log.Debug("mcpfsm gateway: setting the backends' roots", "err", err)
	}
}

// sweeper forgets, now and then, what the gateway kept for front sessions that have
// ended (the SDK tells no one when a session ends): their log levels, roots and
// subscriptions, and so what the backends were given for them; the cancelled
// calls that count no longer (see calls.cut), a removed server's included; and the
// log levels 2026-07-28 requests asked of older backends too long ago (forgetLevels).
func (g *Gateway) sweeper() {
	defer g.wg.Done()
	tick := time.NewTicker(g.opts.SweepInterval)
	defer tick.Stop()
	for {
		select {
		case <-g.ctx.Done():
			return
		case <-tick.C:
			g.sweep()
		}
	}
}

// sweepLooked, if set, is called by a sweep once it has first looked at the front
// sessions (a hook for tests).
var sweepLooked func()

// sweep forgets what the gateway keeps for front sessions that have ended: their log
// levels, roots and subscriptions. A session ended if it is in none of two looks at the
// front server's sessions, one before the gateway's books are read and one after: a
// session that began between the first look and the books (it set a level, or
// subscribed, meanwhile) is in the second, and was once taken for ended, its
// subscriptions dropped.
func (g *Gateway) sweep() {
	g.calls.prune(time.Now())
	g.forgetLevels()
	looks := func() map[*mcp.ServerSession]bool {
		live := map[*mcp.ServerSession]bool{}
		for ss := range g.server.Sessions() {
			live[ss] = true
		}
		return live
	}
	live := looks()
	if sweepLooked != nil {
		sweepLooked()
	}
	ended := map[*mcp.ServerSession]bool{} // in the books, in neither look
	note := func(ss *mcp.ServerSession) {
		if !live[ss] {
			ended[ss] = true
		}
	}
	g.sessMu.Lock()
	for ss := range g.levels {
		note(ss)
	}
	for ss := range g.roots {
		note(ss)
	}
	for ss := range g.subs {
		note(ss)
	}
	g.sessMu.Unlock()
	if len(ended) == 0 {
		return
	}
	again := looks()
	maps.DeleteFunc(ended, func(ss *mcp.ServerSession, _ bool) bool { return again[ss] })
	g.sessMu.Lock()
	levelGone, rootsGone := false, false
	for ss := range ended {
		if _, ok := g.levels[ss]; ok {
			delete(g.levels, ss)
			levelGone = true
		}
		if _, ok := g.roots[ss]; ok {
			delete(g.roots, ss)
			rootsGone = true
		}
	}
	type sub struct {
		ss  *mcp.ServerSession
		uri string
	}
	var gone []sub
	for ss := range ended {
		for uri := range g.subs[ss] {
			gone = append(gone, sub{ss, uri})
		}
	}
	levelChanged := levelGone && g.recomputeLevelLocked()
	g.sessMu.Unlock()
	if levelChanged {
		g.applyLevel(g.ctx, g.m.Servers())
	}
	if rootsGone {
		g.pushRoots()
	}
	for _, sub := range gone {
		// A URI whose turn is held (a front subscribe waiting on its backend)
		// waits for the next sweep rather than hold up this one.
		turnCtx, cancel := context.WithTimeout(g.ctx, g.opts.SweepInterval)
		if g.dropSub(turnCtx, g.ctx, sub.ss, sub.uri) == nil {
			g.forgetSubscription(turnCtx, sub.ss, sub.uri)
		}
		cancel()
	}
}

// forgettingKey marks the context of the unsubscribe forgetSubscription has the front
// server handle.
type forgettingKey struct{}

// forgetSubscription has the front server forget the URI of a subscription of a
// session that has ended. The go-sdk's server forgets the session's subscriptions
// when it ends, but keeps an empty entry for each URI, for good (some 330 bytes
// each): clients subscribing to URIs a backend's template matches, a new one each
// time, and leaving without unsubscribing, grew the gateway without end. An
// unsubscribe of the ended session, handled by the front server itself as if its
// client had sent it, drops the entry once no session holds the URI (the gateway's
// own handler, which it passes through, has nothing left to do: told so by
// forgettingKey, it does not wait for the URI's turn).
func (g *Gateway) forgetSubscription(ctx context.Context, ss *mcp.ServerSession, uri string) {
	ctx = context.WithValue(ctx, forgettingKey{}, true)
	req := &mcp.UnsubscribeRequest{Session: ss, Params: &mcp.UnsubscribeParams{URI: uri}}
	if _, err := g.sdk(ctx, "resources/unsubscribe", req); err != nil {
		g.log.Debug("mcpfsm gateway: forgetting an ended session's subscription", "err", err)
	}
}
