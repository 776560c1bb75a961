package gateway

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
)

// TestStartupWaitsForEveryList: at startup a backend has listed once its connection
// has delivered its tools, its prompts and its resources, which it does one after
// the other as its first session comes up; the front's requests wait until then
// (StartupWait). The tools alone settled it: the syncer, run between two
// deliveries, opened the front with the resources not in, and a front that listed
// resources or subscribed to one at once found none (a flaky
// TestGateway_MaxSessionsCountsListens in CI showed it). The backend here never
// answers initialize: its lists come from the test.
func TestStartupWaitsForEveryList(t *testing.T) {
	cfg := &mcpfsm.Config{Servers: []mcpfsm.ServerConfig{{Name: "a", Transport: transport.Config{
		Name: "a", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{HangInitialize: true})},
	}}}}
	g, err := New(cfg, Options{StartupWait: time.Minute, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := g.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	opened := func() bool {
		select {
		case <-g.opened:
			return true
		default:
			return false
		}
	}
	tool := &mcp.Tool{Name: "t", InputSchema: map[string]any{"type": "object"}}
	g.setList("a", listTools, func(l *listing) { l.tools = []*mcp.Tool{tool} })
	g.setList("a", listPrompts, func(l *listing) { l.prompts = nil })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, ok := g.table.Load().tools["a__t"]; ok {
			break // the syncer has run since
		}
		if time.Now().After(deadline) {
			t.Fatal("the syncer never took the backend's tools")
		}
	}
	time.Sleep(50 * time.Millisecond) // and settled what it had to
	if opened() {
		t.Fatal("the front opened with the backend's tools and prompts in, its resources not")
	}
	g.setList("a", listResources, func(l *listing) { l.resources = []*mcp.Resource{{Name: "r", URI: "test://r"}} })
	for deadline := time.Now().Add(10 * time.Second); !opened(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the front never opened once every list was in")
		}
	}
}
