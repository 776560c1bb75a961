package transport

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A Client is what a connection's effects use of a session. *Session implements it; it
// is an interface so that an embedder or a test can wrap a real session.
type Client interface {
	// CallTool calls a tool on the session (see Session.CallTool).
	CallTool(ctx context.Context, p *mcp.CallToolParams) (*mcp.CallToolResult, error)
	// ListTools lists every page of the server's tools.
	ListTools(ctx context.Context) ([]*mcp.Tool, error)
	// Probe checks that the server answers (see Session.Probe).
	Probe(ctx context.Context) error
	// Close ends the session, by force once ctx ends (see Session.Close).
	Close(ctx context.Context) error
	// Request runs f on the SDK session (see Session.Request).
	Request(ctx context.Context, op, name string, f func(ctx context.Context, cs *mcp.ClientSession) error) error
	// Subscribe and Unsubscribe change the session's resource subscriptions (see
	// Session.Subscribe: on 2026-07-28 a subscription is in force when it returns).
	Subscribe(ctx context.Context, uri string) error
	Unsubscribe(ctx context.Context, uri string) error
	// InitializeResult is the server's answer to initialize.
	InitializeResult() *mcp.InitializeResult
	// ID is the MCP session ID ("" where there is none).
	ID() string
}

var _ Client = (*Session)(nil)

// A Dialer opens a Client; Dial, wrapped, is the default one.
type Dialer func(ctx context.Context, cfg Config, opts Options) (Client, error)

// DialClient is Dial as a Dialer.
func DialClient(ctx context.Context, cfg Config, opts Options) (Client, error) {
	s, err := Dial(ctx, cfg, opts)
	if err != nil {
		return nil, err // not a typed nil in an interface
	}
	return s, nil
}
