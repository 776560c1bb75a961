package mcpfsm

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/internal/stats"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkCallToolPaired measures the ratio of BenchmarkCallTool,
// BenchmarkCallToolParallel and BenchmarkCallToolHTTP (machine/sdk) with the two paths
// interleaved in time, so that a shared machine's drift and its neighbours' bursts
// fall on both alike: one op is a pair of phases, one calling through a ready Conn and
// one on a raw go-sdk session (to servers of their own), each pairPhase long, in
// alternating order; a phase ends when its callers have finished their calls. It
// reports machine/sdk, the median over the pairs of the ratio of time per call, and
// ci-lo and ci-hi, a 95% confidence interval of that median; run it with
// -benchtime=Nx for N pairs.
func BenchmarkCallToolPaired(b *testing.B) {
	ctx := context.Background()
	run := func(b *testing.B, cs *mcp.ClientSession, c *Conn, callers int, phase time.Duration) {
		paired(b, func() error {
			_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: benchArgs})
			return err
		}, func() error {
			_, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: benchArgs})
			return err
		}, callers, phase)
	}
	b.Run("inmemory", func(b *testing.B) {
		run(b, sdkSession(b), readyConn(b), 1, 100*time.Millisecond)
	})
	b.Run("parallel", func(b *testing.B) {
		run(b, sdkSession(b), readyConn(b), 64, 250*time.Millisecond)
	})
	b.Run("http", func(b *testing.B) {
		cs, c := sdkHTTPSession(b), readyHTTPConn(b)
		run(b, cs, c, 1, 100*time.Millisecond)
	})
}

// BenchmarkReadResourcePaired is BenchmarkCallToolPaired for resources/read (of a
// templated resource), in memory and over streamable HTTP.
func BenchmarkReadResourcePaired(b *testing.B) {
	ctx := context.Background()
	params := func() *mcp.ReadResourceParams { return &mcp.ReadResourceParams{URI: "test://items/42"} }
	run := func(b *testing.B, cs *mcp.ClientSession, c *Conn) {
		paired(b, func() error {
			_, err := cs.ReadResource(ctx, params())
			return err
		}, func() error {
			_, err := c.ReadResource(ctx, params())
			return err
		}, 1, 100*time.Millisecond)
	}
	b.Run("inmemory", func(b *testing.B) { run(b, sdkSession(b), readyConn(b)) })
	b.Run("http", func(b *testing.B) { run(b, sdkHTTPSession(b), readyHTTPConn(b)) })
}

// BenchmarkGetPromptPaired is BenchmarkCallToolPaired for prompts/get, in memory and
// over streamable HTTP.
func BenchmarkGetPromptPaired(b *testing.B) {
	ctx := context.Background()
	params := func() *mcp.GetPromptParams {
		return &mcp.GetPromptParams{Name: testserver.PromptGreet, Arguments: map[string]string{"name": "bob"}}
	}
	run := func(b *testing.B, cs *mcp.ClientSession, c *Conn) {
		paired(b, func() error {
			_, err := cs.GetPrompt(ctx, params())
			return err
		}, func() error {
			_, err := c.GetPrompt(ctx, params())
			return err
		}, 1, 100*time.Millisecond)
	}
	b.Run("inmemory", func(b *testing.B) { run(b, sdkSession(b), readyConn(b)) })
	b.Run("http", func(b *testing.B) { run(b, sdkHTTPSession(b), readyHTTPConn(b)) })
}

// paired times sdk and ours in alternating phases, one pair per op, and reports
// machine/sdk, the median of the pairs' ratios of time per request, with ci-lo and
// ci-hi, a 95% confidence interval of that median.
func paired(b *testing.B, sdk, ours func() error, callers int, phase time.Duration) {
	var ratios []float64
	i := 0
	for b.Loop() {
		var perSDK, perOurs float64
		if i%2 == 0 {
			perSDK, perOurs = timePhase(b, sdk, callers, phase), timePhase(b, ours, callers, phase)
		} else {
			perOurs, perSDK = timePhase(b, ours, callers, phase), timePhase(b, sdk, callers, phase)
		}
		ratios = append(ratios, perOurs/perSDK)
		i++
	}
	if testing.Verbose() {
		b.Logf("ratios: %.3f", ratios)
	}
	lo, hi := stats.MedianCI(ratios)
	b.ReportMetric(stats.Median(ratios), "machine/sdk")
	b.ReportMetric(lo, "ci-lo")
	b.ReportMetric(hi, "ci-hi")
	b.ReportMetric(0, "ns/op")
}

// timePhase runs call from callers goroutines for about d, and returns the time per
// call: the phase's length, until the last caller finished, over the calls made.
func timePhase(b *testing.B, call func() error, callers int, d time.Duration) float64 {
	var n atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(d)
	for range callers {
		wg.Go(func() {
			for time.Now().Before(end) {
				if err := call(); err != nil {
					b.Error(err)
					return
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	return float64(time.Since(start)) / float64(max(1, n.Load()))
}

// stubClient is a session that answers every call at once with the same result.
type stubClient struct{ res *mcp.CallToolResult }

// stubParams keeps the params of the last call, as a session that sends them does.
var stubParams atomic.Pointer[mcp.CallToolParams]

func (s stubClient) CallTool(_ context.Context, p *mcp.CallToolParams) (*mcp.CallToolResult, error) {
	stubParams.Store(p)
	return s.res, nil
}
func (s stubClient) ListTools(context.Context) ([]*mcp.Tool, error) {
	return []*mcp.Tool{{Name: "echo"}}, nil
}
func (s stubClient) Request(ctx context.Context, _, _ string, f func(context.Context, *mcp.ClientSession) error) error {
	return f(ctx, nil)
}
func (s stubClient) Subscribe(context.Context, string) error   { return nil }
func (s stubClient) Unsubscribe(context.Context, string) error { return nil }
func (s stubClient) InitializeResult() *mcp.InitializeResult   { return &mcp.InitializeResult{} }
func (s stubClient) ID() string                                { return "" }
func (s stubClient) Probe(context.Context) error               { return nil }
func (s stubClient) Close(context.Context) error               { return nil }

// BenchmarkCallOverhead isolates what a call through a Conn costs beyond the session's
// own call: the same call on a stub session that answers at once, made directly
// (direct) and through a ready Conn (conn). conn's ns/op less direct's is the Conn's
// overhead per call (the session is acquired and released, the params built); the end
// to end ratios of BenchmarkCallTool cannot resolve it from the noise of a shared
// machine. What package transport adds under the Conn is measured in its own
// benchmarks (transport.BenchmarkRoundTripOverhead for HTTP).
func BenchmarkCallOverhead(b *testing.B) {
	ctx := context.Background()
	stub := stubClient{res: &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hello"}}}}
	b.Run("direct", func(b *testing.B) {
		var s transport.Client = stub
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: benchArgs}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("conn", func(b *testing.B) {
		c, err := Open(transport.Config{Name: "stub", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}},
			Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), dial: func(context.Context, transport.Config, transport.Options) (transport.Client, error) {
				return stub, nil
			}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close(context.Background()) })
		if err := c.WaitReady(ctx); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: benchArgs}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
