package gateway_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mcpfsm/mcpfsm/gateway"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// This file is the gateway over time: what it keeps must follow what is present
// (sessions, servers, calls), not the number of past events.

// kept is what the gateway keeps of its past (g.Sizes), that must go back to base.
func kept(g *gateway.Gateway) map[string]int {
	s := g.Sizes()
	delete(s, "regTools") // the present servers' tools
	return s
}

// TestGateway_CutCallsOfRemovedServers: the calls the front cancelled are kept for
// attribution (cutLinger) by server; those of a server a reload removed were kept for
// good, with their front sessions: a gateway whose config renames its servers now
// and then (--watch) grew with every name it ever had.
func TestGateway_CutCallsOfRemovedServers(t *testing.T) {
	defer gateway.SetCutLinger(50 * time.Millisecond)()
	g := start(t, config(inMemory("a0", testserver.Options{})), gateway.Options{SweepInterval: 20 * time.Millisecond})
	cs := front(t, g, nil, "2025-11-25")
	waitTools(t, cs, has("a0__hold"))
	base := kept(g)
	for i := 1; i <= 10; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: fmt.Sprintf("a%d__hold", i-1), Arguments: map[string]any{"ms": 60000}})
		cancel()
		if err == nil {
			t.Fatal("a call of 60s was not cancelled at 20ms")
		}
		next := fmt.Sprintf("a%d", i)
		if _, err := g.Reload(callCtx(t), config(inMemory(next, testserver.Options{}))); err != nil {
			t.Fatal(err)
		}
		waitTools(t, cs, has(next+"__hold"))
	}
	deadline := time.Now().Add(waitFor)
	for {
		diff := cmp.Diff(base, kept(g))
		if diff == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("what the gateway keeps after 10 reloads, each removing a server a call was cancelled at (-before +after):\n%s", diff)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
