package transport

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestProtocolVersionPin: a session asked for 2025-11-25 initializes with it, where the
// same server over the same transport otherwise negotiates 2026-07-28, and a server that
// sends a request while serving a call (forbidden on 2026-07-28) can then send it.
func TestProtocolVersionPin(t *testing.T) {
	server := mcp.NewServer(&mcp.Implementation{Name: "pin", Version: "1"}, nil)
	server.AddTool(&mcp.Tool{Name: "ping_client", InputSchema: map[string]any{"type": "object"}}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if err := req.Session.Ping(ctx, nil); err != nil {
			return nil, err
		}
		_, err := req.Session.ListRoots(ctx, nil)
		if err != nil {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}, nil
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
	})
	for _, tc := range []struct{ pin, want, text string }{
		{"", "2026-07-28", "cannot be sent"},
		{"2025-11-25", "2025-11-25", "ok"},
	} {
		s := dial(t, Config{Name: "pin", InMemory: &InMemory{Server: server}, ProtocolVersion: tc.pin}, Options{})
		if got := s.ProtocolVersion(); got != tc.want {
			t.Errorf("pin %q: protocol %s, want %s", tc.pin, got, tc.want)
		}
		res, err := s.CallTool(callCtx(t), &mcp.CallToolParams{Name: "ping_client", Arguments: map[string]any{}})
		if err != nil {
			t.Fatalf("pin %q: %v", tc.pin, err)
		}
		if got := resultText(res); !strings.Contains(got, tc.text) {
			t.Errorf("pin %q: the tool said %q, want %q in it", tc.pin, got, tc.text)
		}
	}
	err := Config{Name: "pin", InMemory: &InMemory{Server: server}, ProtocolVersion: "1999-01-01"}.Validate()
	var e *Error
	if !errors.As(err, &e) || e.Op != OpConfig {
		t.Errorf("an unknown protocol version: %v, want a config error", err)
	}
}
