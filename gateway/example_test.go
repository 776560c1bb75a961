package gateway_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/gateway"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A gateway in front of one server, and a client of the gateway calling that server's
// echo tool under its shown name, files__echo. mcpfsm serve does the same over stdio
// (Server().Run) or streamable HTTP (Handler); the client here connects in memory.
func ExampleNew() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := &mcpfsm.Config{Servers: []mcpfsm.ServerConfig{{
		Name:      "files",
		Transport: transport.Config{Name: "files", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}},
	}}}
	g, err := gateway.New(cfg, gateway.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer g.Close(ctx)

	st, ct := mcp.NewInMemoryTransports()
	ss, err := g.Server().Connect(ctx, st, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, nil)
	cs, err := client.Connect(ctx, ct, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = cs.Close(); _ = ss.Wait() }()

	// The first list waits for the backend to list its tools (Options.StartupWait).
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "files__echo", Arguments: map[string]any{"text": "hello"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Content[0].(*mcp.TextContent).Text)
	// Output: hello
}
