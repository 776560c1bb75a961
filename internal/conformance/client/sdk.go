package main

// The adapter from the scenarios' session to a raw go-sdk ClientSession over streamable
// HTTP. It stands in for mcpfsm.Conn until the connection has the requests and handlers
// the scenarios need; swapping it means writing another opener and passing it in main.

import (
	"context"
	"fmt"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// clientInfo is the implementation the client announces in initialize.
var clientInfo = &mcp.Implementation{Name: "mcpfsm-conformance-client", Version: "0.1.0"}

// openSDK returns an opener of raw go-sdk sessions. httpClient, if not nil, makes every
// HTTP request of the sessions (the MCP endpoint's); OAuth's discovery, registration and
// token requests use it too.
func openSDK(httpClient *http.Client) opener {
	return func(ctx context.Context, serverURL string, opts options) (session, error) {
		t := &mcp.StreamableClientTransport{Endpoint: serverURL, HTTPClient: httpClient}
		if opts.OAuth != nil {
			h, err := authHandler(opts.OAuth, httpClient)
			if err != nil {
				return nil, err
			}
			t.OAuthHandler = h
		}
		client := mcp.NewClient(clientInfo, &mcp.ClientOptions{ElicitationHandler: opts.Elicit})
		cs, err := client.Connect(ctx, t, nil)
		if err != nil {
			return nil, err
		}
		return sdkSession{cs}, nil
	}
}

// authHandler makes the go-sdk's authorization-code handler from the scenarios' OAuth
// configuration.
func authHandler(oc *oauthConfig, httpClient *http.Client) (auth.OAuthHandler, error) {
	cfg := &auth.AuthorizationCodeHandlerConfig{
		RedirectURL:              oc.RedirectURL,
		AuthorizationCodeFetcher: oc.Fetch,
		PreregisteredClient:      oc.Preregistered,
		Client:                   httpClient,
	}
	if oc.ClientIDMetadataURL != "" {
		cfg.ClientIDMetadataDocumentConfig = &auth.ClientIDMetadataDocumentConfig{URL: oc.ClientIDMetadataURL}
	}
	if oc.Registration != nil {
		cfg.DynamicClientRegistrationConfig = &auth.DynamicClientRegistrationConfig{Metadata: oc.Registration}
	}
	h, err := auth.NewAuthorizationCodeHandler(cfg)
	if err != nil {
		return nil, fmt.Errorf("oauth: %w", err)
	}
	return h, nil
}

// sdkSession is a session over a raw go-sdk ClientSession.
type sdkSession struct{ cs *mcp.ClientSession }

func (s sdkSession) ListTools(ctx context.Context) ([]*mcp.Tool, error) {
	var tools []*mcp.Tool
	for t, err := range s.cs.Tools(ctx, nil) {
		if err != nil {
			return nil, err
		}
		tools = append(tools, t)
	}
	return tools, nil
}

func (s sdkSession) CallTool(ctx context.Context, name string, args map[string]any) (*mcp.CallToolResult, error) {
	if args == nil {
		args = map[string]any{} // some servers reject "arguments": null
	}
	return s.cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
}

// Close closes the session. The SDK's Close takes no context, and its DELETE to the
// endpoint has no deadline of its own: Close gives up waiting when ctx ends.
func (s sdkSession) Close(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- s.cs.Close() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("close: %w", context.Cause(ctx))
	}
}
