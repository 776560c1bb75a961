package mcpfsm_test

import (
	"context"
	"fmt"
	"time"

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

// Read a resource and subscribe to it. The subscription is part of the connection: if
// the server restarts, the new session subscribes again before any call reaches it, and
// the handler hears once that the resource may have changed meanwhile.
func ExampleConn_ReadResource() {
	ctx := context.Background()
	updates := make(chan string, 1)
	conn, err := mcpfsm.Open(transport.Config{
		Name:     "example",
		InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})},
	}, mcpfsm.Options{Handlers: mcpfsm.Handlers{
		ResourceUpdated: func(_ context.Context, p *mcp.ResourceUpdatedNotificationParams) {
			select {
			case updates <- p.URI:
			default: // one is enough here; a handler must not block
			}
		},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close(ctx)
	res, err := conn.ReadResource(ctx, &mcp.ReadResourceParams{URI: "test://static/a"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Contents[0].Text)
	if err := conn.Subscribe(ctx, &mcp.SubscribeParams{URI: "test://static/a"}); err != nil {
		fmt.Println(err)
		return
	}
	// The test server's touch tool changes the resource. The subscription is in force
	// once Subscribe has returned (on protocol 2026-07-28 too, where the server
	// acknowledges it apart from the request), so the change is reported.
	if _, err := conn.CallTool(ctx, &mcp.CallToolParams{Name: "touch", Arguments: map[string]any{"uri": "test://static/a"}}); err != nil {
		fmt.Println(err)
		return
	}
	select {
	case uri := <-updates:
		fmt.Println("updated:", uri)
	case <-time.After(10 * time.Second):
		fmt.Println("no update")
	}
	fmt.Println("subscribed:", conn.Subscriptions())
	// Output:
	// a v0
	// updated: test://static/a
	// subscribed: [test://static/a]
}

// List a server's prompts (every page) and get one.
func ExampleConn_GetPrompt() {
	ctx := context.Background()
	conn, err := mcpfsm.Open(transport.Config{
		Name:     "example",
		InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})},
	}, mcpfsm.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close(ctx)
	for p, err := range conn.Prompts(ctx, nil) {
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println("prompt:", p.Name)
	}
	res, err := conn.GetPrompt(ctx, &mcp.GetPromptParams{Name: "greet", Arguments: map[string]string{"name": "bob"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Messages[0].Content.(*mcp.TextContent).Text)
	// Output:
	// prompt: greet
	// Hello, bob!
}

// Answer what a server asks of the client during a call: here the test server's
// sample tool asks for sampling (a language model's answer). The client advertises
// sampling because a handler is set.
func ExampleHandlers() {
	ctx := context.Background()
	conn, err := mcpfsm.Open(transport.Config{
		Name:     "example",
		InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})},
	}, mcpfsm.Options{Handlers: mcpfsm.Handlers{
		CreateMessage: func(_ context.Context, p *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Model: "stub", Role: "assistant", Content: &mcp.TextContent{Text: "42"}}, nil
		},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close(ctx)
	res, err := conn.CallTool(ctx, &mcp.CallToolParams{Name: "sample", Arguments: map[string]any{"prompt": "the answer?"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Content[0].(*mcp.TextContent).Text)
	// Output: 42
}

// A servers config is checked whole: every problem is reported with its
// file:line:column, and a near name is suggested. LoadConfig reads one from a file,
// with the process's environment; ParseConfig takes the text and a lookup.
func ExampleParseConfig() {
	env := map[string]string{"SEARCH_TOKEN": "t0ken"}
	lookup := func(name string) (string, bool) { v, ok := env[name]; return v, ok }
	cfg, err := mcpfsm.ParseConfig("servers.yaml", []byte(`version: 1
servers:
  search:
    url: https://example.com/mcp
    headers: {Authorization: "Bearer ${SEARCH_TOKEN}"}
    policies: {connect_timeout: 5s}
`), lookup)
	if err != nil {
		fmt.Println(err)
		return
	}
	s, _ := cfg.Server("search")
	fmt.Println(s.Name, s.Transport.Kind(), s.Policies.ConnectTimeout)

	_, err = mcpfsm.ParseConfig("servers.yaml", []byte(`version: 1
servers:
  files:
    command: mcp-server-files
    policies: {keepalive_intervall: 15s}
`), lookup)
	fmt.Println(err)
	// Output:
	// search http 5s
	// servers.yaml:5:16: unknown policy "keepalive_intervall" (did you mean "keepalive_interval"?)
}
