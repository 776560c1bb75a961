package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/gateway"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(rawBackendEnv) != "" {
		rawBackendMain()
		return
	}
	goleak.VerifyTestMain(m)
}

const waitFor = 20 * time.Second

// quick are policies for tests: a crashed backend is back within about 100ms.
func quick() machine.Policies {
	p := mcpfsm.DefaultSpec().Defaults()
	p.BackoffBase = 50 * time.Millisecond
	p.BackoffMax = 200 * time.Millisecond
	p.BackoffJitter = 0
	p.KeepaliveInterval = 0
	p.ConnectTimeout = 5 * time.Second
	p.TeardownTimeout = 2 * time.Second
	return p
}

// inMemory is a server of a config served in process by a test server.
func inMemory(name string, opts testserver.Options) mcpfsm.ServerConfig {
	return mcpfsm.ServerConfig{Name: name, Policies: quick(), Transport: transport.Config{
		Name: name, InMemory: &transport.InMemory{Server: testserver.New(opts)},
	}}
}

// stdio is a server of a config run as the test server's binary.
func stdio(t *testing.T, name string, opts testserver.Options) mcpfsm.ServerConfig {
	return mcpfsm.ServerConfig{Name: name, Policies: quick(), Transport: transport.Config{
		Name: name, Stdio: &transport.Stdio{Command: testserver.Build(t), Args: testserver.Args(opts)},
	}}
}

func config(servers ...mcpfsm.ServerConfig) *mcpfsm.Config {
	return &mcpfsm.Config{Servers: servers}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// start opens a gateway, closed when the test ends.
func start(t *testing.T, cfg *mcpfsm.Config, opts gateway.Options) *gateway.Gateway {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet()
	}
	g, err := gateway.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := g.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return g
}

// front connects a client to the gateway's server in memory, on protocol version
// (the newest if ""), closed when the test ends (before the gateway).
func front(t *testing.T, g *gateway.Gateway, copts *mcp.ClientOptions, version string) *mcp.ClientSession {
	t.Helper()
	if copts == nil {
		copts = &mcp.ClientOptions{}
	}
	if copts.Capabilities == nil {
		copts.Capabilities = &mcp.ClientCapabilities{}
	}
	return frontOf(t, g, mcp.NewClient(&mcp.Implementation{Name: "front", Version: "1"}, copts), version)
}

// frontOf connects c (a client the test made, with middleware or roots of its own)
// to the gateway's server in memory, as front does.
func frontOf(t *testing.T, g *gateway.Gateway, c *mcp.Client, version string) *mcp.ClientSession {
	t.Helper()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := g.Server().Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	cs, err := c.Connect(ctx, ct, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.Close()
		_ = ss.Wait()
	})
	return cs
}

func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	t.Cleanup(cancel)
	return ctx
}

// toolNames lists the front's tools, sorted as the server sorts them.
func toolNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	var names []string
	for tool, err := range cs.Tools(callCtx(t), nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	return names
}

// waitTools waits until the front lists a tool for which ok holds.
func waitTools(t *testing.T, cs *mcp.ClientSession, ok func([]string) bool) []string {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		names := toolNames(t, cs)
		if ok(names) {
			return names
		}
		if time.Now().After(deadline) {
			t.Fatalf("the front never listed the tools wanted; last: %v", names)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitTemplates waits until the front lists a resource template: the backends'
// templates are listed apart from their tools, and a subscribe before the gateway
// has them finds no resource (under load, after waitTools too).
func waitTemplates(t *testing.T, cs *mcp.ClientSession) {
	t.Helper()
	waitListed(t, "a resource template", func() (int, error) {
		res, err := cs.ListResourceTemplates(callCtx(t), nil)
		if err != nil {
			return 0, err
		}
		return len(res.ResourceTemplates), nil
	})
}

// waitListed waits until count says the front lists something (what).
func waitListed(t *testing.T, what string, count func() (int, error)) {
	t.Helper()
	for deadline := time.Now().Add(waitFor); ; time.Sleep(10 * time.Millisecond) {
		n, err := count()
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the front never listed %s", what)
		}
	}
}

func has(name string) func([]string) bool {
	return func(names []string) bool {
		for _, n := range names {
			if n == name {
				return true
			}
		}
		return false
	}
}

func text(res *mcp.CallToolResult) string {
	if res == nil {
		return ""
	}
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		} else {
			data, _ := json.Marshal(c)
			parts = append(parts, string(data))
		}
	}
	return strings.Join(parts, "\n")
}

func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	if args == nil {
		args = map[string]any{}
	}
	res, err := cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
