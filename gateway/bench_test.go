package gateway_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/gateway"
	"github.com/mcpfsm/mcpfsm/internal/stats"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// benchSetup is a backend over streamable HTTP, and a gateway (served over streamable
// HTTP on loopback) whose only server it is: the direct path is one loopback hop, the
// gateway's two.
type benchSetup struct {
	direct, gateway *mcp.ClientSession
}

func newBenchSetup(b *testing.B, version string) benchSetup {
	b.Helper()
	// A client on 2026-07-28 gets it only from a stateless server: so the backend is
	// one, for the direct path and for the gateway's connection alike.
	backend := httptest.NewServer(testserver.NewHandler(testserver.Options{Stateless: version == ""}))
	b.Cleanup(backend.Close)
	p := mcpfsm.DefaultSpec().Defaults()
	p.KeepaliveInterval = 0
	cfg := &mcpfsm.Config{Servers: []mcpfsm.ServerConfig{{Name: "b", Policies: p, Transport: transport.Config{
		Name: "b", HTTP: &transport.HTTP{URL: backend.URL},
	}}}}
	g, err := gateway.New(cfg, gateway.Options{Logger: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	front := httptest.NewServer(g.Handler(gateway.HTTPOptions{}))
	b.Cleanup(func() {
		for ss := range g.Server().Sessions() {
			_ = ss.Close()
		}
		front.CloseClientConnections()
		front.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = g.Close(ctx)
	})
	connect := func(url string) *mcp.ClientSession {
		tr := &http.Transport{MaxIdleConnsPerHost: 128}
		c := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}})
		cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: tr}},
			&mcp.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cs.Close(); tr.CloseIdleConnections() })
		return cs
	}
	s := benchSetup{direct: connect(backend.URL), gateway: connect(front.URL)}
	deadline := time.Now().Add(waitFor)
	for {
		if _, err := s.gateway.CallTool(context.Background(), echoParams("b__echo")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("the gateway never served b__echo")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return s
}

func echoParams(name string) *mcp.CallToolParams {
	return &mcp.CallToolParams{Name: name, Arguments: map[string]any{"text": "hello"}}
}

func callEcho(b *testing.B, cs *mcp.ClientSession, name string) time.Duration {
	start := time.Now()
	res, err := cs.CallTool(context.Background(), echoParams(name))
	took := time.Since(start)
	if err != nil || res.IsError {
		b.Fatalf("%s: %v %v", name, err, res)
	}
	return took
}

func percentile(xs []time.Duration, q float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// BenchmarkGateway: a go-sdk client calling a tool of the backend over streamable HTTP
// (direct), and the same through the gateway over streamable HTTP (gateway), one call
// at a time; p50 and p99 of each. paired interleaves the two, one call of each in
// alternating order per op, and reports the median of gateway/direct over blocks of
// 50 pairs with its 95% confidence interval (the goal: ≤ 2.2; one more loopback hop
// costs about one call, so about 2.0 is the floor), and both paths' p50 and p99. The
// client is on 2025-11-25 (a session), as the backend is; 2026-07-28 runs the paired
// comparison with the go-sdk client's default protocol, stateless at the front.
func BenchmarkGateway(b *testing.B) {
	for _, mode := range []struct{ name, version string }{{"", "2025-11-25"}, {"2026-07-28/", ""}} {
		s := newBenchSetup(b, mode.version)
		for _, path := range []struct {
			name string
			cs   *mcp.ClientSession
			tool string
		}{{"direct", s.direct, "echo"}, {"gateway", s.gateway, "b__echo"}} {
			if mode.name != "" {
				continue
			}
			b.Run(path.name, func(b *testing.B) {
				var lat []time.Duration
				for b.Loop() {
					lat = append(lat, callEcho(b, path.cs, path.tool))
				}
				b.ReportMetric(float64(percentile(lat, 0.5).Microseconds()), "p50-µs")
				b.ReportMetric(float64(percentile(lat, 0.99).Microseconds()), "p99-µs")
			})
		}
		b.Run(mode.name+"paired", func(b *testing.B) {
			var direct, through []time.Duration
			var ratios []float64
			var bd, bg time.Duration
			i := 0
			for b.Loop() {
				var d, g time.Duration
				if i%2 == 0 {
					d, g = callEcho(b, s.direct, "echo"), callEcho(b, s.gateway, "b__echo")
				} else {
					g, d = callEcho(b, s.gateway, "b__echo"), callEcho(b, s.direct, "echo")
				}
				direct, through = append(direct, d), append(through, g)
				bd, bg = bd+d, bg+g
				if i++; i%50 == 0 {
					ratios = append(ratios, float64(bg)/float64(bd))
					bd, bg = 0, 0
				}
			}
			if len(ratios) > 0 {
				lo, hi := stats.MedianCI(ratios)
				b.ReportMetric(stats.Median(ratios), "gateway/direct")
				b.ReportMetric(lo, "ci-lo")
				b.ReportMetric(hi, "ci-hi")
			}
			b.ReportMetric(float64(percentile(direct, 0.5).Microseconds()), "direct-p50-µs")
			b.ReportMetric(float64(percentile(direct, 0.99).Microseconds()), "direct-p99-µs")
			b.ReportMetric(float64(percentile(through, 0.5).Microseconds()), "gateway-p50-µs")
			b.ReportMetric(float64(percentile(through, 0.99).Microseconds()), "gateway-p99-µs")
		})
	}
}

// BenchmarkGatewayIdleSessions: memory and goroutines per idle front session, with
// 1,000 sessions (2025-11-25, over streamable HTTP) open on the gateway, each having
// initialized, listed the tools and made one call, then left idle. The sessions are
// opened with plain HTTP requests (no client library, no standalone GET stream), so
// that what is measured is the gateway's: heap in use and goroutines, after a GC,
// less what they were before, over the sessions.
func BenchmarkGatewayIdleSessions(b *testing.B) {
	const n = 1000
	backend := httptest.NewServer(testserver.NewHandler(testserver.Options{}))
	defer backend.Close()
	p := mcpfsm.DefaultSpec().Defaults()
	p.KeepaliveInterval = 0
	g, err := gateway.New(&mcpfsm.Config{Servers: []mcpfsm.ServerConfig{{Name: "b", Policies: p, Transport: transport.Config{
		Name: "b", HTTP: &transport.HTTP{URL: backend.URL},
	}}}}, gateway.Options{Logger: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	front := httptest.NewServer(g.Handler(gateway.HTTPOptions{}))
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	hc := &http.Client{Transport: tr}
	defer func() {
		tr.CloseIdleConnections()
		for ss := range g.Server().Sessions() {
			_ = ss.Close()
		}
		front.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = g.Close(ctx)
	}()
	post := func(sid, body string) string {
		req, _ := http.NewRequest("POST", front.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
			req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		}
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 300 {
			b.Fatalf("%s: %s", resp.Status, data)
		}
		return resp.Header.Get("Mcp-Session-Id")
	}
	session := func() {
		sid := post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"idle","version":"1"}}}`)
		post(sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		post(sid, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
		post(sid, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"b__echo","arguments":{"text":"hi"}}}`)
	}
	session() // the backend is up, the tools listed, the pools warm
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		g0 := runtime.NumGoroutine()
		for range n {
			session()
		}
		tr.CloseIdleConnections()
		time.Sleep(100 * time.Millisecond) // the server's side of the closed connections ends
		runtime.GC()
		runtime.ReadMemStats(&after)
		g1 := runtime.NumGoroutine()
		b.ReportMetric(float64(int64(after.HeapInuse)-int64(before.HeapInuse))/n, "heap-B/session")
		b.ReportMetric(float64(g1-g0)/n, "goroutines/session")
		for ss := range g.Server().Sessions() {
			_ = ss.Close()
		}
	}
}
