package transport

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"weak"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Sessions share their mcp.Client: a Client costs about 2.4 KB and holds nothing of a
// session's own but the list of its sessions, so that thousands of connections need
// not each keep one. Sessions that send the same implementation (the same
// *mcp.Implementation, or DefaultClient) and that do or do not listen for tool-list
// changes share one Client, which lives as long as one of them does.
var clients struct {
	mu sync.Mutex
	m  map[clientKey]*sharedClient
}

type clientKey struct {
	impl  *mcp.Implementation // nil for DefaultClient
	tools bool                // its sessions listen for tool-list changes
}

// A sharedClient is a Client and the sessions using it.
type sharedClient struct {
	key      clientKey
	c        *mcp.Client
	refs     int                             // sessions holding it, under clients.mu
	sessions map[*mcp.ClientSession]*Session // those listening for tool-list changes, under clients.mu
}

// acquireClient returns the Client for sessions of impl (DefaultClient if nil) that
// listen for tool-list changes or not. The session must release it.
func acquireClient(impl *mcp.Implementation, tools bool) *sharedClient {
	key := clientKey{impl, tools}
	clients.mu.Lock()
	defer clients.mu.Unlock()
	sc := clients.m[key]
	if sc == nil {
		sc = &sharedClient{key: key}
		copts := &mcp.ClientOptions{}
		if tools {
			sc.sessions = map[*mcp.ClientSession]*Session{}
			copts.ToolListChangedHandler = sc.toolsChanged
		}
		sc.c = NewClient(impl, copts)
		if clients.m == nil {
			clients.m = map[clientKey]*sharedClient{}
		}
		clients.m[key] = sc
	}
	sc.refs++
	return sc
}

// bind makes s the session that cs's tool-list changes are reported to. A
// notification that arrives before bind (while the session initializes) is not
// reported: the session's first ListTools comes after it.
func (sc *sharedClient) bind(cs *mcp.ClientSession, s *Session) {
	if sc.sessions == nil {
		return
	}
	clients.mu.Lock()
	sc.sessions[cs] = s
	clients.mu.Unlock()
}

// release drops a session's hold on the Client, and forgets cs (nil if the session
// never connected).
func (sc *sharedClient) release(cs *mcp.ClientSession) {
	clients.mu.Lock()
	defer clients.mu.Unlock()
	if cs != nil && sc.sessions != nil {
		delete(sc.sessions, cs)
	}
	if sc.refs--; sc.refs == 0 {
		delete(clients.m, sc.key)
	}
}

// toolsChanged is the shared Client's ToolListChangedHandler: it reports the change
// to the session it came on.
func (sc *sharedClient) toolsChanged(_ context.Context, req *mcp.ToolListChangedRequest) {
	cs, _ := req.GetSession().(*mcp.ClientSession)
	clients.mu.Lock()
	s := sc.sessions[cs]
	clients.mu.Unlock()
	if s != nil && s.onTools != nil {
		s.onTools()
	}
}

// NewClient returns an SDK client for this package's sessions (see
// Options.MCPClient): mcp.NewClient(impl, opts) with the sending middleware
// that makes an answer the SDK panics reading an error (see unreadable), the one
// that keeps tools/list results out of the SDK's cache (which Probe and
// ListTools need), the one that keeps resources/read results out of it (see
// ReadResource), and that advertises no roots capability unless
// opts.Capabilities asks for it (the SDK's nil Capabilities means roots, and
// a server that asks a client for roots it does not serve may hang), and the
// one that tells a session of a roots change only once its handshake is over (see
// quietHandshakes), and the receiving middleware that keeps the order of a session's
// notifications and answers (see Session.Settle): receiving middleware added later sees the
// session's marks, and must pass those (IsOrderMark) on untouched. impl nil
// means DefaultClient. opts is not modified.
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
	c.AddSendingMiddleware(unreadable)
	c.AddSendingMiddleware(uncachedToolLists, uncachedReads, quietHandshakes)
	c.AddReceivingMiddleware(passMarks)
	markable(c)
	return c
}

// handshook holds the sessions whose handshake is over: their notifications/initialized
// is being sent, or their server/discover was answered.
var handshook sync.Map // weak.Pointer[mcp.ClientSession] -> struct{}

// quietHandshakes is a sending middleware that drops a notifications/roots/list_changed
// on a session whose handshake is not over. The go-sdk tells every session of a client
// of a change of its roots, those still connecting included: one sent before the
// initialize was answered went out without a session, and a streamable HTTP server
// answered it 400 (the TypeScript SDK's does), which ended the connection and failed
// the connect. Nothing is lost: the client's roots changed before it was sent, and a
// server asks for them once it is initialized, which it is not yet.
func quietHandshakes(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		cs, _ := req.GetSession().(*mcp.ClientSession)
		if cs == nil {
			return next(ctx, method, req)
		}
		switch method {
		case "notifications/roots/list_changed":
			if _, ok := handshook.Load(weak.Make(cs)); !ok {
				return nil, nil
			}
		case "notifications/initialized":
			// Before it is sent: a server asks for the roots once it has it, after
			// a change told from now on.
			shakeOver(cs)
		case "server/discover":
			res, err := next(ctx, method, req)
			if err == nil {
				shakeOver(cs)
			}
			return res, err
		}
		return next(ctx, method, req)
	}
}

// shakeOver records that the handshake of cs is over, until cs is collected.
func shakeOver(cs *mcp.ClientSession) {
	key := weak.Make(cs)
	if _, loaded := handshook.LoadOrStore(key, struct{}{}); !loaded {
		runtime.AddCleanup(cs, func(key weak.Pointer[mcp.ClientSession]) { handshook.Delete(key) }, key)
	}
}

// unreadable is NewClient's innermost sending middleware: a panic of the SDK's
// while it sends a request and reads its answer is that request's error, not the
// end of the process. The go-sdk v1.8.0 panics decoding an answer that a server
// controls: a 2026-07-28 result whose inputRequests holds null
// (InputRequestMap.UnmarshalJSON), on the caller's goroutine. The answer came
// whole and could not be read: the server answered, wrongly.
func unreadable(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (res mcp.Result, err error) {
		defer func() {
			if v := recover(); v != nil {
				res, err = nil, &unreadableError{method: method, panic: v}
			}
		}()
		return next(ctx, method, req)
	}
}

// unreadableError is the error of a request whose answer the SDK panicked reading.
type unreadableError struct {
	method string
	panic  any
}

func (e *unreadableError) Error() string {
	return fmt.Sprintf("the answer to %s could not be read (the go-sdk panicked: %v)", e.method, e.panic)
}
