package mcpfsm

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The answers of 2026-07-28 servers that ask for nonsense.

// nullAsker rewrites the answers of a test server: an input request with _meta
// {"null":1} becomes null.
type nullAsker struct{ http.ResponseWriter }

func (w nullAsker) Write(b []byte) (int, error) {
	_, err := w.ResponseWriter.Write(bytes.ReplaceAll(b, []byte(`{"method":"roots/list","params":{"_meta":{"null":1}}}`), []byte(`null`)))
	return len(b), err
}

func (w nullAsker) Flush() { w.ResponseWriter.(http.Flusher).Flush() }

// TestInputRequestNull: a 2026-07-28 server whose answer asks for null (an input
// request of no method) crashed the process: the go-sdk's decoding of it
// (InputRequestMap.UnmarshalJSON) panics on the calling goroutine. The call now fails
// with the server's answer unread (cause server), and the connection serves on.
func TestInputRequestNull(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "nulls", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "null"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"k": &mcp.ListRootsParams{Meta: mcp.Meta{"null": 1}}}}, nil, nil
	})
	mcp.AddTool(srv, &mcp.Tool{Name: "ok"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil, nil
	})
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Stateless: true})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { sdk.ServeHTTP(nullAsker{w}, r) }))
	t.Cleanup(hs.Close)
	c := open(t, transport.Config{Name: "nulls", HTTP: &transport.HTTP{URL: hs.URL}}, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err, cause := callCause(ctx, c, "null", nil); err == nil || cause != states.CauseServer {
		t.Errorf("a null input request: %v (cause %s), want an error with cause server", err, cause)
	}
	if text, err := c.callText(ctx, "ok", nil); err != nil || text != "ok" {
		t.Errorf("a call after it: %q, %v", text, err)
	}
	if n := c.count(states.Ready, states.TearingDown); n != 0 {
		t.Errorf("%d teardowns, want none\n%s", n, c.timeline())
	}
}

// TestInputRequestUnknown: a 2026-07-28 server that asks for something the protocol
// does not have (an input request of another method) fails the call with cause
// server; the connection serves on.
func TestInputRequestUnknown(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "odd", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "odd"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"k": &mcp.ListRootsParams{Meta: mcp.Meta{"null": 1}}}}, nil, nil
	})
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Stateless: true})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { sdk.ServeHTTP(oddAsker{w}, r) }))
	t.Cleanup(hs.Close)
	c := open(t, transport.Config{Name: "odd", HTTP: &transport.HTTP{URL: hs.URL}}, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err, cause := callCause(ctx, c, "odd", nil); err == nil || cause != states.CauseServer {
		t.Errorf("an input request of another method: %v (cause %s), want an error with cause server", err, cause)
	}
	if n := c.count(states.Ready, states.TearingDown); n != 0 {
		t.Errorf("%d teardowns, want none\n%s", n, c.timeline())
	}
}

// oddAsker rewrites the answers of a test server: an input request with _meta
// {"null":1} becomes one of a method the protocol does not have.
type oddAsker struct{ http.ResponseWriter }

func (w oddAsker) Write(b []byte) (int, error) {
	_, err := w.ResponseWriter.Write(bytes.ReplaceAll(b, []byte(`{"method":"roots/list","params":{"_meta":{"null":1}}}`), []byte(`{"method":"tasks/get","params":{}}`)))
	return len(b), err
}

func (w oddAsker) Flush() { w.ResponseWriter.(http.Flusher).Flush() }
