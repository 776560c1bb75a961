package gateway_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/gateway"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// cancelBound is how soon a backend's handler must see its call cancelled once the
// front cancelled it or went away: generous, for a loaded machine.
const cancelBound = 5 * time.Second

// cancelBackends are the backends of the cancellation tests: the test server over
// stdio on 2025-11-25 and 2026-07-28, and over streamable HTTP, stateful (2025-11-25)
// and stateless (2026-07-28; its handlers end with their POST, as the 2026-07-28
// protocol has a cancel be: the go-sdk's server does that only when asked, with
// PropagateRequestCancellation).
func cancelBackends(t *testing.T) []mcpfsm.ServerConfig {
	t.Helper()
	h25 := httptest.NewServer(testserver.NewHandler(testserver.Options{}))
	t.Cleanup(h25.Close)
	srv26 := testserver.New(testserver.Options{})
	h26 := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv26 },
		&mcp.StreamableHTTPOptions{Stateless: true, PropagateRequestCancellation: true}))
	t.Cleanup(h26.Close)
	overHTTP := func(name, url string) mcpfsm.ServerConfig {
		return mcpfsm.ServerConfig{Name: name, Policies: quick(), Transport: transport.Config{Name: name, HTTP: &transport.HTTP{URL: url}}}
	}
	return []mcpfsm.ServerConfig{
		stdio(t, "s25", testserver.Options{ProtocolVersions: []string{"2025-11-25"}}),
		stdio(t, "s26", testserver.Options{}),
		overHTTP("h25", h25.URL),
		overHTTP("h26", h26.URL),
	}
}

// A cancelFront opens a front session of one kind, and returns it with what cuts
// it off (its client gone: the HTTP connections closed, the stdio front's stdin).
type cancelFront struct {
	name string
	open func(t *testing.T) (cs *mcp.ClientSession, gone func())
}

func cancelFronts(g *gateway.Gateway, url string) []cancelFront {
	overStdio := func(version string) func(t *testing.T) (*mcp.ClientSession, func()) {
		return func(t *testing.T) (*mcp.ClientSession, func()) {
			toServer, fromClient := io.Pipe()
			toClient, fromServer := io.Pipe()
			ctx, cancel := context.WithCancel(context.Background())
			ran := make(chan struct{})
			go func() { _ = g.Server().Run(ctx, transport.ServerStdio(toServer, fromServer)); close(ran) }()
			t.Cleanup(func() {
				_ = fromClient.Close()
				_ = toClient.Close()
				select {
				case <-ran:
				case <-time.After(waitFor):
					t.Error("the stdio front's Run did not return once its client was gone")
				}
				cancel()
			})
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "stdio-front", Version: "1"}, nil).Connect(callCtx(t),
				&mcp.IOTransport{Reader: toClient, Writer: fromClient}, &mcp.ClientSessionOptions{ProtocolVersion: version})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cs.Close() })
			return cs, func() { _ = fromClient.Close(); _ = toClient.Close() }
		}
	}
	overHTTP := func(version string) func(t *testing.T) (*mcp.ClientSession, func()) {
		return func(t *testing.T) (*mcp.ClientSession, func()) {
			conns := &trackConns{}
			hc := &http.Client{Transport: &http.Transport{DialContext: conns.dial}}
			return httpFront(t, url, version, hc), conns.closeAll
		}
	}
	return []cancelFront{
		{"stdio-2025-11-25", overStdio("2025-11-25")},
		{"stdio-2026-07-28", overStdio("2026-07-28")},
		{"http-2025-11-25", overHTTP("2025-11-25")},
		{"http-2026-07-28", overHTTP("2026-07-28")},
	}
}

// backendCount is a count of backend server's stats, read through the front session cs.
func backendCount(t *testing.T, cs *mcp.ClientSession, server, key string) int {
	t.Helper()
	res := call(t, cs, server+"__stats", nil)
	var out map[string]int
	if err := jsonUnmarshal(text(res), &out); err != nil {
		t.Fatalf("%s stats %q: %v", server, text(res), err)
	}
	return out[key]
}

// waitCount waits until a count of server's stats passes before, and returns how
// long that took; it fails the test past limit.
func waitCount(t *testing.T, cs *mcp.ClientSession, server, key string, before int, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for backendCount(t, cs, server, key) <= before {
		if time.Since(start) > limit {
			t.Fatalf("%s: %q still %d after %v", server, key, before, limit)
		}
		time.Sleep(5 * time.Millisecond) // polling the backend's counts: no event to await
	}
	return time.Since(start)
}

// TestGateway_CancelReachesTheBackend: for each front transport (stdio and
// streamable HTTP, each on 2025-11-25 and 2026-07-28: stateful and stateless) and
// each backend (stdio and HTTP, on 2025-11-25 and 2026-07-28), a call the front
// cancels (notifications/cancelled, or the abort of a 2026-07-28 POST) and a call
// whose front client goes away (its HTTP connections closed, the stdio front's
// stdin closed) ends the backend handler's context within cancelBound, and the
// front's call returns.
func TestGateway_CancelReachesTheBackend(t *testing.T) {
	g := start(t, config(cancelBackends(t)...), gateway.Options{})
	url := serveHTTP(t, g, gateway.HTTPOptions{})
	watcher := front(t, g, nil, "2025-11-25")
	waitTools(t, watcher, func(names []string) bool {
		return has("s25__hold")(names) && has("s26__hold")(names) && has("h25__hold")(names) && has("h26__hold")(names)
	})
	for _, f := range cancelFronts(g, url) {
		for _, server := range []string{"s25", "s26", "h25", "h26"} {
			for _, fault := range []string{"cancel", "gone"} {
				t.Run(f.name+"/"+server+"/"+fault, func(t *testing.T) {
					cs, gone := f.open(t)
					started := backendCount(t, watcher, server, "started held")
					ended := backendCount(t, watcher, server, "ended held")
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					errc := make(chan error, 1)
					go func() {
						_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: server + "__hold", Arguments: map[string]any{"ms": 600000}})
						errc <- err
					}()
					waitCount(t, watcher, server, "started held", started, waitFor)
					if fault == "cancel" {
						cancel()
					} else {
						gone()
					}
					took := waitCount(t, watcher, server, "ended held", ended, cancelBound)
					select {
					case err := <-errc:
						if err == nil {
							t.Error("the front's call answered")
						}
					case <-time.After(waitFor):
						t.Fatal("the front's call did not return")
					}
					t.Logf("the backend's handler ended %v after the %s", took.Round(time.Millisecond), fault)
				})
			}
		}
	}
}

// waitIdle waits until no hold call of server still runs: every one started
// answered or saw its context end.
func waitIdle(t *testing.T, cs *mcp.ClientSession, server string) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		res := call(t, cs, server+"__stats", nil)
		var st map[string]int
		if err := jsonUnmarshal(text(res), &st); err != nil {
			t.Fatal(err)
		}
		if st["started held"] == st["ended held"]+st["answered held"] {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: hold calls still running: %v", server, st)
		}
		time.Sleep(5 * time.Millisecond) // polling the backend's counts: no event to await
	}
}

// TestGateway_CancelRacingTheAnswer: calls cancelled (by their deadline) about when
// their backend answers them, from every front transport to every backend: each
// returns by its deadline (with its answer or its cancellation), no backend handler
// is left running, the gateway's books of calls and requests in flight are back to
// none, and the calls cancelled on stdio backends, which answer them, no longer
// count for attribution.
func TestGateway_CancelRacingTheAnswer(t *testing.T) {
	defer gateway.SetCutLinger(time.Hour)()
	g := start(t, config(cancelBackends(t)...), gateway.Options{})
	url := serveHTTP(t, g, gateway.HTTPOptions{})
	watcher := front(t, g, nil, "2025-11-25")
	servers := []string{"s25", "s26", "h25", "h26"}
	waitTools(t, watcher, func(names []string) bool {
		return has("s25__hold")(names) && has("s26__hold")(names) && has("h25__hold")(names) && has("h26__hold")(names)
	})
	const n = 24
	for _, f := range cancelFronts(g, url) {
		t.Run(f.name, func(t *testing.T) {
			cs, _ := f.open(t)
			errs := make(chan error, n*len(servers))
			for i := range n {
				for _, server := range servers {
					go func() {
						// The answer at i%6 ms, the cancel at (i*5)%7 ms.
						ctx, cancel := context.WithTimeout(context.Background(), time.Duration((i*5)%7)*time.Millisecond)
						defer cancel()
						_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: server + "__hold", Arguments: map[string]any{"ms": i % 6}})
						if err != nil && ctx.Err() == nil {
							errs <- err
							return
						}
						errs <- nil
					}()
				}
			}
			deadline := time.After(waitFor)
			for range n * len(servers) {
				select {
				case err := <-errs:
					if err != nil {
						t.Errorf("a call failed before its deadline: %v", err)
					}
				case <-deadline:
					t.Fatal("calls did not return")
				}
			}
			for _, server := range servers {
				waitIdle(t, watcher, server)
			}
			deadlineKept := time.Now().Add(waitFor)
			for {
				s := g.Sizes()
				if s["calls"] == 0 && s["inflight"] == 0 && s["cut:s25"] == 0 && s["cut:s26"] == 0 {
					break
				}
				if time.Now().After(deadlineKept) {
					t.Fatalf("after the racing cancels the gateway keeps %v", s)
				}
				time.Sleep(10 * time.Millisecond) // polling the gateway's books: no event to await
			}
		})
	}
}
