package gateway_test

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcpfsm/mcpfsm/gateway"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestZZH2(t *testing.T) {
	g := start(t, config(inMemory("a", testserver.Options{})), gateway.Options{})
	srv := httptest.NewUnstartedServer(g.Handler(gateway.HTTPOptions{}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		cs := httpFront(t, srv.URL, version, srv.Client())
		waitTools(t, cs, has("a__echo"))
		other := httpFront(t, srv.URL, version, srv.Client())
		waitTools(t, other, has("a__echo"))
		_, err := cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": strings.Repeat("x", 5<<20)}})
		var je *jsonrpc.Error
		if !errors.As(err, &je) || je.Code != jsonrpc.CodeInvalidRequest {
			t.Errorf("%s: 5 MiB: %v", version, err)
		}
		for _, c := range []*mcp.ClientSession{cs, other} {
			res, err := c.CallTool(callCtx(t), &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": "after"}})
			if err != nil || res.IsError {
				t.Errorf("%s: after: %v %v", version, res, err)
			}
		}
	}
}
