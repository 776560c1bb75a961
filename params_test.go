package mcpfsm

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestRequestsDoNotModifyParams: CallTool copies its params before the SDK sees
// them (transport.Session.CallTool), but every other request hands the caller's params
// to the SDK, which writes into them: withLogLevel sets _meta's log level once one is
// set, and the SDK adds its own _meta on protocol 2026-07-28. A caller that reuses one
// params value from several goroutines (a fixed ReadResourceParams, a shared Meta map)
// gets a data race, or a fatal concurrent map write.
func TestRequestsDoNotModifyParams(t *testing.T) {
	cfg := transport.Config{Name: "mem", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}}
	c := open(t, cfg, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "warning"}); err != nil {
		t.Fatal(err)
	}
	p := &mcp.ReadResourceParams{URI: testserver.ResourceA}
	if _, err := c.ReadResource(ctx, p); err != nil {
		t.Fatal(err)
	}
	if p.Meta != nil {
		t.Errorf("ReadResource set Meta on the caller's params: %v", p.Meta)
	}
	meta := mcp.Meta{"trace": "abc"}
	gp := &mcp.GetPromptParams{Name: "greet", Arguments: map[string]string{"name": "bob"}, Meta: meta}
	_, _ = c.GetPrompt(ctx, gp)
	if len(meta) != 1 {
		t.Errorf("GetPrompt wrote into the caller's Meta map: %v", meta)
	}
	// One params value from many goroutines: -race reports the writes into it.
	shared := &mcp.ReadResourceParams{URI: testserver.ResourceA, Meta: mcp.Meta{"trace": "abc"}}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { _, _ = c.ReadResource(ctx, shared) })
	}
	wg.Wait()
}
