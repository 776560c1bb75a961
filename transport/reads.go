package transport

import (
	"context"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The go-sdk's client (v1.8.0), on protocol 2026-07-28, keeps every resources/read
// result it receives in its session, by URI, whatever the result's ttlMs (SEP-2549):
// an entry goes only when the same URI is read again or reported updated. A
// long-lived session that reads many resources (a gateway in front of a server of
// files, items by ID) held every content it ever read: 500 reads of 100 KiB, 54 MiB
// for the session's life, and no bound. ReadResource reads without leaving anything
// there.

// forgetKey marks the context of a read that only drops the SDK's cache entry of
// its URI (see ReadResource): uncachedReads stops it before it is sent.
type forgetKey struct{}

var errForgetOnly = errors.New("mcpfsm: not sent: the read only drops the cache entry")

// uncachedReads is a sending middleware that zeroes the ttlMs of every
// resources/read result, and of every page of prompts, resources and resource
// templates, before the SDK caches it (so that none is ever answered from the
// cache, and its entry is dropped by the next request of its URI or cursor), and
// stops the requests that only drop an entry (forgetKey).
func uncachedReads(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "resources/read", "prompts/list", "resources/list", "resources/templates/list":
		default:
			return next(ctx, method, req)
		}
		if ctx.Value(forgetKey{}) != nil {
			return nil, errForgetOnly
		}
		res, err := next(ctx, method, req)
		switch r := res.(type) {
		case *mcp.ReadResourceResult:
			if r != nil {
				r.TTLMs = 0
			}
		case *mcp.ListPromptsResult:
			if r != nil {
				r.TTLMs = 0
			}
		case *mcp.ListResourcesResult:
			if r != nil {
				r.TTLMs = 0
			}
		case *mcp.ListResourceTemplatesResult:
			if r != nil {
				r.TTLMs = 0
			}
		}
		return res, err
	}
}

// forgetting returns the context of a request that only drops a cache entry.
func forgetting(ctx context.Context) context.Context {
	return context.WithValue(context.WithoutCancel(ctx), forgetKey{}, true)
}

// The SDK keeps every page of prompts, resources and resource templates it lists,
// by the cursor that asked for it, until that cursor is asked for again (or the
// list is said to have changed): a server whose cursors differ from one listing to
// the next (a time, a random token in them) made every listing hold its pages for
// the session's life. ListPrompts, ListResources and ListResourceTemplates list one
// page on cs, a session of a client NewClient made, and leave no copy of it there.

// ListPrompts lists one page of prompts (see above).
func ListPrompts(ctx context.Context, cs *mcp.ClientSession, p *mcp.ListPromptsParams) (*mcp.ListPromptsResult, error) {
	res, err := cs.ListPrompts(ctx, p)
	if newProtocol(cs) {
		_, _ = cs.ListPrompts(forgetting(ctx), &mcp.ListPromptsParams{Cursor: cursorOf(p)})
	}
	return res, err
}

// ListResources lists one page of resources (see above).
func ListResources(ctx context.Context, cs *mcp.ClientSession, p *mcp.ListResourcesParams) (*mcp.ListResourcesResult, error) {
	res, err := cs.ListResources(ctx, p)
	if newProtocol(cs) {
		_, _ = cs.ListResources(forgetting(ctx), &mcp.ListResourcesParams{Cursor: cursorOf(p)})
	}
	return res, err
}

// ListResourceTemplates lists one page of resource templates (see above).
func ListResourceTemplates(ctx context.Context, cs *mcp.ClientSession, p *mcp.ListResourceTemplatesParams) (*mcp.ListResourceTemplatesResult, error) {
	res, err := cs.ListResourceTemplates(ctx, p)
	if newProtocol(cs) {
		_, _ = cs.ListResourceTemplates(forgetting(ctx), &mcp.ListResourceTemplatesParams{Cursor: cursorOf(p)})
	}
	return res, err
}

// cursorOf returns the cursor of a list request's params ("" for nil).
func cursorOf[P interface {
	*mcp.ListPromptsParams | *mcp.ListResourcesParams | *mcp.ListResourceTemplatesParams
}](p P) string {
	switch p := any(p).(type) {
	case *mcp.ListPromptsParams:
		if p != nil {
			return p.Cursor
		}
	case *mcp.ListResourcesParams:
		if p != nil {
			return p.Cursor
		}
	case *mcp.ListResourceTemplatesParams:
		if p != nil {
			return p.Cursor
		}
	}
	return ""
}

// ReadResource reads a resource on cs, a session of a client NewClient made, and
// leaves no copy of the result in the SDK's session: every read reaches the server,
// and the session holds nothing of what it read. p is written to (the SDK sets its
// _meta on 2026-07-28): pass a copy of a value shared with other goroutines.
func ReadResource(ctx context.Context, cs *mcp.ClientSession, p *mcp.ReadResourceParams) (*mcp.ReadResourceResult, error) {
	res, err := cs.ReadResource(ctx, p)
	if p != nil && newProtocol(cs) {
		// The SDK looks the URI up first: the entry just made, whose ttlMs is
		// zero, is dropped; then uncachedReads stops the request.
		_, _ = cs.ReadResource(forgetting(ctx), &mcp.ReadResourceParams{URI: p.URI})
	}
	return res, err
}
