package transport_test

import (
	"context"
	"fmt"
	"time"

	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Dial opens one session, with no lifecycle around it: mcpfsm.Open is what keeps a
// connection alive. The server here runs in process; Stdio, HTTP and SSE configs reach
// real ones.
func ExampleDial() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := transport.Dial(ctx, transport.Config{
		Name:     "example",
		InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})},
	}, transport.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close(ctx)
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hello"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Content[0].(*mcp.TextContent).Text)
	// Output: hello
}
