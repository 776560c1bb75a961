package faults_test

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestHugeHandshakeError (issue 17, item 6): a server that fails every handshake
// with a 15 MB error message, through mcpfsm.Open. The failures count: the breaker
// opens by the third, and the connection then tries once per cooldown. Every
// transition's text and every log record quotes at most MaxErrorText bytes of the
// message, while a call's error still wraps the server's whole error. It measures,
// for docs/reliability.md, the peak heap, the heap still live once the breaker is
// open, the history's share of it, and Close's time.
func TestHugeHandshakeError(t *testing.T) {
	base := takeBaseline(t)
	t.Cleanup(func() { base.check(t) })
	huge := strings.Repeat("e", hugeMessage)
	srv := mcp.NewServer(&mcp.Implementation{Name: "verbose", Version: "1"}, nil)
	srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "initialize" || method == "server/discover" {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: huge}
			}
			return next(ctx, method, req)
		}
	})
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc // the message and the server are in it
	pol := secretPolicies()
	// Encoding and decoding 15 MB takes seconds under the race detector: the
	// handshake must fail on its error, not on the connect timeout.
	pol.ConnectTimeout = 30 * time.Second
	const maxText = transport.MaxErrorText + 1<<10 // the message's share, and the rest of the line

	var mu sync.Mutex
	var longest, opened, attempts int
	var firstOpen time.Time
	logs := &longestRecord{}
	runtime.GC()
	heap := heapPeak()
	defer heap.stop() // if the test ends early
	start := time.Now()
	c, err := mcpfsm.Open(transport.Config{Name: "verbose", InMemory: &transport.InMemory{Server: srv}}, mcpfsm.Options{
		Policies: pol, History: machine.DefaultHistory, Logger: slog.New(logs),
		Observer: func(tr machine.Transition) {
			n := len(tr.String())
			mu.Lock()
			defer mu.Unlock()
			longest = max(longest, n)
			if tr.To == states.Connecting || tr.To == states.HalfOpen {
				attempts++
			}
			if tr.To == states.BreakerOpen {
				opened++
				if firstOpen.IsZero() {
					firstOpen = tr.At
				}
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(context.Background()) }()
	// Until the breaker opens, or one attempt more than it allows has begun.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var tries int
	for {
		mu.Lock()
		var open bool
		tries, open = attempts, opened > 0
		mu.Unlock()
		if open {
			break
		}
		if tries > pol.BreakerThreshold {
			t.Fatalf("%d connect attempts and the breaker is not open (state %s): the failures did not count\n%v", tries, c.State(), c.History())
		}
		if ctx.Err() != nil {
			t.Fatalf("the breaker never opened: %d attempts (state %s)", tries, c.State())
		}
		time.Sleep(10 * time.Millisecond)
	}
	peak := heap.stop()
	if tries > pol.BreakerThreshold {
		t.Errorf("%d connect attempts before the breaker opened, want %d: the failures did not count", tries, pol.BreakerThreshold)
	}

	// A call fails fast, naming the failure, and wraps the server's whole error.
	_, callErr := c.CallTool(ctx, &mcp.CallToolParams{Name: "echo"})
	var je *jsonrpc.Error
	if !errors.Is(callErr, mcpfsm.ErrUnavailable) || !errors.As(callErr, &je) || len(je.Message) != hugeMessage {
		t.Errorf("a call with the breaker open = %.300v; want ErrUnavailable wrapping the server's whole error", callErr)
	}
	if n := len(callErr.Error()); n > 2*maxText {
		t.Errorf("a call's error text is %d bytes, want at most about %d", n, 2*maxText)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	live := ms.HeapAlloc - min(before, ms.HeapAlloc) // what the connection holds

	closing := time.Now()
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	if err := c.Close(cctx); err != nil {
		t.Errorf("Close: %v", err)
	}
	closeTook := time.Since(closing)
	hist := len(c.History())
	runtime.GC()
	runtime.ReadMemStats(&ms)
	closedLive := ms.HeapAlloc - min(before, ms.HeapAlloc) // c still holds its history

	mu.Lock()
	defer mu.Unlock()
	if longest > maxText {
		t.Errorf("a transition's text is %d bytes, want at most %d", longest, maxText)
	}
	if n := logs.max(); n > 2*maxText {
		t.Errorf("a log record is %d bytes, want at most about %d", n, 2*maxText)
	}
	// What the connection keeps: the last failure whole (calls' errors wrap it), and
	// a history of capped text; not the server's whole error for every failure.
	if closedLive > 5*hugeMessage/2 {
		t.Errorf("the closed connection holds %d MiB after %d failures of a %d MiB error: its history keeps each whole", closedLive>>20, tries, hugeMessage>>20)
	}
	t.Logf("a %d MiB handshake error: breaker open after %d attempts in %v; peak heap %d MiB; the connection holds %d MiB with the breaker open, %d MiB once closed (%d transitions in its history, %.1f MiB per failed attempt); longest transition %d bytes, log record %d bytes, call error %d bytes; Close %v",
		hugeMessage>>20, tries, firstOpen.Sub(start).Round(time.Millisecond), (peak-min(before, peak))>>20, live>>20, closedLive>>20, hist,
		float64(closedLive)/float64(1<<20)/float64(tries), longest, logs.max(), len(callErr.Error()), closeTook.Round(time.Millisecond))
	runtime.KeepAlive(c)
}

// longestRecord is a slog handler that keeps the length of the longest record,
// rendered as text.
type longestRecord struct {
	mu      sync.Mutex
	longest int
}

func (h *longestRecord) Enabled(context.Context, slog.Level) bool { return true }

func (h *longestRecord) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	_ = slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelDebug}).Handle(context.Background(), r)
	h.mu.Lock()
	h.longest = max(h.longest, b.Len())
	h.mu.Unlock()
	return nil
}

func (h *longestRecord) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *longestRecord) WithGroup(string) slog.Handler      { return h }

func (h *longestRecord) max() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.longest
}

// A heapSampler samples the live heap until stopped.
type heapSampler struct {
	done chan struct{}
	peak chan uint64
	once sync.Once
	most uint64
}

// heapPeak starts sampling the heap every 5ms.
func heapPeak() *heapSampler {
	s := &heapSampler{done: make(chan struct{}), peak: make(chan uint64, 1)}
	go func() {
		var most uint64
		var ms runtime.MemStats
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			runtime.ReadMemStats(&ms)
			most = max(most, ms.HeapAlloc)
			select {
			case <-tick.C:
			case <-s.done:
				s.peak <- most
				return
			}
		}
	}()
	return s
}

// stop ends the sampling and returns the highest sample. It may be called again.
func (s *heapSampler) stop() uint64 {
	s.once.Do(func() {
		close(s.done)
		s.most = <-s.peak
	})
	return s.most
}
