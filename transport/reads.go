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
// resources/read result before the SDK caches it (so that no read is ever
// answered from the cache, and the entry is dropped by the next read of its URI),
// and stops the reads that only drop an entry (forgetKey).
func uncachedReads(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "resources/read" {
			return next(ctx, method, req)
		}
		if ctx.Value(forgetKey{}) != nil {
			return nil, errForgetOnly
		}
		res, err := next(ctx, method, req)
		if r, ok := res.(*mcp.ReadResourceResult); ok && r != nil {
			r.TTLMs = 0
		}
		return res, err
	}
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
		_, _ = cs.ReadResource(context.WithValue(context.WithoutCancel(ctx), forgetKey{}, true), &mcp.ReadResourceParams{URI: p.URI})
	}
	return res, err
}
