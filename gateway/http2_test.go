package gateway_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mcpfsm/mcpfsm/gateway"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestGateway_BodyTooLargeOverHTTP2: over HTTP/2 the front's 413 (its reader told
// nothing by net/http's HTTP/2 writer, its read deadline set in the past) ends only
// its own stream: the sessions sharing the connection, one with its event stream
// open on it, serve on, and so does the session of the request refused.
func TestGateway_BodyTooLargeOverHTTP2(t *testing.T) {
	g := start(t, config(inMemory("a", testserver.Options{})), gateway.Options{})
	srv := httptest.NewUnstartedServer(g.Handler(gateway.HTTPOptions{}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	var h1 atomic.Int32
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := srv.Client().Transport.RoundTrip(r)
		if err == nil && resp.ProtoMajor != 2 {
			h1.Add(1)
		}
		return resp, err
	})}
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		cs := httpFront(t, srv.URL, version, hc)
		waitTools(t, cs, has("a__echo"))
		other := httpFront(t, srv.URL, version, hc)
		waitTools(t, other, has("a__echo"))
		_, err := cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": strings.Repeat("x", 5<<20)}})
		var je *jsonrpc.Error
		if !errors.As(err, &je) || je.Code != jsonrpc.CodeInvalidRequest || !strings.Contains(je.Message, "exceeds") {
			t.Errorf("%s: a call of 5 MiB: %v, want -32600 saying the body is too large", version, err)
		}
		for _, c := range []*mcp.ClientSession{cs, other} {
			if res, err := c.CallTool(callCtx(t), &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": "after"}}); err != nil || res.IsError {
				t.Errorf("%s: a call after it: %v %v", version, res, err)
			}
		}
	}
	if n := h1.Load(); n > 0 {
		t.Fatalf("%d answers not over HTTP/2", n)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
