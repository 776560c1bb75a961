package mcpfsm

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestNotificationsBeforeTheAnswer: over stdio and streamable HTTP, the progress and
// log messages a server sends before a request's answer have all reached their
// handlers when the request returns. The go-sdk hands notifications to handlers on a
// goroutine of their own and answers at once, so without the session's marks
// (transport/order.go) the last ones came after the return in about half of the
// calls, or to a caller that had stopped listening.
func TestNotificationsBeforeTheAnswer(t *testing.T) {
	const calls = 100
	for name, cfg := range serverTransports(t) {
		t.Run(name, func(t *testing.T) {
			var mu sync.Mutex
			progress := map[string]int{}
			logs := 0
			c := open(t, cfg, nil, func(o *Options) {
				o.Handlers.Progress = func(_ context.Context, p *mcp.ProgressNotificationParams) {
					mu.Lock()
					progress[fmt.Sprint(p.ProgressToken)]++
					mu.Unlock()
				}
				o.Handlers.LoggingMessage = func(context.Context, *mcp.LoggingMessageParams) {
					mu.Lock()
					logs++
					mu.Unlock()
				}
			})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := c.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
				t.Fatal(err)
			}
			late := 0
			for i := range calls {
				token := fmt.Sprintf("call-%d", i)
				p := &mcp.CallToolParams{Name: "slow_progress", Arguments: map[string]any{"ms": 0, "steps": 3}}
				p.SetProgressToken(token)
				if res, err := c.CallTool(ctx, p); err != nil || res.IsError {
					t.Fatalf("slow_progress: %+v, %v", res, err)
				}
				mu.Lock()
				if progress[token] != 3 {
					late++
				}
				mu.Unlock()
				if res, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "log", Arguments: map[string]any{"level": "info", "text": token}}); err != nil || res.IsError {
					t.Fatalf("log: %+v, %v", res, err)
				}
				mu.Lock()
				if logs != i+1 {
					late++
					logs = i + 1 // count each call's lateness once
				}
				mu.Unlock()
			}
			if late > 0 {
				t.Errorf("%d of %d calls returned before the notifications their server sent ahead of the answer were handled", late, 2*calls)
			}
		})
	}
}
