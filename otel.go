package mcpfsm

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// This file is a connection's telemetry, through the OpenTelemetry API alone (an
// application brings the SDK and its exporters): the metrics and spans that
// docs/observability.md lists. When no provider is set (the global ones, until an
// application sets them), a request pays for one atomic load of the instrument's
// delegate and one of the global tracer provider: it allocates nothing and takes no
// lock, so that an embedder that does not use OpenTelemetry does not pay for it.

// ScopeName is the OpenTelemetry instrumentation scope of mcpfsm's meters and tracers.
const ScopeName = "github.com/mcpfsm/mcpfsm"

// The attributes of mcpfsm's own metrics and spans. Those of the OpenTelemetry
// semantic conventions for MCP (mcp.method.name, gen_ai.tool.name, error.type...) are
// spelled where they are set.
const (
	attrServer  = "mcpfsm.server"  // the server's name, as its config gives it
	attrState   = "mcpfsm.state"   // a lifecycle state
	attrFrom    = "mcpfsm.from"    // a transition's state before
	attrTo      = "mcpfsm.to"      // and after
	attrTrigger = "mcpfsm.trigger" // what moved it: a trigger, or "after <delay>"
	attrCause   = "mcpfsm.cause"   // the classified cause of a failure
	attrOutcome = "mcpfsm.outcome" // how a request, connect or probe ended
	attrEffect  = "mcpfsm.effect"  // connect or replace
)

// durationBuckets are the bucket boundaries, in seconds, that the semantic conventions
// advise for mcp.client.operation.duration; connects and probes use them too.
var durationBuckets = []float64{0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300}

// instruments are the metric instruments made from one MeterProvider, shared by every
// connection that uses it (a provider's meter is made once, not once per connection).
type instruments struct {
	transitions metric.Int64Counter
	failures    metric.Int64Counter
	connects    metric.Int64Counter
	requests    metric.Int64Counter
	retries     metric.Int64Counter
	requestDur  metric.Float64Histogram
	connectDur  metric.Float64Histogram
	probeDur    metric.Float64Histogram

	// inState counts the live connections in each state, for the observable gauge
	// mcpfsm.connections: states.State → *atomic.Int64.
	inState sync.Map
}

var (
	instrumentsMu sync.Mutex
	instrumentsOf = map[metric.MeterProvider]*instruments{}
)

// instrumentsFor returns the instruments of mp, made on first use.
func instrumentsFor(mp metric.MeterProvider) *instruments {
	comparable := reflect.TypeOf(mp).Comparable()
	if comparable {
		instrumentsMu.Lock()
		defer instrumentsMu.Unlock()
		if in := instrumentsOf[mp]; in != nil {
			return in
		}
	}
	in := newInstruments(mp.Meter(ScopeName))
	if comparable {
		instrumentsOf[mp] = in
	}
	return in
}

func newInstruments(m metric.Meter) *instruments {
	in := &instruments{}
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		if c == nil {
			c = noop.Int64Counter{}
		}
		return c
	}
	histogram := func(name, desc string) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(durationBuckets...))
		errs = append(errs, err)
		if h == nil {
			h = noop.Float64Histogram{}
		}
		return h
	}
	in.transitions = counter("mcpfsm.transitions", "{transition}", "Transitions of connections' lifecycles.")
	in.failures = counter("mcpfsm.failures", "{failure}", "Transitions that carried a failure, by cause.")
	in.connects = counter("mcpfsm.connect.attempts", "{attempt}", "Attempts to open a session (dial, initialize, list, restore).")
	in.requests = counter("mcpfsm.requests", "{request}", "Requests made through connections, by method and outcome.")
	in.retries = counter("mcpfsm.request.retries", "{retry}", "Requests sent once more on a new session after their session broke.")
	in.requestDur = histogram("mcp.client.operation.duration", "Duration of a request through a connection, as its caller saw it (a wait for a session and a retry included).")
	in.connectDur = histogram("mcpfsm.connect.duration", "Duration of an attempt to open a session.")
	in.probeDur = histogram("mcpfsm.probe.duration", "Duration of a keepalive probe that reached the server.")
	_, err := m.Int64ObservableGauge("mcpfsm.connections", metric.WithUnit("{connection}"),
		metric.WithDescription("Open connections in each lifecycle state."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			in.inState.Range(func(k, v any) bool {
				o.Observe(v.(*atomic.Int64).Load(), metric.WithAttributes(attribute.String(attrState, string(k.(states.State)))))
				return true
			})
			return nil
		}))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		otel.Handle(err) // the API's way: the instruments made still work
	}
	return in
}

// entered moves one connection's count from one state to another; from "" is a new
// connection, to "" one that closed.
func (in *instruments) entered(from, to states.State) {
	if from != "" {
		if n, ok := in.inState.Load(from); ok {
			n.(*atomic.Int64).Add(-1)
		}
	}
	if to != "" {
		n, ok := in.inState.Load(to)
		if !ok {
			n, _ = in.inState.LoadOrStore(to, new(atomic.Int64))
		}
		n.(*atomic.Int64).Add(1)
	}
}

// telemetry is one connection's side of the instruments, and its tracer.
type telemetry struct {
	in     *instruments
	server attribute.KeyValue
	spec   *machine.Spec
	tracer trace.Tracer
	// globalTracer: tracer is the global provider's, which records nothing until
	// an application sets one (see tracing).
	globalTracer bool
	transport    []attribute.KeyValue // network.transport and server.address/port, for spans

	// sets caches the attribute sets of requests (by method, target and outcome),
	// so that a request does not build one each time; up to maxCachedSets.
	sets  sync.Map
	nsets atomic.Int32
}

// maxCachedSets bounds a connection's cache of request attribute sets: a caller that
// names ever new tools still gets its requests counted, with a set made each time.
const maxCachedSets = 512

// defaultTracerProvider is the global tracer provider as it is before an application
// sets one: a tracer from it records nothing, and starting a span on it would cost an
// allocation, which tracing avoids. Nil if something set a provider before this
// package was initialized.
var defaultTracerProvider = func() trace.TracerProvider {
	tp := otel.GetTracerProvider()
	if strings.HasSuffix(reflect.TypeOf(tp).String(), "global.tracerProvider") {
		return tp
	}
	return nil
}()

func newTelemetry(name string, spec *machine.Spec, cfg transport.Config, mp metric.MeterProvider, tp trace.TracerProvider) *telemetry {
	t := &telemetry{server: attribute.String(attrServer, name), spec: spec}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	t.in = instrumentsFor(mp)
	if tp == nil {
		tp = otel.GetTracerProvider()
		t.globalTracer = defaultTracerProvider != nil && tp == defaultTracerProvider
	}
	if _, off := tp.(tracenoop.TracerProvider); !off {
		t.tracer = tp.Tracer(ScopeName)
	}
	t.transport = transportAttrs(cfg)
	t.in.entered("", spec.Initial())
	return t
}

// transportAttrs are the network attributes the conventions recommend on a span:
// network.transport (pipe for stdio, tcp for HTTP) and the server's address and port.
func transportAttrs(cfg transport.Config) []attribute.KeyValue {
	url := ""
	switch {
	case cfg.Stdio != nil:
		return []attribute.KeyValue{attribute.String("network.transport", "pipe")}
	case cfg.HTTP != nil:
		url = cfg.HTTP.URL
	case cfg.SSE != nil:
		url = cfg.SSE.URL
	default:
		return nil
	}
	out := []attribute.KeyValue{attribute.String("network.transport", "tcp"), attribute.String("network.protocol.name", "http")}
	// The host and port only: a URL's path, query and user info may hold secrets.
	rest := url
	if _, after, ok := strings.Cut(rest, "://"); ok {
		rest = after
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest = rest[i+1:]
	}
	host, port := rest, ""
	if i := strings.LastIndex(rest, ":"); i >= 0 && !strings.HasSuffix(rest, "]") {
		host, port = rest[:i], rest[i+1:]
	}
	if host != "" {
		out = append(out, attribute.String("server.address", strings.Trim(host, "[]")))
		if p, err := strconv.Atoi(port); err == nil {
			out = append(out, attribute.Int("server.port", p))
		}
	}
	return out
}

// tracing reports whether a request should start a span: a tracer is set, and it is
// not the global one before an application set a provider.
func (t *telemetry) tracing() bool {
	return t.tracer != nil && (!t.globalTracer || otel.GetTracerProvider() != defaultTracerProvider)
}

// enabled reports whether a request is to be observed at all: its metrics are
// enabled or a span would record.
func (t *telemetry) enabled(ctx context.Context) bool {
	return t.in.requests.Enabled(ctx) || t.tracing()
}

// transition records a transition of the connection: called from its Observer, on
// its owner.
func (t *telemetry) transition(tr machine.Transition) {
	if tr.From != tr.To {
		to := tr.To
		if t.spec.Final(to) {
			to = "" // a closed connection is no longer counted
		}
		t.in.entered(tr.From, to)
	}
	ctx := context.Background()
	if t.in.transitions.Enabled(ctx) {
		t.in.transitions.Add(ctx, 1, metric.WithAttributes(t.server,
			attribute.String(attrFrom, string(tr.From)), attribute.String(attrTo, string(tr.To)),
			attribute.String(attrTrigger, tr.Trigger), attribute.String(attrCause, tr.Cause.String())))
	}
	if tr.Cause.Failure() && t.in.failures.Enabled(ctx) {
		t.in.failures.Add(ctx, 1, metric.WithAttributes(t.server, attribute.String(attrCause, tr.Cause.String())))
	}
}

// connected records an attempt to open a session (the connect and replace effects),
// which began at start and ended with ev. A span is made after the fact, with its
// real start: the effect's own context carries nothing a span could parent.
func (t *telemetry) connected(inv machine.Invocation, start time.Time, ev machine.Event, sessionID string) {
	ctx := context.Background()
	end := time.Now()
	outcome := "ok"
	if ev.Trigger != states.Connected {
		outcome = ev.Cause.String()
	}
	if t.in.connects.Enabled(ctx) || t.in.connectDur.Enabled(ctx) {
		attrs := metric.WithAttributes(t.server, attribute.String(attrEffect, inv.Effect), attribute.String(attrOutcome, outcome))
		t.in.connects.Add(ctx, 1, attrs)
		t.in.connectDur.Record(ctx, end.Sub(start).Seconds(), attrs)
	}
	if !t.tracing() {
		return
	}
	_, span := t.tracer.Start(ctx, "mcpfsm.connect", trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(t.server, attribute.String(attrEffect, inv.Effect), attribute.String(attrState, string(inv.State))),
		trace.WithAttributes(t.transport...))
	span.SetAttributes(attribute.String(attrOutcome, outcome))
	if sessionID != "" {
		span.SetAttributes(attribute.String("mcp.session.id", sessionID))
	}
	if outcome != "ok" {
		span.SetAttributes(attribute.String("error.type", outcome))
		span.SetStatus(codes.Error, machine.ErrorText(ev.Err))
	}
	span.End(trace.WithTimestamp(end))
}

// probed records a keepalive probe that reached out to the server: its duration and
// how it went ("ok", or the cause of its failure).
func (t *telemetry) probed(start time.Time, outcome string) {
	ctx := context.Background()
	if t.in.probeDur.Enabled(ctx) {
		t.in.probeDur.Record(ctx, time.Since(start).Seconds(), metric.WithAttributes(t.server, attribute.String(attrOutcome, outcome)))
	}
}

// callObs observes one request through the call path while telemetry is enabled.
type callObs struct {
	t      *telemetry
	method string
	span   trace.Span // nil when not tracing
}

// observe runs a request through the call path, observed: a span around it (a
// retry is an event on it), then its duration and outcome counted.
func observe[T any](ctx context.Context, c *Conn, r request, run func(ctx context.Context, s *session) (T, error)) (T, error) {
	t := c.tel
	start := time.Now()
	o := callObs{t: t, method: r.method}
	if t.tracing() {
		name := r.method
		if r.target() != "" {
			name += " " + r.name
		}
		ctx, o.span = t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(t.spanAttrs(r.method, r.name)...))
	}
	res, err := callPath(ctx, c, r, run, &o)
	outcome, etype := "ok", ""
	switch {
	case err != nil:
		outcome, etype = "error", "_OTHER"
		var ce *CallError
		if errors.As(err, &ce) {
			if ce.unsent {
				outcome = "unsent"
			}
			if ce.Cause != states.CauseNone {
				etype = ce.Cause.String()
			} else if errors.Is(err, ErrClosed) {
				etype = "closed"
			}
		}
	case isToolError(res):
		outcome, etype = "tool_error", "tool_error"
	}
	if t.in.requests.Enabled(ctx) || t.in.requestDur.Enabled(ctx) {
		set := t.requestSet(r.method, r.target(), outcome, etype)
		t.in.requests.Add(ctx, 1, set.add...)
		t.in.requestDur.Record(ctx, time.Since(start).Seconds(), set.record...)
	}
	if o.span != nil {
		if etype != "" {
			o.span.SetAttributes(attribute.String("error.type", etype), attribute.String(attrOutcome, outcome))
			var werr *jsonrpc.Error
			if errors.As(err, &werr) {
				o.span.SetAttributes(attribute.String("rpc.response.status_code", strconv.FormatInt(werr.Code, 10)))
			}
			msg := "tool_error"
			if err != nil {
				msg = machine.ErrorText(err)
			}
			o.span.SetStatus(codes.Error, msg)
		}
		o.span.End()
	}
	return res, err
}

func isToolError(res any) bool {
	r, ok := res.(*mcp.CallToolResult)
	return ok && r != nil && r.IsError
}

// target is what the conventions put in a request's span name and as gen_ai.tool.name
// or gen_ai.prompt.name: the tool or prompt, for tools/call and prompts/get.
func (r *request) target() string {
	if r.method == "tools/call" || r.method == "prompts/get" {
		return r.name
	}
	return ""
}

// spanAttrs are the attributes of a request's span as it starts.
func (t *telemetry) spanAttrs(method, name string) []attribute.KeyValue {
	attrs := append([]attribute.KeyValue{t.server, attribute.String("mcp.method.name", method)}, t.transport...)
	switch method {
	case "tools/call":
		attrs = append(attrs, attribute.String("gen_ai.tool.name", name), attribute.String("gen_ai.operation.name", "execute_tool"))
	case "prompts/get":
		attrs = append(attrs, attribute.String("gen_ai.prompt.name", name))
	case "resources/read", "resources/subscribe", "resources/unsubscribe":
		attrs = append(attrs, attribute.String("mcp.resource.uri", name))
	}
	return attrs
}

// sent notes the session a request is sent on, and the state it was found in.
func (o *callObs) sent(s *session, st states.State) {
	if o.span == nil {
		return
	}
	o.span.SetAttributes(attribute.String(attrState, string(st)))
	if id := s.s.ID(); id != "" {
		o.span.SetAttributes(attribute.String("mcp.session.id", id))
	}
	if r := s.s.InitializeResult(); r != nil && r.ProtocolVersion != "" {
		o.span.SetAttributes(attribute.String("mcp.protocol.version", r.ProtocolVersion))
	}
}

// retry notes that a request is sent once more on a new session after first.
func (o *callObs) retry(ctx context.Context, first *CallError) {
	if o.t.in.retries.Enabled(ctx) {
		o.t.in.retries.Add(ctx, 1, metric.WithAttributes(o.t.server, attribute.String("mcp.method.name", o.method)))
	}
	if o.span != nil {
		o.span.AddEvent("mcpfsm.retry", trace.WithAttributes(attribute.String(attrCause, first.Cause.String()),
			attribute.String("exception.message", machine.ErrorText(first.Err))))
	}
}

type setKey struct{ method, target, outcome, etype string }

// requestOpts are the attributes of a request's metrics, as the options of Add and
// Record: made once, so that recording allocates nothing of ours.
type requestOpts struct {
	add    []metric.AddOption
	record []metric.RecordOption
}

// requestSet returns the attributes of a request's metrics, cached.
func (t *telemetry) requestSet(method, target, outcome, etype string) *requestOpts {
	k := setKey{method, target, outcome, etype}
	if v, ok := t.sets.Load(k); ok {
		return v.(*requestOpts)
	}
	attrs := []attribute.KeyValue{t.server, attribute.String("mcp.method.name", method), attribute.String(attrOutcome, outcome)}
	switch method {
	case "tools/call":
		attrs = append(attrs, attribute.String("gen_ai.tool.name", target))
	case "prompts/get":
		attrs = append(attrs, attribute.String("gen_ai.prompt.name", target))
	}
	if etype != "" {
		attrs = append(attrs, attribute.String("error.type", etype))
	}
	opt := metric.WithAttributeSet(attribute.NewSet(attrs...))
	set := &requestOpts{add: []metric.AddOption{opt}, record: []metric.RecordOption{opt}}
	if t.nsets.Load() < maxCachedSets {
		if _, loaded := t.sets.LoadOrStore(k, set); !loaded {
			t.nsets.Add(1)
		}
	}
	return set
}
