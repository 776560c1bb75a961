package transport

import (
	"context"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestCloseAfterACancelledCall: a session closed right after a call's caller gave up
// tells the server of the cancel first, over streamable HTTP on 2025-11-25 and on
// 2026-07-28. (It did not: the go-sdk writes notifications/cancelled on a goroutine
// of its own once the call has returned, and the close got there first; the server
// ran the call on, and on 2025-11-25 held the session's DELETE until it ended.)
func TestCloseAfterACancelledCall(t *testing.T) {
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			h := testserver.StartHTTP(t, testserver.Options{})
			cfg := httpConfig(h)
			cfg.ProtocolVersion = version
			s := dial(t, cfg, Options{})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"ms": 60_000}})
				done <- err
			}()
			for deadline := time.Now().Add(callTimeout); h.Count("tools/call") == 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the call did not reach the server")
				}
			}
			cancel()
			if err := <-done; err == nil {
				t.Fatal("the cancelled call succeeded")
			}
			cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer ccancel()
			start := time.Now()
			if err := s.Close(cctx); err != nil {
				t.Errorf("close: %v", err)
			}
			if took := time.Since(start); took > time.Second {
				t.Errorf("the close took %v", took)
			}
			if n := h.Count("notifications/cancelled"); n != 1 {
				t.Errorf("the server got %d notifications/cancelled before the close, want 1", n)
			}
		})
	}
}
