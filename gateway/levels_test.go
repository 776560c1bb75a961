package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/gateway"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// older is a test server on protocol 2025-11-25 only, served in process: it takes a
// log level by logging/setLevel alone, and ignores the one in a request's _meta.
func older(name string) mcpfsm.ServerConfig {
	return inMemory(name, testserver.Options{ProtocolVersions: []string{"2025-11-25"}})
}

// collect returns a logging handler that sends each message's data on a channel.
func collect() (func(context.Context, *mcp.LoggingMessageRequest), chan string) {
	logs := make(chan string, 64)
	return func(_ context.Context, req *mcp.LoggingMessageRequest) { logs <- fmt.Sprint(req.Params.Data) }, logs
}

// logAt has backend a log text at level, in a request asking for the messages at
// asked (none if ""), and returns what the backend says it did (sent, filtered).
func logAt(t *testing.T, cs *mcp.ClientSession, level, text_, asked string) string {
	t.Helper()
	var meta mcp.Meta
	if asked != "" {
		meta = mcp.Meta{mcp.MetaKeyLogLevel: asked}
	}
	res, err := cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: "a__log", Arguments: map[string]any{"level": level, "text": text_}, Meta: meta})
	if err != nil {
		t.Fatal(err)
	}
	return text(res)
}

// backendLevels are the levels of the logging/setLevel backend a received.
func backendLevels(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	st, err := testserver.State(call(t, cs, "a__state", nil))
	if err != nil {
		t.Fatal(err)
	}
	return st.LogLevels
}

// TestGateway_LevelOfANewerRequestOnAnOlderBackend: a front client on 2026-07-28
// (over streamable HTTP: no session, no logging/setLevel) asks for debug messages in
// its request's _meta; the backend, on 2025-11-25, takes a level only by
// logging/setLevel. It is set to debug before the call goes to it, and the call's
// debug message reaches the client (it did not: the backend kept the level it had,
// none, and filtered it). A request of the client asking for error only does not get
// the debug message the backend now sends; and requests that keep asking for debug
// cost the backend no more logging/setLevel.
func TestGateway_LevelOfANewerRequestOnAnOlderBackend(t *testing.T) {
	g := start(t, config(older("a")), gateway.Options{})
	url := serveHTTP(t, g, gateway.HTTPOptions{})
	handler, logs := collect()
	cs := httpFrontWith(t, url, "2026-07-28", nil, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}, LoggingMessageHandler: handler})
	waitTools(t, cs, has("a__log"))
	await := func(want string) {
		t.Helper()
		select {
		case got := <-logs:
			if got != want {
				t.Fatalf("the front got %q, want %q", got, want)
			}
		case <-time.After(waitFor):
			t.Fatalf("%q did not reach the front", want)
		}
	}
	if got := logAt(t, cs, "debug", "first", "debug"); got != "sent" {
		t.Fatalf("a debug message in a request asking for debug: the backend %s it", got)
	}
	await("first")
	if got := logAt(t, cs, "debug", "not for error", "error"); got != "sent" {
		t.Errorf("a debug message in a request asking for error: the backend %s it (its level is debug now)", got)
	}
	for i := range 20 {
		if got := logAt(t, cs, "debug", fmt.Sprint("again ", i), "debug"); got != "sent" {
			t.Fatalf("debug message %d: the backend %s it", i, got)
		}
		await(fmt.Sprint("again ", i)) // and not "not for error", which came before
	}
	if got := backendLevels(t, cs); !slices.Equal(got, []string{"debug"}) {
		t.Errorf("the backend was set to %v, want [debug] once", got)
	}
}

// bubble runs f in a synctest bubble with a gateway of cfg and a front client on
// 2026-07-28 in memory (its log messages on the channel), closed before the bubble
// ends.
func bubble(t *testing.T, cfg *mcpfsm.Config, f func(t *testing.T, g *gateway.Gateway, cs *mcp.ClientSession, logs chan string)) {
	synctest.Test(t, func(t *testing.T) {
		g := start(t, cfg, gateway.Options{SweepInterval: 10 * time.Second})
		handler, logs := collect()
		cs := front(t, g, &mcp.ClientOptions{LoggingMessageHandler: handler}, "2026-07-28")
		waitTools(t, cs, has("a__log"))
		f(t, g, cs, logs)
	})
}

// TestGateway_BridgedLevelForgotten: the level 2026-07-28 requests asked of a
// 2025-11-25 backend is kept while they keep asking it (no logging/setLevel for each),
// and five minutes after the last, the backend is set back to the level the front
// sessions asked for; a request asking again sets it again.
func TestGateway_BridgedLevelForgotten(t *testing.T) {
	bubble(t, config(older("a")), func(t *testing.T, g *gateway.Gateway, cs *mcp.ClientSession, _ chan string) {
		old := front(t, g, nil, "2025-11-25")
		if err := old.SetLoggingLevel(callCtx(t), &mcp.SetLoggingLevelParams{Level: "error"}); err != nil {
			t.Fatal(err)
		}
		if got := logAt(t, cs, "info", "x", "info"); got != "sent" {
			t.Fatalf("an info message in a request asking for info: the backend %s it", got)
		}
		for range 10 { // four minutes of requests asking for info
			time.Sleep(24 * time.Second)
			if got := logAt(t, cs, "info", "x", "info"); got != "sent" {
				t.Fatalf("an info message in a request asking for info, later: the backend %s it", got)
			}
		}
		if got := backendLevels(t, cs); !slices.Equal(got, []string{"error", "info"}) {
			t.Fatalf("the backend was set to %v, want [error info]", got)
		}
		time.Sleep(5*time.Minute + 10*time.Second) // asked no more: forgotten at a sweep
		synctest.Wait()
		if got := backendLevels(t, cs); !slices.Equal(got, []string{"error", "info", "error"}) {
			t.Fatalf("five minutes after the last request asking for info, the backend was set to %v, want [error info error]", got)
		}
		if got := logAt(t, cs, "info", "x", ""); got != "filtered" {
			t.Errorf("an info message, the level forgotten: the backend %s it", got)
		}
		if got := logAt(t, cs, "debug", "x", "debug"); got != "sent" {
			t.Errorf("a debug message in a request asking for debug, after: the backend %s it", got)
		}
	})
}

// TestGateway_BridgedLevelLeftWithoutFrontLevel: with no front session asking for a
// level, a level 2026-07-28 requests no longer ask is left as it is on the backend
// (the front lets none of its messages through but to a request asking for them):
// no logging/setLevel then, and none when a request asks for it again.
func TestGateway_BridgedLevelLeftWithoutFrontLevel(t *testing.T) {
	bubble(t, config(older("a")), func(t *testing.T, g *gateway.Gateway, cs *mcp.ClientSession, logs chan string) {
		if got := logAt(t, cs, "debug", "first", "debug"); got != "sent" {
			t.Fatalf("a debug message in a request asking for debug: the backend %s it", got)
		}
		time.Sleep(6 * time.Minute)
		synctest.Wait()
		if got := logAt(t, cs, "debug", "quiet", ""); got != "sent" {
			t.Errorf("a debug message in a request asking for none, later: the backend %s it", got)
		}
		if got := logAt(t, cs, "debug", "again", "debug"); got != "sent" {
			t.Errorf("a debug message in a request asking for debug, later: the backend %s it", got)
		}
		if got := backendLevels(t, cs); !slices.Equal(got, []string{"debug"}) {
			t.Errorf("the backend was set to %v, want [debug] once", got)
		}
		for _, want := range []string{"first", "again"} { // not "quiet": its request asked for none
			if got := <-logs; got != want {
				t.Errorf("the front got %q, want %q", got, want)
			}
		}
	})
}

// TestGateway_BridgedLevelNotTaken: a 2025-11-25 backend that refuses
// logging/setLevel, or does not answer it, neither fails a 2026-07-28 request asking
// for a level nor holds it past a short wait; and it is not asked again for each
// request.
func TestGateway_BridgedLevelNotTaken(t *testing.T) {
	for _, answer := range []string{"refuses", "does not answer"} {
		t.Run(answer, func(t *testing.T) {
			var asked atomic.Int32
			s := testserver.New(testserver.Options{ProtocolVersions: []string{"2025-11-25"}})
			s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
				return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
					if method != "logging/setLevel" {
						return next(ctx, method, req)
					}
					asked.Add(1)
					if answer == "refuses" {
						return nil, errors.New("no levels here")
					}
					<-ctx.Done()
					return nil, ctx.Err()
				}
			})
			sc := mcpfsm.ServerConfig{Name: "a", Policies: quick(), Transport: transport.Config{Name: "a", InMemory: &transport.InMemory{Server: s}}}
			bubble(t, config(sc), func(t *testing.T, g *gateway.Gateway, cs *mcp.ClientSession, _ chan string) {
				start := time.Now()
				for i := range 5 {
					if got := logAt(t, cs, "debug", "x", "debug"); got != "filtered" {
						t.Fatalf("request %d: the backend %s the message", i, got)
					}
				}
				// The first waits up to 2s for the backend's answer; the others
				// find it asked already, and wait no more than that.
				if took := time.Since(start); took > 2*time.Second {
					t.Errorf("5 requests took %v", took)
				}
				if n := asked.Load(); n != 1 {
					t.Errorf("the backend was asked %d times for a level, want once", n)
				}
			})
		})
	}
}

// TestGateway_BridgedLevelsConcurrent: many 2026-07-28 requests at once, asking for
// levels of all kinds of a 2025-11-25 backend, each get the messages they ask for and
// the backend is set a few times, not once per request.
func TestGateway_BridgedLevelsConcurrent(t *testing.T) {
	g := start(t, config(older("a")), gateway.Options{})
	cs := front(t, g, nil, "2026-07-28")
	waitTools(t, cs, has("a__log"))
	levels := []string{"error", "warning", "info", "debug"}
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			lv := levels[i%len(levels)]
			if got := logAt(t, cs, lv, "x", lv); got != "sent" {
				t.Errorf("a %s message in a request asking for %s: the backend %s it", lv, lv, got)
			}
		})
	}
	wg.Wait()
	if got := backendLevels(t, cs); len(got) > len(levels) {
		t.Errorf("the backend was set %d times (%v)", len(got), got)
	}
}

// TestGateway_BridgedLevelAcrossReload: a reload that puts another 2025-11-25 server
// behind a backend's name (a new session of its connection) gives it the level
// 2026-07-28 requests asked lately, before any request asks it again.
func TestGateway_BridgedLevelAcrossReload(t *testing.T) {
	g := start(t, config(older("a")), gateway.Options{})
	cs := front(t, g, nil, "2026-07-28")
	waitTools(t, cs, has("a__log"))
	if got := logAt(t, cs, "debug", "x", "debug"); got != "sent" {
		t.Fatalf("a debug message in a request asking for debug: the backend %s it", got)
	}
	res, err := g.Reload(callCtx(t), config(older("a")))
	if err != nil || len(res.Reconnected) != 1 {
		t.Fatalf("reload: %+v, %v", res, err)
	}
	waitTools(t, cs, has("a__log"))
	deadline := time.Now().Add(waitFor)
	for {
		got := backendLevels(t, cs)
		if slices.Equal(got, []string{"debug"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new backend was set to %v, want [debug]", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := logAt(t, cs, "debug", "x", ""); got != "sent" {
		t.Errorf("a debug message on the new backend: %s", got)
	}

	// Another lifecycle: a connection of its own, which the gateway gives the level.
	spec, err := mcpfsm.LoadSpec("other.yaml", mcpfsm.DefaultSpecYAML())
	if err != nil {
		t.Fatal(err)
	}
	sc := older("a")
	sc.Spec, sc.SpecFile = spec, "other.yaml"
	before := g.Manager().Conn("a")
	if _, err := g.Reload(callCtx(t), config(sc)); err != nil {
		t.Fatal(err)
	}
	if g.Manager().Conn("a") == before {
		t.Fatal("the reload kept the connection")
	}
	for deadline := time.Now().Add(waitFor); ; time.Sleep(10 * time.Millisecond) {
		var got []string
		if res := call(t, cs, "a__state", nil); !res.IsError { // the new one may not be up yet
			st, err := testserver.State(res)
			if err != nil {
				t.Fatal(err)
			}
			got = st.LogLevels
		}
		if len(got) > 0 && got[len(got)-1] == "debug" { // the connection may inherit it too
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the backend of the new connection was set to %v, want debug", got)
		}
	}
}
