package mcpfsm

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// points returns the int64 data points of a counter or gauge, and the histogram
// points of a histogram, by name.
func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, ScopeName)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

func str(set attribute.Set, key string) string {
	v, _ := set.Value(attribute.Key(key))
	return v.AsString()
}

// sums returns a counter's points as a map from the values of keys to the count.
func sums(t *testing.T, data metricdata.Aggregation, keys ...string) map[[5]string]int64 {
	t.Helper()
	out := map[[5]string]int64{}
	if data == nil {
		return out
	}
	var pts []metricdata.DataPoint[int64]
	switch d := data.(type) {
	case metricdata.Sum[int64]:
		pts = d.DataPoints
	case metricdata.Gauge[int64]:
		pts = d.DataPoints
	default:
		t.Fatalf("not a counter or gauge: %T", data)
	}
	for _, p := range pts {
		var k [5]string
		for i, key := range keys {
			k[i] = str(p.Attributes, key)
		}
		out[k] += p.Value
	}
	return out
}

// TestTelemetryFaultTour: after a tour of faults in virtual time (a tool error, a
// request retried on a new session, a lost server that opens the breaker, a call that
// fails fast, recovery, a planned reconnect, close), the metrics an SDK reader collects
// match the transitions an Observer saw, edge by edge and cause by cause, and the
// requests made; the gauge counts the connection in its state and forgets it once
// closed; each request has one span, the retried one with a retry event, and each
// connect attempt one span.
func TestTelemetryFaultTour(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		spans := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
		var mu sync.Mutex
		var seen []machine.Transition
		sc := &scripted{}
		pol := exactPolicies()
		c, err := Open(transport.Config{Name: "tour", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}},
			Options{Logger: quietLogger(), Policies: pol, Rand: rand.New(rand.NewPCG(3, 4)), dial: sc.dial,
				MeterProvider: mp, TracerProvider: tp,
				Observer: func(tr machine.Transition) {
					mu.Lock()
					seen = append(seen, tr)
					mu.Unlock()
				}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		synctest.Wait()

		// Answered, and a tool error.
		if _, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}}); err != nil {
			t.Fatal(err)
		}
		if res, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "log", Arguments: map[string]any{"level": "loud", "text": "x"}}); err != nil || !res.IsError {
			t.Fatalf("want a tool error: %v %+v", err, res)
		}
		// A list whose server cannot be reached is sent again on the next session.
		sc.down.Store(true)
		listed := make(chan error, 1)
		go func() {
			var rep CallReport
			_, err := c.ListTools(WithReport(ctx, &rep), nil)
			if err == nil && rep.Attempts != 2 {
				err = errors.New("not retried")
			}
			listed <- err
		}()
		synctest.Wait()
		sc.down.Store(false)
		if err := <-listed; err != nil {
			t.Fatalf("the retried list: %v", err)
		}
		// The server goes away for good: probes and attempts fail until the breaker
		// opens, and a call fails fast.
		sc.down.Store(true)
		if _, err := c.WaitState(ctx, func(s states.State) bool { return s == states.BreakerOpen }); err != nil {
			t.Fatal(err)
		}
		if _, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}}); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("a call with the breaker open: %v", err)
		}
		// It comes back; a planned reconnect.
		sc.down.Store(false)
		if _, err := c.WaitState(ctx, func(s states.State) bool { return s == states.Ready }); err != nil {
			t.Fatal(err)
		}
		c.Reconnect()
		if _, err := c.WaitState(ctx, func(states.State) bool {
			mu.Lock()
			defer mu.Unlock()
			return seen[len(seen)-1].From == states.Retiring
		}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()

		got := collect(t, reader)
		if g := sums(t, got["mcpfsm.connections"], attrState); g[[5]string{"ready"}] != 1 || len(g) < 2 {
			t.Errorf("connections by state while ready: %v", g)
		}
		if err := c.Close(ctx); err != nil {
			t.Fatal(err)
		}
		got = collect(t, reader)
		mu.Lock()
		defer mu.Unlock()

		wantEdges := map[[5]string]int64{}
		wantFailures := map[[5]string]int64{}
		wantConnects := map[[5]string]int64{}
		for _, tr := range seen {
			wantEdges[[5]string{"tour", string(tr.From), string(tr.To), tr.Trigger, tr.Cause.String()}]++
			if tr.Cause.Failure() {
				wantFailures[[5]string{"tour", tr.Cause.String()}]++
			}
			switch tr.Trigger {
			case "connected":
				wantConnects[[5]string{"ok"}]++
			case "connect_failed":
				wantConnects[[5]string{tr.Cause.String()}]++
			}
		}
		if len(seen) < 20 || wantFailures[[5]string{"tour", "lost"}] < int64(pol.BreakerThreshold) {
			t.Fatalf("the tour was short: %d transitions, failures %v", len(seen), wantFailures)
		}
		check := func(what string, got, want map[[5]string]int64) {
			t.Helper()
			if len(got) != len(want) {
				t.Errorf("%s: %d series, want %d:\ngot  %v\nwant %v", what, len(got), len(want), got, want)
			}
			for k, n := range want {
				if got[k] != n {
					t.Errorf("%s %v = %d, want %d", what, k, got[k], n)
				}
			}
		}
		check("mcpfsm.transitions", sums(t, got["mcpfsm.transitions"], attrServer, attrFrom, attrTo, attrTrigger, attrCause), wantEdges)
		check("mcpfsm.failures", sums(t, got["mcpfsm.failures"], attrServer, attrCause), wantFailures)
		check("mcpfsm.connect.attempts", sums(t, got["mcpfsm.connect.attempts"], attrOutcome), wantConnects)
		check("mcpfsm.requests", sums(t, got["mcpfsm.requests"], "mcp.method.name", "gen_ai.tool.name", attrOutcome, "error.type"), map[[5]string]int64{
			{"tools/call", "echo", "ok", ""}:                  1,
			{"tools/call", "log", "tool_error", "tool_error"}: 1,
			{"tools/list", "", "ok", ""}:                      1,
			{"tools/call", "echo", "unsent", "lost"}:          1,
		})
		check("mcpfsm.request.retries", sums(t, got["mcpfsm.request.retries"], "mcp.method.name"), map[[5]string]int64{{"tools/list"}: 1})
		for k, n := range sums(t, got["mcpfsm.connections"], attrState) {
			if n != 0 {
				t.Errorf("%d connections %v after close", n, k)
			}
		}
		var total uint64
		if h, ok := got["mcp.client.operation.duration"].(metricdata.Histogram[float64]); ok {
			for _, p := range h.DataPoints {
				total += p.Count
			}
		}
		if total != 4 {
			t.Errorf("mcp.client.operation.duration counts %d requests, want 4", total)
		}
		connectDur, _ := got["mcpfsm.connect.duration"].(metricdata.Histogram[float64])
		probeDur, _ := got["mcpfsm.probe.duration"].(metricdata.Histogram[float64])
		if len(connectDur.DataPoints) == 0 || len(probeDur.DataPoints) == 0 {
			t.Errorf("no connect or probe durations: %v %v", connectDur, probeDur)
		}

		// Spans: one per request, named as the conventions say; one per connect.
		var names []string
		var connects int
		for _, s := range spans.GetSpans() {
			if s.Name == "mcpfsm.connect" {
				connects++
				continue
			}
			names = append(names, s.Name)
			attrs := attribute.NewSet(s.Attributes...)
			switch s.Name {
			case "tools/list":
				if len(s.Events) != 1 || s.Events[0].Name != "mcpfsm.retry" || str(attrs, attrState) != "ready" {
					t.Errorf("the retried list's span: events %v, attributes %v", s.Events, s.Attributes)
				}
			case "tools/call log":
				if s.Status.Code != codes.Error || str(attrs, "error.type") != "tool_error" || str(attrs, "gen_ai.operation.name") != "execute_tool" {
					t.Errorf("the tool error's span: %v %v", s.Status, s.Attributes)
				}
			}
			if str(attrs, "mcp.method.name") == "" || str(attrs, attrServer) != "tour" {
				t.Errorf("span %s lacks its attributes: %v", s.Name, s.Attributes)
			}
		}
		slices.Sort(names)
		if want := []string{"tools/call echo", "tools/call echo", "tools/call log", "tools/list"}; !slices.Equal(names, want) {
			t.Errorf("request spans %q, want %q", names, want)
		}
		var attempts int64
		for _, n := range wantConnects {
			attempts += n
		}
		if int64(connects) != attempts {
			t.Errorf("%d connect spans, %d attempts", connects, attempts)
		}
	})
}

// TestTelemetryOffAllocatesNothing: with no provider set (the global ones, unset), a
// request through the call path allocates nothing for telemetry: as many allocations
// as the same request on a connection whose providers are the no-op ones. Both make
// the params' copy (CallTool makes it with or without telemetry) and the request's
// context, tied to its session's life (a cancelCtx and its cancel func, an AfterFunc
// and its stop func: see callPath); nothing more.
func TestTelemetryOffAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	stub := stubClient{res: &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hello"}}}}
	allocs := func(tweak func(*Options)) float64 {
		opts := Options{Logger: quietLogger(), dial: func(context.Context, transport.Config, transport.Options) (transport.Client, error) {
			return stub, nil
		}}
		if tweak != nil {
			tweak(&opts)
		}
		c, err := Open(transport.Config{Name: "stub", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}}, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		if err := c.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		if c.tel.enabled(ctx) {
			t.Fatal("telemetry is enabled with no provider set, or no-op ones")
		}
		p := &mcp.CallToolParams{Name: "echo", Arguments: benchArgs}
		return testing.AllocsPerRun(1000, func() {
			if _, err := c.CallTool(ctx, p); err != nil {
				t.Fatal(err)
			}
		})
	}
	off := allocs(nil)
	noops := allocs(func(o *Options) {
		o.MeterProvider, o.TracerProvider = metricnoop.NewMeterProvider(), tracenoop.NewTracerProvider()
	})
	if off > noops {
		t.Errorf("a call with no provider set allocates %v times, %v with no-op providers", off, noops)
	}
	const want = 1 + 4
	if noops > want {
		t.Errorf("a call allocates %v times, want %d at most", noops, want)
	}
}

// TestTransportAttrs: a span names the server's host and port, never the URL's path,
// query or credentials.
func TestTransportAttrs(t *testing.T) {
	for _, tc := range []struct {
		cfg  transport.Config
		want []attribute.KeyValue
	}{
		{transport.Config{Stdio: &transport.Stdio{Command: "x"}}, []attribute.KeyValue{attribute.String("network.transport", "pipe")}},
		{transport.Config{HTTP: &transport.HTTP{URL: "https://user:secret@example.com:8443/mcp?token=secret"}}, []attribute.KeyValue{
			attribute.String("network.transport", "tcp"), attribute.String("network.protocol.name", "http"),
			attribute.String("server.address", "example.com"), attribute.Int("server.port", 8443)}},
		{transport.Config{SSE: &transport.HTTP{URL: "http://[::1]/sse"}}, []attribute.KeyValue{
			attribute.String("network.transport", "tcp"), attribute.String("network.protocol.name", "http"),
			attribute.String("server.address", "::1")}},
	} {
		if got := transportAttrs(tc.cfg); !slices.Equal(got, tc.want) {
			t.Errorf("%+v: %v, want %v", tc.cfg, got, tc.want)
		}
	}
}
