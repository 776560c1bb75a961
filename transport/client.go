package transport

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A Client is what a connection's effects use of a session. *Session implements it; it
// is an interface so that an embedder or a test can wrap a real session.
type Client interface {
	CallTool(ctx context.Context, p *mcp.CallToolParams) (*mcp.CallToolResult, error)
	ListTools(ctx context.Context) ([]*mcp.Tool, error)
	Request(ctx context.Context, op, name string, f func(ctx context.Context, cs *mcp.ClientSession) error) error
	InitializeResult() *mcp.InitializeResult
	ID() string
	Probe(ctx context.Context) error
	Close(ctx context.Context) error
	Closing() bool
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
