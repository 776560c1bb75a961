package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/gateway"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// waitUnion waits until the backend a has been given roots of the union.
func waitUnion(t *testing.T, g *gateway.Gateway, uri string) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		for _, r := range g.Manager().Conn("a").Roots() {
			if r.URI == uri {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the backends were given %v; want %s among them", g.Manager().Conn("a").Roots(), uri)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestGateway_RootsOfAFrontThatFails: a front client that serves roots is asked for
// them during its call, and does not answer (its roots/list fails on 2025-11-25, its
// retry leaves the input request unanswered on 2026-07-28). The backend got the union
// of the other front sessions' roots instead, as if the call were outside any call: a
// filesystem server scoping its access by roots gave this client the others'
// directories. The backend's roots/list now fails, with the front's failure.
func TestGateway_RootsOfAFrontThatFails(t *testing.T) {
	for _, backend := range []string{"2025-11-25", ""} {
		for _, failing := range []string{"2025-11-25", "2026-07-28"} {
			t.Run(fmt.Sprintf("backend %q, failing front %s", backend, failing), func(t *testing.T) {
				s := inMemory("a", testserver.Options{})
				s.Transport.ProtocolVersion = backend
				g := start(t, config(s), gateway.Options{})
				other := mcp.NewClient(&mcp.Implementation{Name: "other", Version: "1"}, &mcp.ClientOptions{
					Capabilities: &mcp.ClientCapabilities{RootsV2: &mcp.RootCapabilities{ListChanged: true}},
				})
				other.AddRoots(&mcp.Root{URI: "file:///other"})
				frontOf(t, g, other, "2025-11-25")
				waitUnion(t, g, "file:///other")

				opts := &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{RootsV2: &mcp.RootCapabilities{ListChanged: true}}}
				if failing == "2026-07-28" {
					opts.MultiRoundTrip = &mcp.MultiRoundTripOptions{Disabled: true}
				}
				c := mcp.NewClient(&mcp.Implementation{Name: "failing", Version: "1"}, opts)
				c.AddRoots(&mcp.Root{URI: "file:///mine"})
				c.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
					return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
						if method == "roots/list" {
							return nil, errors.New("the roots are not to be had")
						}
						return next(ctx, method, req)
					}
				})
				cs := frontOf(t, g, c, failing)
				waitTools(t, cs, has("a__roots"))
				res, err := cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: "a__roots", Arguments: map[string]any{}})
				if err == nil && failing == "2026-07-28" {
					if res.RequestState == "" || len(res.InputRequests) == 0 {
						t.Fatalf("not an input-required result: %q", text(res))
					}
					// The retry answers nothing.
					res, err = cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: "a__roots", Arguments: map[string]any{},
						RequestState: res.RequestState, InputResponses: mcp.InputResponseMap{}})
				}
				got := fmt.Sprint(err)
				if err == nil {
					got = text(res)
				}
				if strings.Contains(got, "file:///other") || (err == nil && !res.IsError) {
					t.Errorf("the call of a front whose roots cannot be had: %s; want it failed, without another client's roots", got)
				}
			})
		}
	}
}

// TestGateway_RootsConcurrentFronts: calls from two front clients that a 2026-07-28
// backend asks for roots at the same moment each get their own client's roots, many
// times over (run with -race).
func TestGateway_RootsConcurrentFronts(t *testing.T) {
	for _, fronts := range []string{"2025-11-25", ""} {
		t.Run(fmt.Sprintf("fronts %q", fronts), func(t *testing.T) {
			g := start(t, config(inMemory("a", testserver.Options{})), gateway.Options{})
			names := []string{"one", "two", "three"}
			var sessions []*mcp.ClientSession
			for _, name := range names {
				c := mcp.NewClient(&mcp.Implementation{Name: name, Version: "1"}, &mcp.ClientOptions{
					Capabilities: &mcp.ClientCapabilities{RootsV2: &mcp.RootCapabilities{ListChanged: true}},
				})
				c.AddRoots(&mcp.Root{URI: "file:///" + name})
				sessions = append(sessions, frontOf(t, g, c, fronts))
			}
			waitTools(t, sessions[0], has("a__roots"))
			var wg sync.WaitGroup
			for i, name := range names {
				for range 10 {
					wg.Go(func() {
						res, err := sessions[i].CallTool(callCtx(t), &mcp.CallToolParams{Name: "a__roots", Arguments: map[string]any{}})
						if want := `["file:///` + name + `"]`; err != nil || res.IsError || text(res) != want {
							t.Errorf("front %q's call: %s, %v; want %s", name, text(res), err, want)
						}
					})
				}
			}
			wg.Wait()
		})
	}
}
