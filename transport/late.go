package transport

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// When a server is done with a request its caller gave up on.
//
// The go-sdk's client forgets a request whose context ends: it sends
// notifications/cancelled and drops the server's answer if one comes later. The
// server may still be running it until then, and what it sends meanwhile (a
// 2025-11-25 server's sampling, elicitation or roots request, a log message) names
// no request. A caller that must know when the server is done with it (the gateway,
// which gives such messages to the one front session whose calls may still run:
// see gateway/backend.go) puts a Finished in the request's context under
// FinishedKey. Once the request has returned with its context ended, the session
// tells it, once, from a goroutine that must not wait:
//
//   - on stdio, SSE and in-memory connections (whose messages the session reads
//     itself, see endConn), when the server's answer to it is read, and every
//     request of the server's read before that answer has been answered (its
//     handler, which may be looking for the request it serves, has returned);
//   - on every transport, when the session's connection has ended and none of its
//     handlers runs any more (the SDK's connection closed its own, which it does
//     once idle; over streamable HTTP, ClientSession.Wait has returned);
//   - on stdio, SSE and in-memory connections, at once if the request was never
//     written (endConn notes every request it writes).
//
// It is told nothing if neither comes: a server that does not answer
// cancelled requests (as MCP allows) on a session that lives on, or a server over
// streamable HTTP, whose answers to a request given up on are never read (the
// go-sdk closes their stream). A session remembers at most maxLate such requests,
// each for lateKeep.

// Finished is told when the server is done with a request its caller gave up on
// (see FinishedKey).
type Finished interface {
	ServerFinished()
}

// FinishedKey keys, in the context of a request, the Finished that the session
// tells when the server is done with the request, if the request returns with its
// context ended.
type FinishedKey struct{}

// maxLate bounds the requests given up on a session watches, lateKeep how long
// each is watched (its answer's ID, and its Finished, kept meanwhile): a server
// that never answers cancelled requests would otherwise have the session keep them
// all. (The gateway counts a cancelled call for 30 s at most: it asks no longer.)
// The watches told, or past either bound, are dropped as the next is added.
const (
	maxLate  = 1024
	lateKeep = 30 * time.Second
)

// late are the requests a session's callers gave up on, watched for the server's
// end of them.
type late struct {
	// reqs counts the server's requests read and not yet answered (endConn): an
	// answer read while some are is told only once none is.
	reqs    atomic.Int64
	mu      sync.Mutex
	watches []*lateWatch // oldest first, at most maxLate
	ready   []*lateWatch // answered, waiting for reqs to reach 0
	ended   bool         // the session ended: a watch is told at once
	// downClose counts the closes of the connection that Session.down makes
	// itself, while handlers may still run, not yet made: such a close ends
	// nothing here (endConn.Close).
	downClose atomic.Int32
}

// takeDownClose reports whether a close of the connection is (or may be taken
// for) one Session.down made itself, and counts it made. (Should the SDK's own
// close take down's count, down's close then ends the watches: after the SDK's,
// made once no handler runs.)
func (l *late) takeDownClose() bool {
	for {
		n := l.downClose.Load()
		if n <= 0 {
			return false
		}
		if l.downClose.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// A lateWatch is one request given up on.
type lateWatch struct {
	f     Finished
	at    time.Time
	id    jsonrpc.ID // its JSON-RPC ID, on a connection that reads answers (endConn)
	hasID bool
	told  atomic.Bool
}

// doneAfter forgets the request of rec (withStatus), made under ctx, once it has
// returned: if ctx ended first and carries a Finished, the session watches for
// the server's end of it instead (see Finished).
func (s *Session) doneAfter(ctx context.Context, rec *answers) {
	if ctx.Err() != nil {
		if f, ok := ctx.Value(FinishedKey{}).(Finished); ok && f != nil && rec != nil {
			s.cancelPending(ctx, rec)
			s.watchLate(rec, f)
			return
		}
	}
	s.done(ctx, rec)
}

// watchLate watches rec's request, given up on, for the server's end of it.
func (s *Session) watchLate(rec *answers, f Finished) {
	w := &lateWatch{f: f, at: time.Now()}
	if rec.hasID {
		w.id, w.hasID = rec.id, true
	} else if s.lt.endOrNil() != nil {
		// Never written (endConn notes every request it writes): the server
		// never had it.
		s.tell(w)
		return
	}
	l := &s.late
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		s.forget(rec)
		s.tell(w)
		return
	}
	// The oldest watches go, past maxLate or lateKeep, with their answers' IDs.
	drop := 0
	for drop < len(l.watches) && (len(l.watches)-drop >= maxLate || l.watches[drop].told.Load() || time.Since(l.watches[drop].at) > lateKeep) {
		if o := l.watches[drop]; o.hasID && !o.told.Load() {
			s.awaiting.Delete(o.id)
		}
		drop++
	}
	l.watches = append(l.watches[drop:], w)
	l.mu.Unlock()
	if !w.hasID {
		return
	}
	// The answer may have been read already (endConn.Read marks rec answered,
	// then looks for its watch): one of the two sees the other.
	rec.late.Store(w)
	if rec.answered.Load() {
		s.lateAnswered(w)
	}
}

// lateAnswered notes that the server answered w's request: w is told once no
// request of the server's read before it is unanswered. At most maxLate wait for
// that, the oldest dropped untold: a request of the server's that the go-sdk
// never answers (one reusing the ID of another in flight, which it drops) keeps
// them waiting for the session's life.
func (s *Session) lateAnswered(w *lateWatch) {
	l := &s.late
	l.mu.Lock()
	if l.reqs.Load() > 0 {
		if len(l.ready) >= maxLate {
			l.ready = append(l.ready[:0:0], l.ready[len(l.ready)-maxLate+1:]...)
		}
		l.ready = append(l.ready, w)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	s.tell(w)
}

// serverRequestRead and serverRequestAnswered count the server's requests read
// and answered (endConn): when none is left unanswered, the answered watches
// waiting for that are told.
func (s *Session) serverRequestRead() { s.late.reqs.Add(1) }

func (s *Session) serverRequestAnswered() {
	l := &s.late
	if l.reqs.Add(-1) > 0 {
		return
	}
	l.mu.Lock()
	if l.reqs.Load() > 0 || len(l.ready) == 0 {
		l.mu.Unlock()
		return
	}
	ready := l.ready
	l.ready = nil
	l.mu.Unlock()
	for _, w := range ready {
		s.tell(w)
	}
}

// lateEnd tells every watch: the session's connection has ended and its handlers
// have returned (the SDK's connection closes its own only once it is idle: see
// endConn.Close; over streamable HTTP, ClientSession.Wait has returned, see watch).
func (s *Session) lateEnd() {
	l := &s.late
	l.mu.Lock()
	ws := l.watches
	l.watches, l.ready, l.ended = nil, nil, true
	l.mu.Unlock()
	for _, w := range ws {
		s.tell(w)
	}
}

// tell tells w's Finished, once.
func (s *Session) tell(w *lateWatch) {
	if w.told.CompareAndSwap(false, true) {
		w.f.ServerFinished()
	}
}
