package transport

import (
	"context"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// NewClient returns an SDK client for this package's sessions: it never answers a
// tools/list from the SDK's cache, and it advertises no roots unless opts.Capabilities
// asks (the SDK's nil Capabilities means roots). impl nil means DefaultClient.
func NewClient(impl *mcp.Implementation, opts *mcp.ClientOptions) *mcp.Client {
	if impl == nil {
		d := DefaultClient
		impl = &d
	}
	var o mcp.ClientOptions
	if opts != nil {
		o = *opts
	}
	if o.Capabilities == nil {
		o.Capabilities = &mcp.ClientCapabilities{}
	}
	c := mcp.NewClient(impl, &o)
	c.AddSendingMiddleware(uncachedToolLists)
	return c
}

// Request runs f on the SDK session with the HTTP answers recorded, and returns a
// failure as an *Error of op (name: the tool, prompt or resource it is about).
func (s *Session) Request(ctx context.Context, op, name string, f func(ctx context.Context, cs *mcp.ClientSession) error) error {
	ctx, status := s.withStatus(ctx)
	if err := f(ctx, s.cs); err != nil {
		return s.wrap(op, name, err, status)
	}
	return nil
}

// InitializeResult returns what the server said when the session was initialized.
func (s *Session) InitializeResult() *mcp.InitializeResult { return s.cs.InitializeResult() }

// Caps on one listing of a paginated list.
const (
	MaxListPages = 1000
	MaxListItems = 100_000
)

// ErrListTooLong is wrapped by the error of a listing that went past the caps.
var ErrListTooLong = errors.New("list too long")
