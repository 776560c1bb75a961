package mcpfsm

import (
	"context"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// sdkMeter is a real SDK meter provider with a manual reader, as an application that
// exports metrics has (the reader is read now and then, not on every request).
func sdkMeter() metric.MeterProvider {
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
}

// openObserved opens a Conn to cfg with the given providers and waits until it is
// ready.
func openObserved(b *testing.B, cfg transport.Config, mp metric.MeterProvider, tp trace.TracerProvider, dial transport.Dialer) *Conn {
	b.Helper()
	c, err := Open(cfg, Options{Logger: quietLogger(), MeterProvider: mp, TracerProvider: tp, dial: dial})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close(context.Background()) })
	if err := c.WaitReady(context.Background()); err != nil {
		b.Fatal(err)
	}
	return c
}

func memConfig() transport.Config {
	return transport.Config{Name: "bench", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}}
}

// BenchmarkCallOverheadOTel is BenchmarkCallOverhead's conn (a call through a Conn on
// a stub session that answers at once) with telemetry off (no provider set: the
// global ones, unset), with an SDK meter provider (metrics), and with an SDK tracer
// provider that records every span (traces). off must allocate no more than
// BenchmarkCallOverhead/conn; metrics less off is what metrics cost a request.
func BenchmarkCallOverheadOTel(b *testing.B) {
	ctx := context.Background()
	stub := stubClient{res: &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hello"}}}}
	dial := func(context.Context, transport.Config, transport.Options) (transport.Client, error) { return stub, nil }
	for _, tc := range []struct {
		name string
		mp   metric.MeterProvider
		tp   trace.TracerProvider
	}{
		{"off", nil, nil},
		{"metrics", sdkMeter(), nil},
		{"traces", nil, sdktrace.NewTracerProvider()},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c := openObserved(b, memConfig(), tc.mp, tc.tp, dial)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: benchArgs}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCallToolPairedOTel is BenchmarkCallToolPaired with metrics on: the Conn
// records to a real SDK meter provider (with a manual reader), and machine/sdk is
// still its ratio to a raw go-sdk session. onoff pairs a Conn with metrics against
// one without, in memory: its machine/sdk is metrics-on over metrics-off, the
// overhead itself.
func BenchmarkCallToolPairedOTel(b *testing.B) {
	ctx := context.Background()
	call := func(c *Conn) func() error {
		return func() error {
			_, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: benchArgs})
			return err
		}
	}
	raw := func(cs *mcp.ClientSession) func() error {
		return func() error {
			_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: benchArgs})
			return err
		}
	}
	b.Run("inmemory", func(b *testing.B) {
		paired(b, raw(sdkSession(b)), call(openObserved(b, memConfig(), sdkMeter(), nil, nil)), 1, 100*time.Millisecond)
	})
	b.Run("parallel", func(b *testing.B) {
		paired(b, raw(sdkSession(b)), call(openObserved(b, memConfig(), sdkMeter(), nil, nil)), 64, 250*time.Millisecond)
	})
	b.Run("http", func(b *testing.B) {
		h := testserver.StartHTTP(b, testserver.Options{})
		cs := sdkHTTPSession(b)
		c := openObserved(b, transport.Config{Name: "bench", HTTP: &transport.HTTP{URL: h.URL()}}, sdkMeter(), nil, nil)
		paired(b, raw(cs), call(c), 1, 100*time.Millisecond)
	})
	b.Run("onoff", func(b *testing.B) {
		off := openObserved(b, memConfig(), nil, nil, nil)
		on := openObserved(b, memConfig(), sdkMeter(), nil, nil)
		paired(b, call(off), call(on), 1, 100*time.Millisecond)
	})
}
