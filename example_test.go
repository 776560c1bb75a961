package mcpfsm_test

import (
	"context"
	"fmt"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Open a connection to an MCP server, call a tool, and look at the transitions the
// connection took. The server here runs in process; a real one would be given by a
// Stdio, HTTP or SSE config.
func ExampleOpen() {
	ctx := context.Background()
	server := testserver.New(testserver.Options{}) // an *mcp.Server with an echo tool
	conn, err := mcpfsm.Open(transport.Config{
		Name:     "example",
		InMemory: &transport.InMemory{Server: server},
	}, mcpfsm.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := conn.CallTool(ctx, "echo", map[string]any{"text": "hello"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Content[0].(*mcp.TextContent).Text)
	if err := conn.Close(ctx); err != nil {
		fmt.Println(err)
	}
	for _, tr := range conn.Machine().History() {
		fmt.Println(tr)
	}
	// Output:
	// hello
	// idle → connecting (start)
	// connecting → ready (connected)
	// ready → tearing-down (close)
	// tearing-down → closed (torn_down)
}

// Render the default lifecycle as a Mermaid diagram.
func ExampleDefaultSpec() {
	mmd := mcpfsm.DefaultSpec().Mermaid(machine.GraphOptions{})
	fmt.Println(mmd[:len("stateDiagram-v2")])
	// Output: stateDiagram-v2
}
