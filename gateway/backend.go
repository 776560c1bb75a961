package gateway

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpfsm/mcpfsm"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// This file is what the backends send on their own: requests (sampling, elicitation),
// which go to the front client that made the call the backend is serving, and
// notifications (log messages, progress, updated resources, changed lists).
//
// Which front call a backend's request belongs to:
//
//   - On protocol 2026-07-28 a backend asks inside its answer to the call
//     (multi-round-trip requests): the connection's client runs our handler with the
//     call's own context, which carries the front call (frontCallKey). Exact.
//   - On earlier versions the backend sends a request of its own; the SDK runs our
//     handler with the connection's context, and the protocol says nothing of the call
//     it serves. The gateway then looks at the front calls in flight to that backend,
//     and at those the front cancelled there in the last cutLinger (the backend may
//     still be running them: it was told, and may not listen): if they all come from
//     one front session, the request goes to that session (on the stream of its
//     latest call in flight); if none is in flight, or several front sessions have
//     calls there, it is refused with an error that says so, rather than asked of a
//     client that did not make the call. A backend that many front sessions
//     call at once and that asks for sampling should be pinned to 2026-07-28 or given
//     one gateway per client.
//
// A cancelled call stops counting before cutLinger when the backend is known to be
// done with it (the backend's session tells the call's cutMark, in the call's
// context under transport.FinishedKey: see transport.Finished): over stdio (and SSE, in memory) when the backend's answer
// to it is read, once every request the backend sent before that answer has been
// handled (a go-sdk server answers a cancelled request as its handler returns);
// on any transport when the backend's session that ran it has ended (a reconnect,
// a reload) and its handlers have returned; over stdio at once when the request
// was never written.

// frontCallKey keys the front call in the context of its backend's call; beside
// it, under transport.FinishedKey, its cutMark, which the backend's session tells
// when the backend is done with the call (ServerFinished).
type frontCallKey struct{}

// A frontCall is a front request in flight to a backend.
type frontCall struct {
	ss     *mcp.ServerSession
	ctx    context.Context // the front request's: messages sent with it go on its stream
	req    mcp.Request     // the front request, for its client's capabilities (see clientCaps)
	newer  bool            // the front request is on protocol 2026-07-28 or later
	level  int             // the rank of the log level a newer request asks for (see requestLevel)
	server string
	seq    uint64
	out    *outbox // the call's progress and log messages, in order, off the backend's reader
	// parking, on a 2026-07-28 front, takes the backend's requests to the front as
	// input requests (see mrtr.go); nil where the request has no input-required
	// result (completion, subscribe). Set before the call is published (start).
	parking *parking

	toMu sync.Mutex
	to   frontStream // where the call's progress and log messages go (see rebind)

	between bool // parked between two rounds (see calls.between); calls.mu
	mark    *cutMark
}

// A cutMark is what outlives a front call that the front cancelled: it counts as
// a cut call (see calls.cut) until its backend is known to be done with it (the
// backend's session, which may watch it for long, tells it: ServerFinished). It
// keeps nothing of the front's request: a frontCall kept instead held the request's
// parameters for as long.
type cutMark struct {
	calls  *calls // where the call is published
	server string
	ss     *mcp.ServerSession
	// finished, under calls.mu, says the backend is done with the call:
	// cancelled, it no longer counts.
	finished bool
}

// A frontStream is where a front call's notifications go: a front request's
// stream, and its progress token.
type frontStream struct {
	ss    *mcp.ServerSession
	ctx   context.Context
	token any // nil: the request asked for no progress
}

// streamOf returns the stream of the front request req, made on ss with ctx.
func streamOf(ctx context.Context, ss *mcp.ServerSession, req mcp.Request) frontStream {
	to := frontStream{ss: ss, ctx: ctx}
	if p, ok := req.GetParams().(mcp.RequestParams); ok {
		to.token = p.GetProgressToken()
	}
	return to
}

// rebind sends the call's notifications from now on to the stream of a later
// round of it (a 2026-07-28 retry, see roundTrip): the first request's has
// ended, and what went there was lost.
func (fc *frontCall) rebind(to frontStream) {
	fc.toMu.Lock()
	fc.to = to
	fc.toMu.Unlock()
}

// stream returns where the call's notifications go now.
func (fc *frontCall) stream() frontStream {
	fc.toMu.Lock()
	defer fc.toMu.Unlock()
	return fc.to
}

// notifyProgress sends a backend's progress for the call under the progress token
// of the front request it goes to (none there: not sent).
func (fc *frontCall) notifyProgress(p *mcp.ProgressNotificationParams) {
	to := fc.stream()
	if to.token == nil {
		return
	}
	_ = to.ss.NotifyProgress(to.ctx, &mcp.ProgressNotificationParams{ProgressToken: to.token, Progress: p.Progress, Total: p.Total, Message: p.Message})
}

// log sends a backend's log message on the call's stream.
func (fc *frontCall) log(p *mcp.LoggingMessageParams) {
	to := fc.stream()
	_ = to.ss.Log(to.ctx, p)
}

// clientCaps returns what the front client of fc can do (nil for no front call): on
// 2026-07-28 as its request says, before it as its session's initialize said. It is
// asked for only when a backend sends a request of its own (sampling, elicitation,
// roots), which is rare: reading a 2026-07-28 request's capabilities decodes them
// from its _meta, which costs the go-sdk a 32 KB buffer, and a busy gateway's every
// call paid it.
func (fc *frontCall) clientCaps() *mcp.ClientCapabilities {
	if fc == nil {
		return nil
	}
	if r, ok := fc.req.(interface {
		ClientCapabilities() *mcp.ClientCapabilities
	}); ok {
		return r.ClientCapabilities()
	}
	if p := fc.ss.InitializeParams(); p != nil {
		return p.Capabilities
	}
	return nil
}

// calls are the front requests in flight, by backend.
type calls struct {
	mu  sync.Mutex
	seq uint64
	by  map[string]map[*frontCall]struct{}
	// cut are, by backend, the front sessions of calls the front cancelled
	// lately: the backend may still be running such a call (it was told, and
	// may not listen), and a request of its for that call must not be given to
	// another session.
	cut    map[string][]cutCall
	linger time.Duration // cutLinger, when the gateway was made
}

// A cutCall is a call the front cancelled before its backend answered.
type cutCall struct {
	m     *cutMark
	until time.Time
}

// cutLinger is how long a cancelled call counts, for attribution, as one its
// backend may still run; maxCut bounds how many are kept per backend.
var cutLinger = 30 * time.Second

const maxCut = 1024

// serverFinished, if set, is called (with calls.mu held) once a backend is done
// with a call a front gave up on (a hook for tests).
// (Atomic: a backend session of an earlier test may end, and call it, as the next
// test sets it.)
var serverFinished atomic.Pointer[func(server string)]

// callEnded, if set, is called (with calls.mu held) as a front call ends, cut or not
// (a hook for tests).
var callEnded atomic.Pointer[func(server string, cut bool)]

// start publishes a front call, with its parking (nil if it takes no input
// requests), whether its request is on 2026-07-28 or later (newer) and the rank of
// the log level it asks (requestLevel): the backend's requests read it from then on
// (see askFront).
func (cs *calls) start(ctx context.Context, ss *mcp.ServerSession, req mcp.Request, server string, p *parking, newer bool, level int) *frontCall {
	fc := &frontCall{ss: ss, ctx: ctx, req: req, server: server, parking: p, to: streamOf(ctx, ss, req),
		mark: &cutMark{calls: cs, server: server, ss: ss}, newer: newer, level: level}
	fc.out = &outbox{}
	cs.mu.Lock()
	cs.seq++
	fc.seq = cs.seq
	if cs.by[server] == nil {
		cs.by[server] = map[*frontCall]struct{}{}
	}
	cs.by[server][fc] = struct{}{}
	cs.mu.Unlock()
	return fc
}

// end forgets a front call; cut says the front cancelled it before its backend
// answered (see calls.cut).
func (cs *calls) end(fc *frontCall, cut bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if f := callEnded.Load(); f != nil {
		defer (*f)(fc.server, cut)
	}
	delete(cs.by[fc.server], fc)
	if len(cs.by[fc.server]) == 0 {
		delete(cs.by, fc.server)
	}
	if !cut || fc.mark.finished {
		return
	}
	if cs.cut == nil {
		cs.cut = map[string][]cutCall{}
	}
	l := cs.pruneLocked(fc.server, time.Now())
	if len(l) >= maxCut {
		l = l[1:]
	}
	cs.cut[fc.server] = append(l, cutCall{m: fc.mark, until: time.Now().Add(cs.linger)})
}

// ServerFinished implements transport.Finished: the backend is done with the call,
// which the front gave up on (its session answered it late, or ended), and a cut
// call no longer counts. Called by the backend's session on a goroutine that must
// not wait: it takes calls.mu only.
func (m *cutMark) ServerFinished() {
	cs := m.calls
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if f := serverFinished.Load(); f != nil {
		defer (*f)(m.server)
	}
	m.finished = true
	l := cs.cut[m.server]
	for i, c := range l {
		if c.m == m {
			l = append(l[:i:i], l[i+1:]...)
			break
		}
	}
	if len(l) == 0 {
		delete(cs.cut, m.server)
		return
	}
	cs.cut[m.server] = l
}

// pruneLocked drops a backend's cut calls that no longer count, and returns the
// others (oldest first); cs.mu is held.
func (cs *calls) pruneLocked(server string, now time.Time) []cutCall {
	l := cs.cut[server]
	i := 0
	for i < len(l) && now.After(l[i].until) {
		i++
	}
	if i == len(l) {
		delete(cs.cut, server)
		return nil
	}
	l = l[i:]
	cs.cut[server] = l
	return l
}

// prune drops, for every backend, the cut calls that no longer count. A backend's
// are otherwise pruned only as its calls end or its requests are attributed: those
// of a server a reload removed (renamed, say) were kept for good, with their front
// sessions.
func (cs *calls) prune(now time.Time) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for server := range cs.cut {
		cs.pruneLocked(server, now)
	}
}

// between marks fc as parked between two rounds (a 2026-07-28 call waiting for its
// client's retry), or no longer.
func (cs *calls) between(fc *frontCall, parked bool) {
	cs.mu.Lock()
	fc.between = parked
	cs.mu.Unlock()
}

// attribute returns the front call a backend's message without a call context belongs
// to: the latest call in flight to server, if every call in flight there, and every
// call there the front cancelled lately (the backend may still run it), comes from
// one front session. Otherwise nil, and why. A call parked between two rounds is
// not in flight here: its request has ended, and nothing can reach its client until
// it calls again (its backend's log messages go to every front session, and another
// session's call may be asked).
func (cs *calls) attribute(server string) (*frontCall, string) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var latest *frontCall
	sessions := map[*mcp.ServerSession]bool{}
	for fc := range cs.by[server] {
		if fc.between {
			continue
		}
		sessions[fc.ss] = true
		if latest == nil || fc.seq > latest.seq {
			latest = fc
		}
	}
	cut := cs.pruneLocked(server, time.Now())
	for _, c := range cut {
		sessions[c.m.ss] = true
	}
	switch {
	case latest == nil && len(cut) > 0:
		return nil, "no front request is in flight to this server (one was cancelled lately: the server may still be running it)"
	case latest == nil:
		return nil, "no front request is in flight to this server"
	case len(sessions) == 1:
		return latest, ""
	case len(cut) > 0:
		return nil, fmt.Sprintf("%d front sessions have requests in flight to this server or cancelled them lately (the server may still be running those), and protocol versions before 2026-07-28 do not say which one this request serves", len(sessions))
	}
	return nil, fmt.Sprintf("%d front sessions have requests in flight to this server, and protocol versions before 2026-07-28 do not say which one this request serves", len(sessions))
}

// newerInFlight returns the 2026-07-28 front calls in flight to server (not parked
// between two rounds), of each front session the one asking the most verbose log
// level (the latest of those).
func (cs *calls) newerInFlight(server string) []*frontCall {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var latest map[*mcp.ServerSession]*frontCall
	for fc := range cs.by[server] {
		if !fc.newer || fc.between {
			continue
		}
		if latest == nil {
			latest = map[*mcp.ServerSession]*frontCall{}
		}
		if l := latest[fc.ss]; l == nil || louder(fc, l) {
			latest[fc.ss] = fc
		}
	}
	out := make([]*frontCall, 0, len(latest))
	for _, fc := range latest {
		out = append(out, fc)
	}
	return out
}

// loudest returns the 2026-07-28 front call in flight to server from ss that asks
// the most verbose log level (the latest of those); nil if none.
func (cs *calls) loudest(server string, ss *mcp.ServerSession) *frontCall {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var out *frontCall
	for fc := range cs.by[server] {
		if fc.ss == ss && fc.newer && !fc.between && (out == nil || louder(fc, out)) {
			out = fc
		}
	}
	return out
}

// louder reports whether front call a asks a more verbose log level than b, or the
// same and is later.
func louder(a, b *frontCall) bool {
	ra, rb := a.level, b.level
	return ra < rb || ra == rb && a.seq > b.seq
}

// requestLevel returns the rank of the log level a 2026-07-28 front request asks for
// in its _meta (len(levelOrder): none).
func requestLevel(req mcp.Request) int {
	p := req.GetParams()
	if p == nil || reflect.ValueOf(p).IsNil() {
		return len(levelOrder)
	}
	lv, _ := p.GetMeta()[mcp.MetaKeyLogLevel].(string)
	return levelRank(mcp.LoggingLevel(lv))
}

// callFor returns the front call of a backend's request: from its context (2026-07-28)
// or by attribution.
func (g *Gateway) callFor(ctx context.Context, server string) (*frontCall, string) {
	if fc, ok := ctx.Value(frontCallKey{}).(*frontCall); ok && fc.server == server {
		return fc, ""
	}
	return g.calls.attribute(server)
}

// handlersFor returns the handlers of a backend's connection.
func (g *Gateway) handlersFor(server string) mcpfsm.Handlers {
	b := &backend{g: g, server: server}
	return mcpfsm.Handlers{
		CreateMessageWithTools: b.sample,
		Elicit:                 b.elicit,
		LoggingMessage:         b.logMessage,
		ElicitationComplete:    b.elicitationComplete,
		ResourceUpdated:        b.updated,
		ToolsChanged: func(tools []*mcp.Tool) {
			g.setList(server, listTools, func(l *listing) { l.tools = tools })
		},
		PromptsChanged: func(prompts []*mcp.Prompt) {
			g.setList(server, listPrompts, func(l *listing) { l.prompts = prompts })
		},
		ResourcesChanged: func(resources []*mcp.Resource, templates []*mcp.ResourceTemplate) {
			g.setList(server, listResources, func(l *listing) { l.resources, l.templates = resources, templates })
		},
	}
}

// backendMiddleware sees what the backends send before the SDK's client does: it
// forwards elicitation/create itself (the go-sdk's client refuses some schemas that
// the spec allows, such as titled multi-select enums, before any handler sees them:
// the front client and the backend check the schema and the answer), and answers
// roots/list with the roots of the front client whose call the request serves, when
// that call can be found: refused when that client does not serve roots, failed when
// it fails to give them (never the union, which holds the other front sessions'
// roots); otherwise with the union every backend is given.
func (g *Gateway) backendMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		server, ok := mcpfsm.ServerName(ctx)
		if !ok {
			return next(ctx, method, req)
		}
		switch method {
		case "elicitation/create":
			if p, ok := req.GetParams().(*mcp.ElicitParams); ok {
				// This runs on the SDK's goroutine for the request, outside the
				// connection's handlers (whose panics are errors): params null
				// must not reach elicit.
				res, err := (&backend{g: g, server: server}).elicit(ctx, p)
				if err != nil {
					return nil, err
				}
				return res, nil
			}
		case "roots/list":
			fc, _ := g.callFor(ctx, server)
			if fc == nil {
				break // not a call's (or not one known to be): the union
			}
			// The front client's roots, or its refusal or failure: never the
			// union, which holds the other front sessions' roots (a backend scoping
			// its access by roots would give this client theirs).
			b := &backend{g: g, server: server}
			if caps := fc.clientCaps(); caps == nil || (caps.RootsV2 == nil && !caps.Roots.ListChanged) {
				return nil, b.refuse(mcp.CodeMissingRequiredClientCapabilities, method, "the front client does not support roots")
			}
			var res *mcp.ListRootsResult
			var err error
			if fc.newer {
				res, err = askFront[*mcp.ListRootsResult](ctx, b, fc, method, &mcp.ListRootsParams{})
			} else {
				fctx, cancel := frontContext(fc, ctx)
				defer cancel()
				res, err = fc.ss.ListRoots(fctx, nil)
				if err != nil && errors.Is(context.Cause(fctx), errFrontNoAnswer) {
					err = fmt.Errorf("no answer within %v", frontAskTimeout)
				}
			}
			if err != nil {
				return nil, b.refuse(jsonrpc.CodeInternalError, method, "the front client's roots could not be had: "+err.Error())
			}
			return res, nil
		}
		return next(ctx, method, req)
	}
}

// backend is one backend's handlers.
type backend struct {
	g      *Gateway
	server string
}

// refuse is the error of a backend's request the gateway cannot forward. (Not
// method-not-found, whose message the SDK replaces with the method's name.)
func (b *backend) refuse(code int64, method, why string) error {
	return &jsonrpc.Error{Code: code, Message: fmt.Sprintf("mcpfsm gateway: %s from server %q cannot be forwarded: %s", method, b.server, why)}
}

// frontContext returns a context for asking the front: the front request's (so that
// the request goes on its stream), ended also when the backend's request ends, and
// after frontAskTimeout.
func frontContext(fc *frontCall, ctx context.Context) (context.Context, context.CancelFunc) {
	fctx, cancel := context.WithTimeoutCause(fc.ctx, frontAskTimeout, errFrontNoAnswer)
	stop := context.AfterFunc(ctx, cancel)
	return fctx, func() { stop(); cancel() }
}

// frontAskTimeout bounds how long a backend's request asked of a front client before
// 2026-07-28 (sampling, elicitation, roots) waits for its answer, as a 2026-07-28
// call parked for its client's retry waits (parkTimeout): a front client that
// declares sampling and never answers held the backend's call, and the front's own
// request, for ever. The front client is told the request is cancelled.
var frontAskTimeout = 5 * time.Minute

// errFrontNoAnswer is the cause of a frontContext that reached frontAskTimeout.
var errFrontNoAnswer = errors.New("the front client gave no answer in time")

// noAnswer is err, or the refusal saying the front client gave no answer in time
// if that is why fctx ended.
func (b *backend) noAnswer(fctx context.Context, method string, err error) error {
	if err != nil && errors.Is(context.Cause(fctx), errFrontNoAnswer) {
		return b.refuse(jsonrpc.CodeInternalError, method, fmt.Sprintf("the front client gave no answer within %v", frontAskTimeout))
	}
	return err
}

// stripMeta drops the protocol's own _meta keys from what a backend sends on.
func stripMeta(m mcp.Meta) mcp.Meta {
	var out mcp.Meta
	for k, v := range m {
		if strings.HasPrefix(k, "io.modelcontextprotocol/") {
			continue
		}
		if out == nil {
			out = mcp.Meta{}
		}
		out[k] = v
	}
	return out
}

func (b *backend) sample(ctx context.Context, p *mcp.CreateMessageWithToolsParams) (*mcp.CreateMessageWithToolsResult, error) {
	const method = "sampling/createMessage"
	if p == nil {
		return nil, b.refuse(jsonrpc.CodeInvalidParams, method, "it has no params")
	}
	fc, why := b.g.callFor(ctx, b.server)
	caps := fc.clientCaps()
	switch {
	case fc == nil:
		return nil, b.refuse(jsonrpc.CodeInternalError, method, why)
	case caps == nil || caps.Sampling == nil:
		return nil, b.refuse(mcp.CodeMissingRequiredClientCapabilities, method, "the front client does not support sampling")
	case len(p.Tools) > 0 && caps.Sampling.Tools == nil:
		return nil, b.refuse(mcp.CodeMissingRequiredClientCapabilities, method, "the front client does not support sampling with tools")
	}
	cp := *p
	cp.Meta = stripMeta(p.Meta)
	if fc.newer {
		return askFront[*mcp.CreateMessageWithToolsResult](ctx, b, fc, method, &cp)
	}
	fctx, cancel := frontContext(fc, ctx)
	defer cancel()
	res, err := fc.ss.CreateMessageWithTools(fctx, &cp)
	return res, b.noAnswer(fctx, method, err)
}

func (b *backend) elicit(ctx context.Context, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
	const method = "elicitation/create"
	if p == nil {
		return nil, b.refuse(jsonrpc.CodeInvalidParams, method, "it has no params")
	}
	fc, why := b.g.callFor(ctx, b.server)
	caps := fc.clientCaps()
	switch {
	case fc == nil:
		return nil, b.refuse(jsonrpc.CodeInternalError, method, why)
	case caps == nil || caps.Elicitation == nil:
		return nil, b.refuse(mcp.CodeMissingRequiredClientCapabilities, method, "the front client does not support elicitation")
	case (p.Mode == "url" || p.URL != "") && caps.Elicitation.URL == nil:
		return nil, b.refuse(mcp.CodeMissingRequiredClientCapabilities, method, "the front client does not support URL-mode elicitation")
	}
	cp := *p
	cp.Meta = stripMeta(p.Meta)
	if fc.newer {
		return askFront[*mcp.ElicitResult](ctx, b, fc, method, &cp)
	}
	if p.ElicitationID != "" {
		// A URL-mode elicitation: its end comes later, as a notification the
		// front session asked must get.
		b.g.elicitations.put(b.server, p.ElicitationID, fc.ss)
	}
	fctx, cancel := frontContext(fc, ctx)
	defer cancel()
	if cp.RequestedSchema != nil {
		// The go-sdk's ServerSession.Elicit checks an accepted answer's schema
		// with its own rules, which refuse some the spec allows (a titled
		// multi-select: items with a type and anyOf), and throws the answer
		// away: the schema goes on the wire by elicitSchemaMiddleware instead,
		// and the front client and the backend check the schema and the answer.
		fctx = context.WithValue(fctx, elicitSchemaKey{}, cp.RequestedSchema)
		cp.RequestedSchema = nil
		if cp.Mode == "" {
			cp.Mode = "form"
		}
	}
	res, err := fc.ss.Elicit(fctx, &cp)
	return res, b.noAnswer(fctx, method, err)
}

// elicitSchemaKey keys the requested schema of an elicitation the gateway forwards to
// a front session (see elicit).
type elicitSchemaKey struct{}

// elicitSchemaMiddleware is the front server's sending middleware: it puts back the
// requested schema of an elicitation elicit forwards.
func elicitSchemaMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method == "elicitation/create" {
			if schema := ctx.Value(elicitSchemaKey{}); schema != nil {
				// ServerSession.Elicit sends a ServerRequest[Params]; anything else
				// is not sent without its schema.
				r, ok := req.(*mcp.ServerRequest[mcp.Params])
				var ep *mcp.ElicitParams
				if ok {
					ep, ok = r.Params.(*mcp.ElicitParams)
				}
				if !ok || ep == nil {
					return nil, fmt.Errorf("mcpfsm gateway: an elicitation to forward is a %T", req)
				}
				p := *ep
				p.RequestedSchema = schema
				req = &mcp.ServerRequest[mcp.Params]{Session: r.Session, Params: &p, Extra: r.Extra}
			}
		}
		return next(ctx, method, req)
	}
}

// elicitationComplete forwards notifications/elicitation/complete to the front
// session that was asked the URL-mode elicitation it ends, or, for one the gateway
// did not forward, to the session of the call in flight (as a log message is); to
// no other.
func (b *backend) elicitationComplete(ctx context.Context, p *mcp.ElicitationCompleteParams) {
	cp := *p
	cp.Meta = stripMeta(p.Meta)
	if ss := b.g.elicitations.take(b.server, p.ElicitationID); ss != nil {
		b.g.broadcast.push(func() {
			ctx, cancel := context.WithTimeout(b.g.ctx, 10*time.Second)
			defer cancel()
			_ = ss.NotifyElicitationComplete(ctx, &cp)
		})
		return
	}
	if fc, _ := b.g.calls.attribute(b.server); fc != nil && !fc.newer {
		fc.out.push(func() { _ = fc.ss.NotifyElicitationComplete(fc.ctx, &cp) })
	}
}

// elicitations are the URL-mode elicitations forwarded to front sessions, by server
// and elicitation ID, for the notification that ends each: at most maxElicitations,
// each kept for elicitationTTL.
type elicitations struct {
	mu sync.Mutex
	by expiring[[2]string, *mcp.ServerSession]
}

const (
	maxElicitations = 4096
	elicitationTTL  = time.Hour
)

func (e *elicitations) put(server, id string, ss *mcp.ServerSession) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.by.put([2]string{server, id}, ss, time.Now())
}

func (e *elicitations) take(server, id string) *mcp.ServerSession {
	e.mu.Lock()
	defer e.mu.Unlock()
	ss, _ := e.by.take([2]string{server, id}, time.Now())
	return ss
}

// askFront asks a 2026-07-28 front client, through the parked call's next
// input-required result.
func askFront[R mcp.InputResponse](ctx context.Context, b *backend, fc *frontCall, method string, p mcp.InputRequest) (R, error) {
	var zero R
	if fc.parking == nil {
		return zero, b.refuse(mcp.CodeMissingRequiredClientCapabilities, method, "the front client is on protocol 2026-07-28 and its request has no input-required result")
	}
	res, err := fc.parking.ask(ctx, p)
	if err != nil {
		return zero, err
	}
	r, ok := res.(R)
	if !ok {
		return zero, b.refuse(jsonrpc.CodeInternalError, method, fmt.Sprintf("the front client answered with %T", res))
	}
	return r, nil
}

// logMessage forwards a backend's log message: to the front session of the call in
// flight, on that call's stream, when there is one; otherwise to every front session
// and every 2026-07-28 front request in flight to the backend (each filters by its
// own level). The logger names the server.
func (b *backend) logMessage(ctx context.Context, p *mcp.LoggingMessageParams) {
	cp := *p
	cp.Meta = stripMeta(p.Meta)
	if cp.Logger == "" {
		cp.Logger = b.server
	} else {
		cp.Logger = b.server + "/" + cp.Logger
	}
	if fc, _ := b.g.calls.attribute(b.server); fc != nil {
		if fc.newer {
			// Its session's requests each ask a level of their own: the one
			// asking the most verbose takes it (the latest one dropped what
			// another asked for).
			if l := b.g.calls.loudest(b.server, fc.ss); l != nil {
				fc = l
			}
		}
		fc.out.push(func() { fc.log(&cp) })
		return
	}
	// A 2026-07-28 front request has no session level (over HTTP the go-sdk's
	// server makes a session for each request): the front sessions' broadcast
	// below lets nothing through to it, and a client lost its own call's
	// messages whenever another request was in flight to the backend. Each
	// such request in flight gets it, at its own level.
	for _, fc := range b.g.calls.newerInFlight(b.server) {
		fc.out.push(func() { fc.log(&cp) })
	}
	b.g.broadcast.push(func() {
		ctx, cancel := context.WithTimeout(b.g.ctx, 10*time.Second)
		defer cancel()
		for ss := range b.g.server.Sessions() {
			_ = ss.Log(ctx, &cp)
		}
	})
}

// updated forwards notifications/resources/updated to the front sessions subscribed
// to the resource (the SDK's server keeps who they are), if the gateway subscribed to
// it on this backend: another's word on a URI is not passed on.
func (b *backend) updated(ctx context.Context, p *mcp.ResourceUpdatedNotificationParams) {
	b.g.sessMu.Lock()
	r, ok := b.g.subConn[p.URI]
	b.g.sessMu.Unlock()
	if !ok || r.server != b.server {
		return
	}
	cp := *p
	cp.Meta = stripMeta(p.Meta)
	b.g.broadcast.push(func() {
		ctx, cancel := context.WithTimeout(b.g.ctx, 10*time.Second)
		defer cancel()
		_ = b.g.server.ResourceUpdated(ctx, &cp)
	})
}

// An outbox sends messages in order on a goroutine of its own, which exists only
// while there is something to send: a backend's reading goroutine hands them over and
// never waits for a front client. It holds at most maxOutbox messages; more are
// dropped (progress and log messages may be).
type outbox struct {
	g       *Gateway // nil for a call's: its goroutine ends before the call returns
	mu      sync.Mutex
	q       []func()
	running bool
	idle    chan struct{} // closed when the queue empties, for flush
}

const maxOutbox = 256

func (o *outbox) push(f func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.q) >= maxOutbox {
		return
	}
	o.q = append(o.q, f)
	if o.running {
		return
	}
	o.running = true
	o.idle = make(chan struct{})
	if o.g != nil {
		if !o.g.spawn(o.run) {
			o.q, o.running = nil, false
			close(o.idle)
		}
		return
	}
	go o.run()
}

func (o *outbox) run() {
	for {
		o.mu.Lock()
		if len(o.q) == 0 {
			o.running = false
			close(o.idle)
			o.mu.Unlock()
			return
		}
		f := o.q[0]
		o.q = o.q[1:]
		o.mu.Unlock()
		f()
	}
}

// flush waits until everything pushed so far is sent, or ctx ends, or 5s pass.
func (o *outbox) flush(ctx context.Context) {
	o.mu.Lock()
	running, idle := o.running, o.idle
	o.mu.Unlock()
	if !running {
		return
	}
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-idle:
	case <-ctx.Done():
	case <-t.C:
	}
}
