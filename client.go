package mcpfsm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime"
	"runtime/debug"
	"slices"

	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Handlers answer what a server sends on its own: requests (sampling, elicitation) and
// notifications. Every field is optional. The client advertises sampling and
// elicitation only when their handler is set, and a server that asks for something
// not advertised gets method-not-found. On protocol 2026-07-28 a server asks inside a
// call's answer (input requests, SEP-2322), which the same handlers answer under the
// call's context, which also ends with the call's session (see inputs.go): roots not
// given are answered with an empty list, and a request that gets no answer (no
// handler, a handler's error or panic, the bound on requests at once) fails that call,
// with cause server whatever the handler's error says, instead of being sent back to
// the server; so does an answer that asks more than 256 things at once, before any is
// answered.
//
// Handlers run on the SDK's goroutines. A request handler (CreateMessage,
// CreateMessageWithTools, Elicit) is bounded by the request's context, which ends when
// the server cancels the request or the session ends: if the handler has not returned
// by then, its answer is dropped. A handler that panics, or returns neither an answer
// nor an error, fails that request with an error the server sees; the connection
// lives on. Notification handlers must return
// promptly: a request returns once the notifications its server sent before the
// answer have been handled (waiting at most a second for them). The list handlers (ToolsChanged, PromptsChanged, ResourcesChanged) run on
// the connection's owner: they must not block and must not call Close. ResourceUpdated
// after a reconnect runs on a goroutine of its own, one call per subscription in turn.
type Handlers struct {
	// CreateMessage answers sampling/createMessage. At most one of it and
	// CreateMessageWithTools may be set.
	CreateMessage func(ctx context.Context, p *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error)
	// CreateMessageWithTools answers sampling/createMessage with tool use; the
	// client then advertises sampling.tools.
	CreateMessageWithTools func(ctx context.Context, p *mcp.CreateMessageWithToolsParams) (*mcp.CreateMessageWithToolsResult, error)
	// Elicit answers elicitation/create.
	Elicit func(ctx context.Context, p *mcp.ElicitParams) (*mcp.ElicitResult, error)
	// ElicitationComplete sees notifications/elicitation/complete, which ends a
	// URL-mode elicitation: with it and Elicit set, the client advertises URL-mode
	// elicitation as well as forms.
	ElicitationComplete func(ctx context.Context, p *mcp.ElicitationCompleteParams)
	// LoggingMessage sees the server's log messages (notifications/message). The
	// server filters them by the level set with SetLoggingLevel (on 2026-07-28, by
	// the level each request carries); the connection hands on what it sends.
	LoggingMessage func(ctx context.Context, p *mcp.LoggingMessageParams)
	// Progress sees every progress notification (see also WithProgress, for one
	// call's).
	Progress func(ctx context.Context, p *mcp.ProgressNotificationParams)
	// ResourceUpdated sees notifications/resources/updated, as the server sends
	// them (for subscribed resources, or, as the spec allows, resources under
	// them), and once per subscription after a reconnect (an update may have been
	// missed while no session was up: those calls come on a goroutine of their own,
	// their ctx ends when that session closes, and Close waits for them within its
	// time; they must not call Close).
	ResourceUpdated func(ctx context.Context, p *mcp.ResourceUpdatedNotificationParams)
	// ToolsChanged is called with the server's tools when a session comes up (if they
	// differ from those last delivered) and after the server says they changed
	// (bursts of notifications coalesce into one re-list at a time).
	ToolsChanged func(tools []*mcp.Tool)
	// PromptsChanged is the same for prompts; when set, prompts are listed as each
	// session comes up.
	PromptsChanged func(prompts []*mcp.Prompt)
	// ResourcesChanged is the same for resources and resource templates.
	//
	// A list the server does not have is empty: one whose capability it did not
	// declare is not asked for (tools excepted: they are always listed), and one it
	// answers with method-not-found (-32601) is taken for none, not for a failed
	// connect (a server that declares resources often leaves out templates).
	ResourcesChanged func(resources []*mcp.Resource, templates []*mcp.ResourceTemplate)
}

func (h *Handlers) validate() error {
	if h.CreateMessage != nil && h.CreateMessageWithTools != nil {
		return errors.New("set CreateMessage or CreateMessageWithTools, not both")
	}
	return nil
}

// A clientKind is what an SDK client advertises and listens for: the handlers set,
// and whether roots are given. Connections with the same kind can share a client,
// whose handlers find each message's connection through its session's context.
type clientKind uint16

const (
	kindRoots clientKind = 1 << iota
	kindSampling
	kindSamplingTools
	kindElicit
	kindElicitComplete
	kindLogging
	kindUpdated
	kindPrompts
	kindResources
)

func kindOf(h *Handlers, roots bool) clientKind {
	var k clientKind
	set := func(on bool, bit clientKind) {
		if on {
			k |= bit
		}
	}
	set(roots, kindRoots)
	set(h.CreateMessage != nil, kindSampling)
	set(h.CreateMessageWithTools != nil, kindSamplingTools)
	set(h.Elicit != nil, kindElicit)
	set(h.ElicitationComplete != nil, kindElicitComplete)
	set(h.LoggingMessage != nil, kindLogging)
	set(h.ResourceUpdated != nil, kindUpdated)
	set(h.PromptsChanged != nil, kindPrompts)
	set(h.ResourcesChanged != nil, kindResources)
	return k
}

// newSDKClient returns an SDK client of the given kind. Its handlers are dispatchers:
// each finds the session the message came on in its context (see sessionKey), and that
// session's connection's handler.
func newSDKClient(impl *mcp.Implementation, k clientKind) *mcp.Client {
	o := &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{},
		ToolListChangedHandler: func(ctx context.Context, _ *mcp.ToolListChangedRequest) {
			onList(ctx, func(s *session) relisted { return &s.tools })
		},
		ProgressNotificationHandler: onProgress,
	}
	if k&kindRoots != 0 {
		o.Capabilities.RootsV2 = &mcp.RootCapabilities{ListChanged: true}
	}
	if k&kindSampling != 0 {
		o.CreateMessageHandler = func(ctx context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return answer(ctx, func(h *Handlers) func(context.Context, *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
				return h.CreateMessage
			}, req.Params)
		}
	}
	if k&kindSamplingTools != 0 {
		o.CreateMessageWithToolsHandler = func(ctx context.Context, req *mcp.CreateMessageWithToolsRequest) (*mcp.CreateMessageWithToolsResult, error) {
			return answer(ctx, func(h *Handlers) func(context.Context, *mcp.CreateMessageWithToolsParams) (*mcp.CreateMessageWithToolsResult, error) {
				return h.CreateMessageWithTools
			}, req.Params)
		}
	}
	if k&kindElicit != 0 {
		o.ElicitationHandler = func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return answer(ctx, func(h *Handlers) func(context.Context, *mcp.ElicitParams) (*mcp.ElicitResult, error) { return h.Elicit }, req.Params)
		}
	}
	if k&kindElicit != 0 && k&kindElicitComplete != 0 {
		o.Capabilities.Elicitation = &mcp.ElicitationCapabilities{Form: &mcp.FormElicitationCapabilities{}, URL: &mcp.URLElicitationCapabilities{}}
	}
	if k&kindElicitComplete != 0 {
		o.ElicitationCompleteHandler = func(ctx context.Context, req *mcp.ElicitationCompleteNotificationRequest) {
			notify(ctx, func(h *Handlers) func(context.Context, *mcp.ElicitationCompleteParams) { return h.ElicitationComplete }, req.Params)
		}
	}
	if k&kindLogging != 0 {
		o.LoggingMessageHandler = func(ctx context.Context, req *mcp.LoggingMessageRequest) {
			notify(ctx, func(h *Handlers) func(context.Context, *mcp.LoggingMessageParams) { return h.LoggingMessage }, req.Params)
		}
	}
	if k&kindUpdated != 0 {
		o.ResourceUpdatedHandler = func(ctx context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			notify(ctx, func(h *Handlers) func(context.Context, *mcp.ResourceUpdatedNotificationParams) {
				return h.ResourceUpdated
			}, req.Params)
		}
	}
	if k&kindPrompts != 0 {
		o.PromptListChangedHandler = func(ctx context.Context, _ *mcp.PromptListChangedRequest) {
			onList(ctx, func(s *session) relisted { return &s.prompts })
		}
	}
	if k&kindResources != 0 {
		o.ResourceListChangedHandler = func(ctx context.Context, _ *mcp.ResourceListChangedRequest) {
			onList(ctx, func(s *session) relisted { return &s.resources })
		}
	}
	// A 2026-07-28 server's input requests are fulfilled by inputRounds, not by
	// the go-sdk's client: see inputs.go.
	o.MultiRoundTrip = &mcp.MultiRoundTripOptions{Disabled: true}
	c := transport.NewClient(impl, o)
	c.AddReceivingMiddleware(refuseUnadvertised(k))
	c.AddSendingMiddleware(withLogLevel, inputRounds(c))
	return c
}

// levelKey keys the log level a request carries in its context (see withLogLevel).
type levelKey struct{}

// withLogLevel is a sending middleware that puts the connection's log level in every
// request's _meta: on protocol 2026-07-28 a server filters its log messages by the
// level each request carries, not by logging/setLevel. Servers of older versions
// ignore the key. A request whose _meta the caller gave a more verbose level keeps
// it.
func withLogLevel(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if lv, ok := ctx.Value(levelKey{}).(mcp.LoggingLevel); ok {
			if p := req.GetParams(); p != nil && !reflect.ValueOf(p).IsNil() {
				m := p.GetMeta()
				if m == nil {
					m = map[string]any{}
				}
				if own, ok := m[mcp.MetaKeyLogLevel].(string); !ok || levelRank(mcp.LoggingLevel(own)) > levelRank(lv) {
					m[mcp.MetaKeyLogLevel] = lv
				}
				p.SetMeta(m)
			}
		}
		return next(ctx, method, req)
	}
}

// logLevels are the protocol's log levels, the most verbose first.
var logLevels = []mcp.LoggingLevel{"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}

// levelRank orders log levels from the most verbose (debug, 0); an unknown level
// ranks last (len(logLevels)).
func levelRank(l mcp.LoggingLevel) int {
	if i := slices.Index(logLevels, l); i >= 0 {
		return i
	}
	return len(logLevels)
}

// relisted is a session's relister of one kind of list, whatever the kind.
type relisted interface{ changed(*Conn, *session) }

// onList starts a coalesced re-list of the kind of list the server says changed.
func onList(ctx context.Context, which func(*session) relisted) {
	if s := sessionFrom(ctx); s != nil && s.conn != nil {
		which(s).changed(s.conn, s)
	}
}

// onProgress hands a progress notification to the call that asked for it
// (WithProgress) and to the connection's Progress handler.
func onProgress(ctx context.Context, req *mcp.ProgressNotificationClientRequest) {
	s := sessionFrom(ctx)
	if s == nil || s.conn == nil || req.Params == nil {
		return
	}
	c := s.conn
	if f, ok := c.progress.Load(req.Params.ProgressToken); ok {
		safely(c, func() { f.(func(*mcp.ProgressNotificationParams))(req.Params) })
	}
	if h := c.hs.Progress; h != nil {
		safely(c, func() { h(ctx, req.Params) })
	}
}

// maxServerRequests bounds how many of the server's requests (sampling, elicitation)
// a connection's handlers run at once. The SDK runs each request the server sends on
// a goroutine of its own: without a bound, a server that floods the client with
// requests grows its goroutines and memory without end. A request beyond the bound is
// refused at once, with an error the server sees.
const maxServerRequests = 256

// answer runs the connection's handler for a request from the server: it is bounded by
// the request's context, and a panic in it is an error the server sees.
func answer[P, R any](ctx context.Context, which func(*Handlers) func(context.Context, P) (R, error), p P) (R, error) {
	var zero R
	s := sessionFrom(ctx)
	if s == nil || s.conn == nil {
		return zero, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "no connection for this session"}
	}
	h := which(s.conn.hs)
	if h == nil {
		return zero, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "the client has no handler for this request"}
	}
	if n := s.conn.serverRequests.Add(1); n > maxServerRequests {
		s.conn.serverRequests.Add(-1)
		return zero, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("too many requests from the server in flight (at most %d)", maxServerRequests)}
	}
	type result struct {
		r   R
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer s.conn.serverRequests.Add(-1) // once the handler has returned, not when its answer is given up
		defer func() {
			if v := recover(); v != nil {
				done <- result{err: callerPanicked(s.conn.opts.Logger, s.conn.name, "handler", v)}
			}
		}()
		r, err := h(ctx, p)
		if err == nil && isNil(r) {
			// The go-sdk reads the answer of a request of an earlier protocol
			// version, and panics on nil; on 2026-07-28 it would go to the
			// server as null.
			err = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the client's handler returned no answer"}
		}
		done <- result{r, err}
	}()
	select {
	case res := <-done:
		return res.r, res.err
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// notify hands a notification to the connection's handler, if any; a panic in it is
// contained.
func notify[P any](ctx context.Context, which func(*Handlers) func(context.Context, P), p P) {
	s := sessionFrom(ctx)
	if s == nil || s.conn == nil {
		return
	}
	if h := which(s.conn.hs); h != nil {
		safely(s.conn, func() { h(ctx, p) })
	}
}

// safely runs f, a handler of the caller's for a notification of c's server,
// containing a panic (logged, see callerPanicked): a user's handler must not take
// down the SDK's reading goroutine, and with it the session.
func safely(c *Conn, f func()) {
	defer func() {
		if v := recover(); v != nil {
			callerPanicked(c.opts.Logger, c.name, "handler", v)
		}
	}()
	f()
}

// callerPanicked logs a panic (v) of the caller's code (what names it: "handler")
// on what server sent, with its stack, and returns the error the server is told:
// that the client's code failed, without the panic's value, which may quote
// anything (a token, a user's data) and would go to the server. A panic of the
// runtime's own (a nil map, an index out of range), whose text is the runtime's,
// is logged with it; any other value by its type only.
func callerPanicked(log *slog.Logger, server, what string, v any) *jsonrpc.Error {
	val := fmt.Sprintf("a %T", v)
	if re, ok := v.(runtime.Error); ok {
		val = re.Error()
	}
	log.Error("mcpfsm: the caller's "+what+" panicked on what the server sent: the server is told it failed", "server", server, "panic", val, "stack", string(debug.Stack()))
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the client's " + what + " failed (it panicked)"}
}

// refuseUnadvertised answers with method-not-found the requests a server may make
// only of a client that advertised them, when this one did not: roots/list without
// roots (the SDK would answer with an empty list), elicitation without a handler (the
// SDK would say invalid params), sampling without one.
func refuseUnadvertised(k clientKind) mcp.Middleware {
	refused := map[string]bool{
		"roots/list":             k&kindRoots == 0,
		"elicitation/create":     k&kindElicit == 0,
		"sampling/createMessage": k&(kindSampling|kindSamplingTools) == 0,
	}
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if refused[method] {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method not found: the client did not advertise " + method}
			}
			return next(ctx, method, req)
		}
	}
}

// setRoots changes a client's roots from old to roots: those gone are removed, then
// the new and changed ones added (the SDK notifies each session of each change).
func setRoots(c *mcp.Client, old, roots []*mcp.Root) {
	var gone []string
	for _, o := range old {
		if !slices.ContainsFunc(roots, func(r *mcp.Root) bool { return r.URI == o.URI }) {
			gone = append(gone, o.URI)
		}
	}
	if len(gone) > 0 {
		c.RemoveRoots(gone...)
	}
	var added []*mcp.Root
	for _, r := range roots {
		if !slices.ContainsFunc(old, func(o *mcp.Root) bool { return o.URI == r.URI && o.Name == r.Name }) {
			added = append(added, r)
		}
	}
	if len(added) > 0 {
		c.AddRoots(added...)
	}
}

// capText shortens s to at most n bytes, at a rune boundary, marking the cut.
func capText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xc0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}
