package main

// The adapter from the scenarios' session to an mcpfsm.Conn over streamable HTTP: every
// request of every scenario goes through the connection, its state machine and its one
// call path; no raw SDK session is used.

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/mcpfsm/mcpfsm"
	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// clientInfo is the implementation the client announces in initialize.
var clientInfo = &mcp.Implementation{Name: "mcpfsm-conformance-client", Version: "0.1.0"}

// openConn returns an opener of mcpfsm connections. httpClient, if not nil, makes every
// HTTP request of the sessions.
func openConn(httpClient *http.Client) opener {
	return func(ctx context.Context, serverURL string, opts options) (session, error) {
		var hs mcpfsm.Handlers
		if opts.Elicit != nil {
			hs.Elicit = func(ctx context.Context, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
				return opts.Elicit(ctx, &mcp.ElicitRequest{Params: p})
			}
		}
		// A scenario server is short-lived and answers at once: connect and give up
		// within a scenario's time, and never probe in the middle of one.
		pol := mcpfsm.DefaultSpec().Defaults()
		pol.KeepaliveInterval = 0
		pol.BreakerThreshold = 2
		h := &transport.HTTP{URL: serverURL, Client: httpClient}
		if opts.OAuth != nil {
			// The authorization runs inside the connect (the first request is
			// refused): the connect gets the scenario's time for it.
			h.Auth = authConfig(opts.OAuth, httpClient)
			pol.ConnectTimeout = 20 * time.Second
		}
		c, err := mcpfsm.Open(transport.Config{Name: "conformance", HTTP: h},
			mcpfsm.Options{Client: clientInfo, Handlers: hs, Policies: &pol, Logger: slog.Default()})
		if err != nil {
			return nil, err
		}
		if err := c.WaitReady(ctx); err != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = c.Close(cctx)
			return nil, err
		}
		return connSession{c}, nil
	}
}

// connSession is a session over an mcpfsm.Conn.
type connSession struct{ c *mcpfsm.Conn }

func (s connSession) ListTools(ctx context.Context) ([]*mcp.Tool, error) {
	var tools []*mcp.Tool
	for t, err := range s.c.Tools(ctx, nil) {
		if err != nil {
			return nil, err
		}
		tools = append(tools, t)
	}
	return tools, nil
}

func (s connSession) CallTool(ctx context.Context, name string, args map[string]any) (*mcp.CallToolResult, error) {
	p := &mcp.CallToolParams{Name: name}
	if args != nil {
		p.Arguments = args // nil goes out as {}: the Conn sees to it
	}
	return s.c.CallTool(ctx, p)
}

// Close closes the connection, bounded by ctx and the teardown timeout.
func (s connSession) Close(ctx context.Context) error {
	err := s.c.Close(ctx)
	if errors.Is(err, machine.ErrClosed) {
		return nil
	}
	return err
}
