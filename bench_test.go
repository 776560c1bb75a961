package mcpfsm

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/internal/stats"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// benchArgs are the arguments of the benchmarked call: echo of a short text.
var benchArgs = map[string]any{"text": "hello"}

// sdkSession connects a raw go-sdk client session to a fresh test server over the
// in-memory transport.
func sdkSession(b *testing.B) *mcp.ClientSession {
	b.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := testserver.New(testserver.Options{}).Connect(ctx, st, nil)
	if err != nil {
		b.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cs.Close(); ss.Wait() })
	return cs
}

// readyConn opens a Conn with the default lifecycle to a fresh test server over the
// in-memory transport and waits until it is ready.
func readyConn(b *testing.B) *Conn {
	b.Helper()
	c, err := Open(transport.Config{Name: "bench", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}},
		Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close(context.Background()) })
	if err := c.WaitReady(context.Background()); err != nil || c.State() != states.Ready {
		b.Fatalf("not ready: %v", err)
	}
	return c
}

// BenchmarkCallTool compares one tool call on a raw go-sdk session with the same call
// through a ready Conn, on the in-memory transport.
func BenchmarkCallTool(b *testing.B) {
	ctx := context.Background()
	b.Run("sdk", func(b *testing.B) {
		cs := sdkSession(b)
		b.ReportAllocs()
		cpu0 := cpuTime()
		for b.Loop() {
			if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: benchArgs}); err != nil {
				b.Fatal(err)
			}
		}
		reportCPU(b, cpu0)
	})
	b.Run("machine", func(b *testing.B) {
		c := readyConn(b)
		b.ReportAllocs()
		cpu0 := cpuTime()
		for b.Loop() {
			if _, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: benchArgs}); err != nil {
				b.Fatal(err)
			}
		}
		reportCPU(b, cpu0)
	})
}

// BenchmarkCallToolParallel is BenchmarkCallTool from 64 goroutines at once, on one
// session.
func BenchmarkCallToolParallel(b *testing.B) {
	ctx := context.Background()
	b.Run("sdk", func(b *testing.B) {
		cs := sdkSession(b)
		b.ReportAllocs()
		cpu0 := cpuTime()
		b.SetParallelism(64 / max(1, runtimeProcs()))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: benchArgs}); err != nil {
					b.Error(err)
					return
				}
			}
		})
		reportCPU(b, cpu0)
	})
	b.Run("machine", func(b *testing.B) {
		c := readyConn(b)
		b.ReportAllocs()
		cpu0 := cpuTime()
		b.SetParallelism(64 / max(1, runtimeProcs()))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: benchArgs}); err != nil {
					b.Error(err)
					return
				}
			}
		})
		reportCPU(b, cpu0)
	})
}

// reportCPU reports the CPU time the process spent per op since start (see cpuTime):
// cpu-ns/op, which other processes on a shared machine disturb far less than ns/op.
func reportCPU(b *testing.B, start time.Duration) {
	if b.N > 0 && start > 0 {
		b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
	}
}

// runtimeProcs is GOMAXPROCS, so that SetParallelism gives 64 goroutines in all.
func runtimeProcs() int { return runtime.GOMAXPROCS(0) }

// BenchmarkCallToolHTTP is BenchmarkCallTool over streamable HTTP on loopback: the same
// call on a raw go-sdk session over mcp.StreamableClientTransport, and through a ready
// Conn, to a test server on 127.0.0.1.
func BenchmarkCallToolHTTP(b *testing.B) {
	ctx := context.Background()
	b.Run("sdk", func(b *testing.B) {
		cs := sdkHTTPSession(b)
		b.ReportAllocs()
		cpu0 := cpuTime()
		for b.Loop() {
			if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: benchArgs}); err != nil {
				b.Fatal(err)
			}
		}
		reportCPU(b, cpu0)
	})
	b.Run("machine", func(b *testing.B) {
		c := readyHTTPConn(b)
		b.ReportAllocs()
		cpu0 := cpuTime()
		for b.Loop() {
			if _, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: benchArgs}); err != nil {
				b.Fatal(err)
			}
		}
		reportCPU(b, cpu0)
	})
}

// sdkHTTPSession connects a raw go-sdk client session to a fresh test server over
// streamable HTTP on loopback.
func sdkHTTPSession(b *testing.B) *mcp.ClientSession {
	b.Helper()
	h := testserver.StartHTTP(b, testserver.Options{})
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).
		Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: h.URL()}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cs.Close() })
	return cs
}

// readyHTTPConn opens a Conn with the default lifecycle to a fresh test server over
// streamable HTTP on loopback and waits until it is ready.
func readyHTTPConn(b *testing.B) *Conn {
	b.Helper()
	h := testserver.StartHTTP(b, testserver.Options{})
	c, err := Open(transport.Config{Name: "bench", HTTP: &transport.HTTP{URL: h.URL()}},
		Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close(context.Background()) })
	if err := c.WaitReady(context.Background()); err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkRestore measures what a new session's restore costs: the time from the
// end of its initialize (the session is dialed) to the moment calls move to it
// (replacing → retiring), over streamable HTTP on loopback, for a planned reconnect of
// a connection with a log level set and 0 or 100 resource subscriptions. It reports
// restore-ms, the median; one op is one reconnect.
func BenchmarkRestore(b *testing.B) {
	for _, subs := range []int{0, 100} {
		b.Run(fmt.Sprintf("subs=%d", subs), func(b *testing.B) {
			h := testserver.StartHTTP(b, testserver.Options{})
			var mu sync.Mutex
			var opened time.Time
			swapped := make(chan time.Duration, 1)
			c, err := Open(httpConfig(h), Options{
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
				onOpen: func(*session) { mu.Lock(); opened = time.Now(); mu.Unlock() },
				Observer: func(tr machine.Transition) {
					if tr.From == states.Replacing && tr.To == states.Retiring {
						mu.Lock()
						swapped <- tr.At.Sub(opened)
						mu.Unlock()
					}
				},
			})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { c.Close(context.Background()) })
			ctx := context.Background()
			if err := c.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "warning"}); err != nil {
				b.Fatal(err)
			}
			for i := range subs {
				if err := c.Subscribe(ctx, &mcp.SubscribeParams{URI: fmt.Sprintf("test://items/%d", i)}); err != nil {
					b.Fatal(err)
				}
			}
			var took []float64
			for b.Loop() {
				c.Reconnect()
				took = append(took, float64(<-swapped)/float64(time.Millisecond))
			}
			b.ReportMetric(stats.Median(took), "restore-ms")
			b.ReportMetric(0, "ns/op")
		})
	}
}
