package mcpfsm_test

import (
	"context"
	"fmt"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/simulate"
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
	res, err := conn.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hello"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Content[0].(*mcp.TextContent).Text)
	if err := conn.Close(ctx); err != nil {
		fmt.Println(err)
	}
	for _, tr := range conn.History() {
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

// A Manager keeps a connection to each server of a config, and routes calls by
// server-qualified tool name. Configs usually come from a file (LoadConfig); this one
// is built in Go around two in-process servers.
func ExampleManager() {
	ctx := context.Background()
	cfg := &mcpfsm.Config{Servers: []mcpfsm.ServerConfig{
		{Name: "alpha", Transport: transport.Config{Name: "alpha", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}}},
		{Name: "beta", Transport: transport.Config{Name: "beta", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}}},
	}}
	m, err := mcpfsm.NewManager(cfg, mcpfsm.ManagerOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Close(ctx)
	for _, name := range []string{"alpha.counter", "alpha.counter", "beta.counter"} {
		res, err := m.Call(ctx, name, nil)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(name, "→", res.Content[0].(*mcp.TextContent).Text)
	}
	// Output:
	// alpha.counter → 1
	// alpha.counter → 2
	// beta.counter → 1
}

// Simulate a policy before shipping it: how many connect attempts does a dead server
// cost per hour, and how soon is it in use again once it returns?
func ExampleDefaultSpec_simulate() {
	spec := mcpfsm.DefaultSpec()
	res := simulate.Run(spec, nil, simulate.Builtin()["dead-hour"], 1)
	fmt.Println("attempts in the dead hour:", res.Summary.AttemptsPerHour[0])
	fmt.Println("back in use within the cooldown cap:", res.Summary.Recover[0] <= spec.Defaults().BreakerCooldownMax)
	// Output:
	// attempts in the dead hour: 19
	// back in use within the cooldown cap: true
}
