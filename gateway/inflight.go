package gateway

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// inflight are the front requests in flight, each with its cancel. The SDK's server
// never cancels a request whose answer nobody can receive any more, and its
// ServerSession.Close waits for a session's requests in flight: a request waiting on
// a slow or hung backend would hold a DELETE, a shutdown or a stdio front's Run for as
// long as the backend takes. So a request is cancelled, and its backend's call with
// it, when:
//   - the POST that carried it ends with its client gone (a stateful HTTP session's:
//     see Handler);
//   - its session is deleted (HTTP DELETE);
//   - the gateway closes.
type inflight struct {
	posts   atomic.Uint64 // numbers the POSTs of stateful sessions (postHeader)
	mu      sync.Mutex
	reqs    map[*context.CancelFunc]origin
	gone    expiring[string, struct{}] // POSTs whose client went away before a request of theirs started
	deleted expiring[string, struct{}] // sessions deleted: their requests are cancelled as they start
	closed  bool                       // the gateway closed: requests are cancelled as they start
	// sessions counts each front session's requests in flight (see maxSessionRequests)
	sessions map[*mcp.ServerSession]int
	// openPosts counts the POSTs carrying requests being served (a stateful
	// session's, a 2026-07-28 request's but a listen), and noPosts, if set, is
	// closed when none is (see postsEnded).
	openPosts int
	noPosts   chan struct{}
}

// maxSessionRequests is the most requests one front session has in flight at once:
// one more is refused at once, saying why. Nothing else bounds a stdio client's (an
// HTTP client needs a connection for each): one that wrote 100,000 calls to a slow
// tool without waiting for answers (11 MB of stdin) grew the gateway past 1.6 GB. A
// variable for tests.
var maxSessionRequests = 1024

// maxRemembered bounds the POSTs gone and the sessions deleted inflight remembers
// (each for a minute): past it the oldest are forgotten early.
const maxRemembered = 1 << 16

// origin is where a front request came from.
type origin struct {
	ss   *mcp.ServerSession
	post string // the number of the POST that carried it, for a stateful HTTP session's
}

// track returns ctx with a cancel of the gateway's, and a function to call when the
// request is done. A request (count: not a notification) of a session that has
// maxSessionRequests in flight already is not tracked: ok is false.
func (f *inflight) track(ctx context.Context, ss *mcp.ServerSession, req mcp.Request, count bool) (_ context.Context, done func(), ok bool) {
	o := origin{ss: ss}
	if extra := req.GetExtra(); extra != nil && extra.Header != nil {
		o.post = extra.Header.Get(postHeader)
	}
	count = count && ss != nil
	f.mu.Lock()
	defer f.mu.Unlock()
	if count && f.sessions[ss] >= maxSessionRequests {
		return ctx, nil, false
	}
	ctx, cancel := context.WithCancel(ctx)
	if f.closed || f.ended(o) {
		cancel()
		return ctx, func() {}, true
	}
	if f.reqs == nil {
		f.reqs = map[*context.CancelFunc]origin{}
	}
	key := &cancel
	f.reqs[key] = o
	if count {
		if f.sessions == nil {
			f.sessions = map[*mcp.ServerSession]int{}
		}
		f.sessions[ss]++
	}
	return ctx, func() {
		cancel()
		f.mu.Lock()
		delete(f.reqs, key)
		if count {
			if f.sessions[ss]--; f.sessions[ss] <= 0 {
				delete(f.sessions, ss)
			}
		}
		f.mu.Unlock()
	}, true
}

// postServed counts a stateful session's POST as served until the function it
// returns is called.
func (f *inflight) postServed() (end func()) {
	f.mu.Lock()
	f.openPosts++
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.openPosts--; f.openPosts == 0 && f.noPosts != nil {
			close(f.noPosts)
			f.noPosts = nil
		}
	}
}

// postsEnded returns a channel closed once no POST carrying requests is served (a
// stateful session's, or a 2026-07-28 request's but a listen).
func (f *inflight) postsEnded() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.openPosts == 0 {
		c := make(chan struct{})
		close(c)
		return c
	}
	if f.noPosts == nil {
		f.noPosts = make(chan struct{})
	}
	return f.noPosts
}

// postDone ends a POST: if its client went away, its requests are cancelled; one that
// has not started yet (the SDK runs it on a goroutine of its own) is cancelled as it
// starts, the POST remembered for a minute.
func (f *inflight) postDone(id string, gone bool) {
	if !gone {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cancel(func(o origin) bool { return o.post == id }) == 0 {
		f.gone.put(id, struct{}{}, time.Now())
	}
}

// sessionDeleted cancels the requests in flight of the session with the given ID,
// and, for a minute, those of it that start: the SDK may have queued some that have
// not reached the gateway yet, and its close of the session waits for them. (Called
// before the SDK checks the DELETE, with the ID of a live session only: one it
// refuses has cancelled the calls of a live session all the same, which only a
// holder of the session's ID can do; an ID naming no session, which is the
// client's to make as long as a header may be, is not kept.)
func (f *inflight) sessionDeleted(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleted.put(id, struct{}{}, time.Now())
	f.cancel(func(o origin) bool { return o.ss != nil && o.ss.ID() == id })
}

// ended reports whether a request from o is to be cancelled as it starts; f.mu is
// held.
func (f *inflight) ended(o origin) bool {
	if _, gone := f.gone.get(o.post, time.Now()); gone && o.post != "" {
		return true
	}
	if o.ss != nil {
		if id := o.ss.ID(); id != "" {
			_, deleted := f.deleted.get(id, time.Now())
			return deleted
		}
	}
	return false
}

// close cancels every request in flight, and every one that starts from now on.
func (f *inflight) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	f.cancel(func(origin) bool { return true })
}

// cancel cancels the requests for which match holds and returns how many; f.mu is
// held.
func (f *inflight) cancel(match func(origin) bool) int {
	n := 0
	for c, o := range f.reqs {
		if match(o) {
			(*c)()
			n++
		}
	}
	return n
}
