package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/gateway"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestGateway_ErrorAfterProgress: a call that has had a progress notification (its
// answer begun as an event stream) and then fails with a backend's error of a code
// the go-sdk's handler gives an HTTP status of its own on 2026-07-28 (-32601: 404,
// -32602: 400) reaches its client as an event on that stream, its code, message and
// data whole. The go-sdk's handler wrote such an error as a JSON body with its
// status, whatever had been written before: into the event stream, a line that is no
// SSE field, which clients skip, so that the call's client never had its answer.
func TestGateway_ErrorAfterProgress(t *testing.T) {
	g := start(t, config(rawBackend(t, "raw")), gateway.Options{})
	url := serveHTTP(t, g, gateway.HTTPOptions{})
	tools := []struct {
		name string
		code int64
	}{{"raw__fail_32601", -32601}, {"raw__fail_32602", -32602}, {"raw__fail_32603", -32603}}
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			var progress atomic.Int32
			cs := httpFrontWith(t, url, version, nil, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{},
				ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { progress.Add(1) }})
			waitTools(t, cs, has("raw__fail_32602"))
			for _, tool := range tools {
				before := progress.Load()
				_, err := cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: tool.name, Arguments: map[string]any{},
					Meta: mcp.Meta{"progressToken": "tok"}})
				var je *jsonrpc.Error
				if !errors.As(err, &je) || je.Code != tool.code || je.Message != "raw refuses "+strings.TrimPrefix(tool.name, "raw__") || string(je.Data) != rawNotFoundData {
					t.Errorf("%s after its progress: %v, want the backend's error %d with its data", tool.name, err, tool.code)
				}
				for deadline := time.Now().Add(waitFor); progress.Load() == before; time.Sleep(time.Millisecond) {
					if time.Now().After(deadline) { // handled apart from the call's answer
						t.Fatalf("%s: no progress notification reached the client", tool.name)
					}
				}
			}
		})
	}
	// On the wire: every line of the stream is an SSE field, the error among them.
	for _, tool := range tools {
		name := strings.TrimPrefix(tool.name, "raw__")
		body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"` + tool.name + `","arguments":{},"_meta":{"progressToken":"p",` + strings.TrimPrefix(meta2026, `"_meta":{`) + `}}`
		resp := postWith(t, url, body, map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": tool.name})
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answered := false
		for line := range strings.Lines(string(data)) {
			line = strings.TrimSuffix(line, "\n")
			field, value, _ := strings.Cut(line, ": ")
			switch field {
			case "", "event", "id":
			case "data":
				var msg errorAnswer
				if json.Unmarshal([]byte(value), &msg) == nil && string(msg.ID) == "7" && msg.Error != nil && msg.Error.Code == tool.code && string(msg.Error.Data) == rawNotFoundData {
					answered = true
				}
			default:
				t.Errorf("%s: a line of the event stream that is no SSE field: %.200q", name, line)
			}
		}
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") || !answered {
			t.Errorf("%s: %s %s, no event with the error %d:\n%s", name, resp.Status, resp.Header.Get("Content-Type"), tool.code, data)
		}
	}
}
