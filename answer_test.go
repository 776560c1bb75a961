package mcpfsm

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestHandlerAnswersNothing: a handler that returns neither an answer nor an error
// (nil, nil). On 2025-11-25 the go-sdk's client read the nil answer and panicked on
// its own goroutine: the process died. On 2026-07-28 the answer went to the server
// as null (which the server refuses with HTTP 400, read as a missing header). Now
// either is an error of the handler's: the server sees it (2025-11-25), the call
// fails with it (2026-07-28).
func TestHandlerAnswersNothing(t *testing.T) {
	for _, stateless := range []bool{false, true} {
		t.Run(fmt.Sprintf("stateless=%v", stateless), func(t *testing.T) {
			h := testserver.StartHTTP(t, testserver.Options{Stateless: stateless})
			c := open(t, httpConfig(h), nil, func(o *Options) {
				o.Handlers.Elicit = func(context.Context, *mcp.ElicitParams) (*mcp.ElicitResult, error) { return nil, nil }
				o.Handlers.CreateMessage = func(context.Context, *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) { return nil, nil }
			})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for tool, args := range map[string]map[string]any{"elicit": {"message": "?"}, "sample": {"prompt": "?"}} {
				res, err, cause := callCause(ctx, c, tool, args)
				msg := fmt.Sprint(err)
				if err == nil && res.IsError {
					msg = res.Content[0].(*mcp.TextContent).Text
				} else if err == nil {
					t.Errorf("%s: answered %+v", tool, res)
				}
				if !strings.Contains(msg, "returned no answer") || cause.Counts() {
					t.Errorf("%s: %s (cause %s), want the handler's missing answer", tool, msg, cause)
				}
			}
		})
	}
}
