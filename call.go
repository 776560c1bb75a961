package mcpfsm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"maps"
	"reflect"
	"time"

	"github.com/mcpfsm/mcpfsm/effects"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// This file is the one call path: every request a Conn sends goes through call, which
// acquires a session (waiting, or failing fast, as the state's call mode says), sends
// the request, classifies a failure and reports it to the machine, and retries once on
// the next session when effects.Judge says the request may be sent again.

// A request is one kind of request, as the call path sees it.
type request struct {
	method string // as on the wire, such as "tools/call"
	name   string // the tool, prompt or URI it is about, for errors
	rule   effects.Retry
	// tool, for tools/call: the retry rule is read from the tool's annotations on
	// the session the call is sent on.
	tool bool
}

// call sends a request through the connection: see the file's comment. run sends it
// on one session. With telemetry enabled (see otel.go) the request is observed.
func call[T any](ctx context.Context, c *Conn, r request, run func(ctx context.Context, s *session) (T, error)) (T, error) {
	if c.tel.enabled(ctx) {
		return observe(ctx, c, r, run)
	}
	return callPath(ctx, c, r, run, nil)
}

// callPath is call itself; o, if not nil, observes it.
func callPath[T any](ctx context.Context, c *Conn, r request, run func(ctx context.Context, s *session) (T, error), o *callObs) (T, error) {
	var zero T
	var failed *session // the session a first attempt failed on
	var first *CallError
	rep := reportFrom(ctx)
	if lv := c.levelMeta.Load(); lv != nil {
		ctx = context.WithValue(ctx, levelKey{}, *lv)
	}
	for {
		s, st, err := c.acquire(ctx, failed)
		if err != nil {
			return zero, c.noSession(r, st, err, first)
		}
		if first != nil && rep != nil {
			rep.First = first // the request is sent again: this is why
		}
		if o != nil {
			if first != nil {
				o.retry(ctx, first)
			}
			o.sent(s, st)
		}
		// The request ends with the caller's context or with the session's life,
		// which ends as the session is closed with the request still in flight: the
		// request is then cancelled, and the server told, before the close (see
		// cutCalls).
		rctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(s.life, cancel)
		if c.answers {
			// The SDK answers a 2026-07-28 server's input requests (SEP-2322) with the
			// client's handlers under the request's context: they find the session
			// there, as they find it in the connection's context otherwise.
			rctx = context.WithValue(rctx, sessionKey{}, s)
		}
		res, err := run(rctx, s)
		// The notifications the server sent before its answer (progress, log
		// messages) reach their handlers before the request returns.
		if s.settler != nil {
			s.settler.Settle(rctx)
		}
		// Cut by our close (not the caller), if the request failed of its end.
		cut := err != nil && rctx.Err() != nil && ctx.Err() == nil && errors.Is(err, context.Canceled)
		stop()
		cancel()
		ownClose := s.ownClose()
		c.release(s)
		if rep != nil {
			rep.Attempts++
		}
		if err == nil {
			c.answeredOn(s)
			return res, nil
		}
		if ctx.Err() != nil {
			// The caller gave up; that says nothing about the connection.
			return zero, &CallError{Server: c.name, Method: r.method, Name: r.name, State: st, Cause: states.CauseCanceled, Retried: failed != nil, Err: err}
		}
		if cut {
			// The session's close cancelled it: what the SDK says of that (the
			// context's end) is not what happened.
			err = cutError(err, ownClose)
		}
		rule := r.rule
		if r.tool {
			rule = toolRule(s, r.name)
		}
		v := effects.Judge(err, ownClose, rule)
		if ie := (*inputError)(nil); errors.As(err, &ie) {
			// The server's input requests got no answer: the connection is fine,
			// whatever the handler's error says (see inputError).
			v = effects.Verdict{Cause: states.CauseServer}
		}
		if v.Cause == states.CauseServer {
			c.answeredOn(s) // an answer all the same
		}
		c.report(s, v.Cause, err)
		if v.Cause == states.CauseAuth {
			err = c.refusedCall(s, err)
		}
		if v.MayHaveRun {
			err = fmt.Errorf("%w: %w", ErrMayHaveRun, err)
		}
		ce := &CallError{Server: c.name, Method: r.method, Name: r.name, State: st, Cause: v.Cause, Retried: failed != nil, Err: err}
		if failed != nil || !v.Retry {
			return zero, ce
		}
		failed, first = s, ce
	}
}

// cutError is the error of a request cut by the close of its session (see cutCalls),
// whose own error err says only that its context ended: errCut if the close was our
// own (ownClose), errBroken if the session had broken (its server gone, say: then
// nobody was told), in the transport's error (which says what the request was, and
// whether it was sent) if err is one.
func cutError(err error, ownClose bool) error {
	cut := errBroken
	if ownClose {
		cut = errCut
	}
	var te *transport.Error
	if !errors.As(err, &te) {
		return cut
	}
	cp := *te
	cp.Err = cut
	return &cp
}

// answeredOn notes that a request got an answer on s: traffic that spares the next
// probe; and, the first time it comes on a session that has lived a breaker cooldown,
// proof that the connection is healthy (the spec's answered trigger), so that a
// connection that is not probed (keepalive_interval 0) does not count failures from
// one good session to the next for ever.
func (c *Conn) answeredOn(s *session) {
	now := time.Now()
	s.answered.Store(now.UnixNano())
	c.ok.note(now, false)
	if !s.proved.Load() && now.Sub(s.start) >= time.Duration(c.healthyAfter.Load()) && s.proved.CompareAndSwap(false, true) {
		c.m.Post(machine.Event{Trigger: states.Answered, Session: s.id})
	}
}

// toolRule returns the retry rule of a call of the named tool on s: safe if the tool is
// annotated read-only or idempotent.
func toolRule(s *session, name string) effects.Retry {
	if p := s.tools.items.Load(); p != nil {
		for _, t := range *p {
			if t.Name == name && t.Annotations != nil && (t.Annotations.ReadOnlyHint || t.Annotations.IdempotentHint) {
				return effects.RetrySafe
			}
		}
	}
	return effects.RetryIfNotRun
}

// acquire returns a session to send on, counted in flight, other than avoid, and the
// state it was acquired in: at once if one is up, else once the machine has one. It
// fails fast in a state whose calls fail fast, unless a reconnect asked for is about
// to move the machine.
func (c *Conn) acquire(ctx context.Context, avoid *session) (*session, states.State, error) {
	if s := c.tryAcquire(); s != nil {
		if s != avoid {
			return s, c.m.State(), nil
		}
		c.release(s)
	}
	if testHookWaits != nil {
		testHookWaits(c.name)
	}
	for {
		st, err := c.m.Wait(ctx, func(states.State) bool {
			if cur := c.current.Load(); cur != nil && cur != avoid {
				return true
			}
			_, ff := c.failsFastNow()
			return ff
		})
		switch {
		case errors.Is(err, machine.ErrClosed):
			return nil, st, ErrClosed
		case err != nil:
			return nil, st, &notReadyError{ctxErr: err, last: c.m.Status().LastFailure}
		}
		if s := c.tryAcquire(); s != nil {
			if s != avoid {
				return s, st, nil
			}
			c.release(s)
			continue
		}
		if st, ff := c.failsFastNow(); ff {
			return nil, st, &unavailableError{state: st, last: c.m.Status().LastFailure}
		}
	}
}

// failsFastNow reports whether a request that found no session is to fail now, and in
// which state: the state's calls fail fast and no reconnect asked for is still to be
// applied. The reconnect is looked at first, then the state: the owner moves the
// machine before it marks a reconnect applied, so a state read after is the one the
// reconnect led to. (Wait's state, read before, could be the open breaker a reconnect
// had just left: a request then failed at once, seen once in a stress run.)
func (c *Conn) failsFastNow() (states.State, bool) {
	if c.m.Reconnecting() {
		return "", false
	}
	st := c.m.State()
	return st, c.spec.Calls(st) == machine.FailFast
}

// testHookWaits, set by tests before any connection is opened, hears of each
// request that found no session and is about to wait for one.
var testHookWaits func(server string)

// noSession is the error of a request that found no session to run on: err says why.
// When a first attempt had failed and this was to be the retry, the request ran once,
// not twice: the error is the first attempt's, with why it was not retried.
func (c *Conn) noSession(r request, st states.State, err error, first *CallError) error {
	if first != nil {
		ce := *first
		ce.Err = fmt.Errorf("%w (not retried: %w)", first.Err, err)
		ce.resend = true
		return &ce
	}
	cause := states.CauseNone
	switch {
	case errors.Is(err, ErrNotReady):
		cause = states.CauseCanceled
	case errors.Is(err, ErrUnavailable):
		if f := c.m.Status().LastFailure; f != nil {
			cause = f.Cause
		}
	}
	return &CallError{Server: c.name, Method: r.method, Name: r.name, State: st, Cause: cause, Err: err, unsent: true}
}

// A CallReport says how a request went through a connection; ask for one with
// WithReport.
type CallReport struct {
	// Attempts is how many times the request was sent: 2 if it was retried on a new
	// session; 0 if it found no session to run on (it failed fast, or its context
	// ended while it waited). A request whose session broke under it and that found
	// no session to be sent again on reports 1: its error wraps ErrUnavailable too
	// (the retry would have failed fast), but it was sent.
	Attempts int
	// First is the error of the first attempt when the request was retried (whatever
	// became of the retry).
	First error
}

type reportKey struct{}

// WithReport returns a context under which a Conn's request fills r with how it went:
// whether it was retried on a new session, and why.
func WithReport(ctx context.Context, r *CallReport) context.Context {
	return context.WithValue(ctx, reportKey{}, r)
}

func reportFrom(ctx context.Context) *CallReport {
	r, _ := ctx.Value(reportKey{}).(*CallReport)
	return r
}

type progressKey struct{}

// WithProgress returns a context under which a Conn's CallTool asks the server for
// progress notifications and hands them to f (as well as to Handlers.Progress). A call
// that is retried on a new session keeps its progress token, so f sees the retry's
// progress too. f must return promptly.
func WithProgress(ctx context.Context, f func(*mcp.ProgressNotificationParams)) context.Context {
	return context.WithValue(ctx, progressKey{}, f)
}

// CallTool calls a tool, waiting for a session if none is up. Arguments nil (or a nil
// map or pointer) are sent as {} (servers written with the TypeScript SDK reject
// null). p is not modified.
//
// A tool that fails returns a result with IsError set and a nil error: that is the
// tool's answer, and it says nothing about the connection. An error is a *CallError. A
// call that fails because the session broke is reported to the machine (once per
// session), which replaces the session; the call is then retried once on the next
// session if the server cannot have run it (the session had expired: HTTP 404, the
// server refused the call's own request with another 4xx, or the server could not be
// reached at all) or if the tool is annotated readOnlyHint or
// idempotentHint. Otherwise the error wraps ErrMayHaveRun: a non-idempotent call is
// never run twice. A call waits on nothing past the end of its context: it returns
// then, as soon as the runtime runs it, with the context's error, or with its answer
// if the answer was in before the context's end reached it (on an overloaded machine
// that may be past the deadline; see docs/reliability.md, "Calls past their deadline
// under load").
func (c *Conn) CallTool(ctx context.Context, p *mcp.CallToolParams) (*mcp.CallToolResult, error) {
	var cp mcp.CallToolParams
	if p != nil {
		cp = *p
	}
	if isNil(cp.Arguments) {
		cp.Arguments = map[string]any{}
	}
	if f, ok := ctx.Value(progressKey{}).(func(*mcp.ProgressNotificationParams)); ok && f != nil {
		token := fmt.Sprintf("mcpfsm-%s-%d", c.name, c.progressID.Add(1))
		cp.Meta = cloneMeta(cp.Meta)
		cp.SetProgressToken(token)
		c.progress.Store(token, f)
		defer c.progress.Delete(token)
	}
	return call(ctx, c, request{method: "tools/call", name: cp.Name, tool: true}, func(ctx context.Context, s *session) (*mcp.CallToolResult, error) {
		return s.s.CallTool(ctx, &cp)
	})
}

// isNil reports whether v would be sent as JSON null: nil, or a nil map,
// pointer, slice or interface in an interface (map[string]any(nil) is not
// == nil).
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch r := reflect.ValueOf(v); r.Kind() {
	case reflect.Map, reflect.Pointer, reflect.Slice, reflect.Interface:
		return r.IsNil()
	}
	return false
}

func cloneMeta(m mcp.Meta) mcp.Meta {
	out := make(mcp.Meta, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

// send is the call path for the requests that are reads (safe to send again): it runs
// f on the session's SDK session.
func send[R any](ctx context.Context, c *Conn, method, name string, rule effects.Retry, f func(ctx context.Context, cs *mcp.ClientSession) (R, error)) (R, error) {
	return call(ctx, c, request{method: method, name: name, rule: rule}, func(ctx context.Context, s *session) (R, error) {
		var res R
		err := s.s.Request(ctx, transport.OpRequest, name, func(ctx context.Context, cs *mcp.ClientSession) error {
			var err error
			res, err = f(ctx, cs)
			return err
		})
		return res, err
	})
}

// ListTools lists one page of the server's tools (params may be nil: the first page).
// Tools walks every page.
func (c *Conn) ListTools(ctx context.Context, p *mcp.ListToolsParams) (*mcp.ListToolsResult, error) {
	return send(ctx, c, "tools/list", "", effects.RetrySafe, func(ctx context.Context, cs *mcp.ClientSession) (*mcp.ListToolsResult, error) {
		return cs.ListTools(ctx, orEmpty(own(p)))
	})
}

// Tools iterates over every tool of the server, page by page (each page a request
// through the call path), for at most transport.MaxListPages pages.
func (c *Conn) Tools(ctx context.Context, p *mcp.ListToolsParams) iter.Seq2[*mcp.Tool, error] {
	return pages(ctx, orEmpty(p), func(ctx context.Context, p *mcp.ListToolsParams) ([]*mcp.Tool, string, error) {
		res, err := c.ListTools(ctx, p)
		if err != nil {
			return nil, "", err
		}
		return res.Tools, res.NextCursor, nil
	}, func(p *mcp.ListToolsParams, cursor string) { p.Cursor = cursor }, c.listError("tools/list"))
}

// ListPrompts lists one page of the server's prompts. Prompts walks every page.
func (c *Conn) ListPrompts(ctx context.Context, p *mcp.ListPromptsParams) (*mcp.ListPromptsResult, error) {
	return send(ctx, c, "prompts/list", "", effects.RetrySafe, func(ctx context.Context, cs *mcp.ClientSession) (*mcp.ListPromptsResult, error) {
		return transport.ListPrompts(ctx, cs, orEmpty(own(p)))
	})
}

// Prompts iterates over every prompt of the server, page by page.
func (c *Conn) Prompts(ctx context.Context, p *mcp.ListPromptsParams) iter.Seq2[*mcp.Prompt, error] {
	return pages(ctx, orEmpty(p), func(ctx context.Context, p *mcp.ListPromptsParams) ([]*mcp.Prompt, string, error) {
		res, err := c.ListPrompts(ctx, p)
		if err != nil {
			return nil, "", err
		}
		return res.Prompts, res.NextCursor, nil
	}, func(p *mcp.ListPromptsParams, cursor string) { p.Cursor = cursor }, c.listError("prompts/list"))
}

// GetPrompt asks the server for a prompt, filled in with p's arguments (prompts/get).
// Getting a prompt changes nothing: one whose session broke under it is sent again on
// the next session.
func (c *Conn) GetPrompt(ctx context.Context, p *mcp.GetPromptParams) (*mcp.GetPromptResult, error) {
	name := ""
	if p != nil {
		name = p.Name
	}
	return send(ctx, c, "prompts/get", name, effects.RetrySafe, func(ctx context.Context, cs *mcp.ClientSession) (*mcp.GetPromptResult, error) {
		return cs.GetPrompt(ctx, own(p))
	})
}

// ListResources lists one page of the server's resources. Resources walks every page.
func (c *Conn) ListResources(ctx context.Context, p *mcp.ListResourcesParams) (*mcp.ListResourcesResult, error) {
	return send(ctx, c, "resources/list", "", effects.RetrySafe, func(ctx context.Context, cs *mcp.ClientSession) (*mcp.ListResourcesResult, error) {
		return transport.ListResources(ctx, cs, orEmpty(own(p)))
	})
}

// Resources iterates over every resource of the server, page by page.
func (c *Conn) Resources(ctx context.Context, p *mcp.ListResourcesParams) iter.Seq2[*mcp.Resource, error] {
	return pages(ctx, orEmpty(p), func(ctx context.Context, p *mcp.ListResourcesParams) ([]*mcp.Resource, string, error) {
		res, err := c.ListResources(ctx, p)
		if err != nil {
			return nil, "", err
		}
		return res.Resources, res.NextCursor, nil
	}, func(p *mcp.ListResourcesParams, cursor string) { p.Cursor = cursor }, c.listError("resources/list"))
}

// ListResourceTemplates lists one page of the server's resource templates.
// ResourceTemplates walks every page.
func (c *Conn) ListResourceTemplates(ctx context.Context, p *mcp.ListResourceTemplatesParams) (*mcp.ListResourceTemplatesResult, error) {
	return send(ctx, c, "resources/templates/list", "", effects.RetrySafe, func(ctx context.Context, cs *mcp.ClientSession) (*mcp.ListResourceTemplatesResult, error) {
		return transport.ListResourceTemplates(ctx, cs, orEmpty(own(p)))
	})
}

// ResourceTemplates iterates over every resource template of the server, page by page.
func (c *Conn) ResourceTemplates(ctx context.Context, p *mcp.ListResourceTemplatesParams) iter.Seq2[*mcp.ResourceTemplate, error] {
	return pages(ctx, orEmpty(p), func(ctx context.Context, p *mcp.ListResourceTemplatesParams) ([]*mcp.ResourceTemplate, string, error) {
		res, err := c.ListResourceTemplates(ctx, p)
		if err != nil {
			return nil, "", err
		}
		return res.ResourceTemplates, res.NextCursor, nil
	}, func(p *mcp.ListResourceTemplatesParams, cursor string) { p.Cursor = cursor }, c.listError("resources/templates/list"))
}

// ReadResource reads the contents of the resource at p.URI (resources/read). A read
// whose session broke under it is sent again on the next session.
func (c *Conn) ReadResource(ctx context.Context, p *mcp.ReadResourceParams) (*mcp.ReadResourceResult, error) {
	uri := ""
	if p != nil {
		uri = p.URI
	}
	return send(ctx, c, "resources/read", uri, effects.RetrySafe, func(ctx context.Context, cs *mcp.ClientSession) (*mcp.ReadResourceResult, error) {
		return transport.ReadResource(ctx, cs, own(p))
	})
}

// Complete asks the server to complete an argument of a prompt or a resource template.
func (c *Conn) Complete(ctx context.Context, p *mcp.CompleteParams) (*mcp.CompleteResult, error) {
	return send(ctx, c, "completion/complete", "", effects.RetrySafe, func(ctx context.Context, cs *mcp.ClientSession) (*mcp.CompleteResult, error) {
		return cs.Complete(ctx, own(p))
	})
}

// Ping checks the server answers, through the call path (a probe is the machine's own
// business; see the lifecycle's keepalive). On protocol 2026-07-28 over streamable
// HTTP, where the go-sdk sends ping without the _meta the (stateless) server
// requires, the server is asked as a probe asks it (see transport.Session.Probe).
func (c *Conn) Ping(ctx context.Context, p *mcp.PingParams) error {
	_, err := call(ctx, c, request{method: "ping", rule: effects.RetrySafe}, func(ctx context.Context, s *session) (struct{}, error) {
		if s.stateless {
			return struct{}{}, s.s.Probe(ctx)
		}
		return struct{}{}, s.s.Request(ctx, transport.OpRequest, "", func(ctx context.Context, cs *mcp.ClientSession) error {
			return cs.Ping(ctx, own(p))
		})
	})
	return err
}

// own returns a copy of the caller's params for one sending: the SDK writes into the
// params it is given (_meta: the log level, see withLogLevel, and on protocol
// 2026-07-28 its own keys), and the caller's value, and its Meta map, may be in use by
// other goroutines. nil stays nil.
func own[P any, PP interface {
	*P
	mcp.Params
}](p PP) PP {
	if p == nil {
		return nil
	}
	cp := PP(new(P))
	*cp = *p
	cp.SetMeta(maps.Clone(p.GetMeta()))
	return cp
}

// listError makes an error of a list's walk (past the caps, a repeated cursor) a
// *CallError of method, as every error of a request is: the server answered,
// wrongly.
func (c *Conn) listError(method string) func(error) error {
	return func(err error) error {
		return &CallError{Server: c.name, Method: method, State: c.m.State(), Cause: states.CauseServer, Err: err}
	}
}

// orEmpty returns p, or a new zero P when p is nil.
func orEmpty[P any](p *P) *P {
	if p == nil {
		return new(P)
	}
	return p
}

// maxListBytes is transport.MaxListBytes; tests lower it.
var maxListBytes = transport.MaxListBytes

// jsonSize is the size of v as JSON, 0 if it cannot be encoded: what a listing's
// items count against transport.MaxListBytes.
func jsonSize(v any) int {
	b, _ := json.Marshal(v)
	return len(b)
}

// pages iterates over a paginated list, following cursors, for at most
// transport.MaxListPages pages, transport.MaxListItems items and
// transport.MaxListBytes bytes of them; a server that repeats a cursor, or keeps
// going past the caps, ends the iteration with an error.
// wrap makes the iteration's own errors (past the caps, a repeated cursor) the
// caller's kind.
func pages[P, T any](ctx context.Context, first *P, page func(context.Context, *P) ([]T, string, error), setCursor func(*P, string), wrap func(error) error) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		var zero T
		p := *first
		seen := map[string]bool{}
		items, size := 0, 0
		for n := 0; ; n++ {
			if n >= transport.MaxListPages {
				yield(zero, wrap(fmt.Errorf("%w: more than %d pages", transport.ErrListTooLong, transport.MaxListPages)))
				return
			}
			list, next, err := page(ctx, &p)
			if err != nil {
				yield(zero, err)
				return
			}
			if size += jsonSize(list); size > maxListBytes {
				yield(zero, wrap(fmt.Errorf("%w: more than %d bytes", transport.ErrListTooLong, maxListBytes)))
				return
			}
			for _, it := range list {
				if items++; items > transport.MaxListItems {
					yield(zero, wrap(fmt.Errorf("%w: more than %d items", transport.ErrListTooLong, transport.MaxListItems)))
					return
				}
				if !yield(it, nil) {
					return
				}
			}
			if next == "" {
				return
			}
			if seen[next] {
				yield(zero, wrap(fmt.Errorf("%w: the server repeated the cursor %q", transport.ErrListTooLong, capText(next, 64))))
				return
			}
			seen[next] = true
			setCursor(&p, next)
		}
	}
}

// listAll lists every page of a list on one session (the connect effect's own
// listing, and re-lists: not through the call path). A server that answers the
// first page with method-not-found (-32601) does not have the list: none
// (transport.Unlisted). (A server that declared resources and left out
// resources/templates/list, as many do, failed every connect: it never came up.)
func listAll[T any](ctx context.Context, s *session, method string, page func(context.Context, *mcp.ClientSession, string) ([]T, string, error)) ([]T, error) {
	var out []T
	err := s.s.Request(ctx, transport.OpRequest, method, func(ctx context.Context, cs *mcp.ClientSession) error {
		first := true
		for item, err := range pages(ctx, new(struct{ cursor string }), func(ctx context.Context, p *struct{ cursor string }) ([]T, string, error) {
			items, next, err := page(ctx, cs, p.cursor)
			if first && transport.Unlisted(err) {
				return nil, "", nil
			}
			first = false
			return items, next, err
		}, func(p *struct{ cursor string }, c string) { p.cursor = c }, func(err error) error { return err }) {
			if err != nil {
				return err
			}
			out = append(out, item)
		}
		return nil
	})
	return out, err
}

func listPromptsPage(ctx context.Context, cs *mcp.ClientSession, cursor string) ([]*mcp.Prompt, string, error) {
	res, err := transport.ListPrompts(ctx, cs, &mcp.ListPromptsParams{Cursor: cursor})
	if err != nil {
		return nil, "", err
	}
	return res.Prompts, res.NextCursor, nil
}

// listResources lists every resource and resource template of s's server.
func listResources(ctx context.Context, s *session) (resourceList, error) {
	var l resourceList
	var err error
	l.resources, err = listAll(ctx, s, "resources/list", func(ctx context.Context, cs *mcp.ClientSession, cursor string) ([]*mcp.Resource, string, error) {
		res, err := transport.ListResources(ctx, cs, &mcp.ListResourcesParams{Cursor: cursor})
		if err != nil {
			return nil, "", err
		}
		return res.Resources, res.NextCursor, nil
	})
	if err != nil {
		return l, err
	}
	l.templates, err = listAll(ctx, s, "resources/templates/list", func(ctx context.Context, cs *mcp.ClientSession, cursor string) ([]*mcp.ResourceTemplate, string, error) {
		res, err := transport.ListResourceTemplates(ctx, cs, &mcp.ListResourceTemplatesParams{Cursor: cursor})
		if err != nil {
			return nil, "", err
		}
		return res.ResourceTemplates, res.NextCursor, nil
	})
	return l, err
}
