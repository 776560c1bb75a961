package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sync/semaphore"
)

// The HTTP front's bounds, when HTTPOptions leave them zero.
const (
	// DefaultMaxSessions is the most stateful front sessions open at once (each
	// costs some 27 KB and a goroutine until it is deleted or times out).
	DefaultMaxSessions = 10000
	// DefaultBodyMemory is how many bytes of request bodies the front holds at
	// once: eight of the largest the go-sdk accepts (mcp.DefaultMaxRequestBodyBytes).
	DefaultBodyMemory = 8 * mcp.DefaultMaxRequestBodyBytes
)

// bodyWait is how long a request waits for its body's share of the front's
// memory before it is refused (a variable for tests).
var bodyWait = 10 * time.Second

// limits bound what the HTTP front holds for its clients whoever they are: the
// stateful sessions open, and the bytes of the request bodies being served.
type limits struct {
	server      *mcp.Server
	maxSessions int // 0: none

	mu      sync.Mutex
	opening int // requests that may open a session, under way

	bodies  *semaphore.Weighted // nil: no bound
	maxBody int64               // the most one body is charged: the SDK refuses more
	wait    time.Duration       // bodyWait
}

func newLimits(server *mcp.Server, o HTTPOptions) *limits {
	l := &limits{server: server, maxSessions: o.MaxSessions, maxBody: mcp.DefaultMaxRequestBodyBytes, wait: bodyWait}
	if l.maxSessions == 0 {
		l.maxSessions = DefaultMaxSessions
	}
	budget := o.BodyMemory
	if budget == 0 {
		budget = DefaultBodyMemory
	}
	if budget > 0 {
		l.bodies = semaphore.NewWeighted(max(budget, l.maxBody))
	}
	return l
}

// openSession admits a request that may open a stateful session (a POST without
// a session's ID) if there is room for one more, and returns the function to call
// when it has been served.
func (l *limits) openSession() (done func(), ok bool) {
	if l.maxSessions < 0 {
		return func() {}, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// The go-sdk makes a request's session before it reads the body, and closes
	// it when the request ends uninitialized: a session not yet initialized is
	// one of those under way, counted in l.opening, not here.
	open := 0
	for ss := range l.server.Sessions() {
		if ss.ID() != "" && ss.InitializeParams() != nil { // the stdio front's and stateless requests' have no ID
			open++
		}
	}
	if open+l.opening >= l.maxSessions {
		return nil, false
	}
	l.opening++
	return func() {
		l.mu.Lock()
		l.opening--
		l.mu.Unlock()
	}, true
}

// errBodyTooLarge is a body over the SDK's limit, read here (one without a length).
var errBodyTooLarge = errors.New("request body too large")

// holdBody charges a POST's body to the front's budget (Handler refuses any
// other request with a body), waiting for room up to bodyWait, and returns the charge, which releaseBody gives back once the request has been
// served (the SDK keeps a call's arguments, which point into its body, until it
// is answered). A body of known length is charged that length; one without
// (chunked) is read here first, charged the largest body until it has been, then
// what it is.
func (l *limits) holdBody(ctx context.Context, w http.ResponseWriter, r *http.Request) (charge int64, err error) {
	if l.bodies == nil || r.Body == nil || r.Body == http.NoBody {
		return 0, nil
	}
	charge = l.maxBody
	if r.ContentLength >= 0 {
		charge = min(r.ContentLength, l.maxBody) // the SDK refuses a longer body
	}
	if !l.bodies.TryAcquire(charge) {
		wctx, cancel := context.WithTimeout(ctx, l.wait)
		err := l.bodies.Acquire(wctx, charge)
		cancel()
		if err != nil {
			return 0, err
		}
	}
	if r.ContentLength < 0 {
		data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, l.maxBody))
		if err != nil {
			l.bodies.Release(charge)
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return 0, errBodyTooLarge
			}
			return 0, fmt.Errorf("reading the request body: %w", err)
		}
		l.bodies.Release(charge - int64(len(data)))
		charge = int64(len(data))
		r.Body = io.NopCloser(bytes.NewReader(data))
	}
	return charge, nil
}

// releaseBody gives back what holdBody charged.
func (l *limits) releaseBody(charge int64) {
	if charge > 0 {
		l.bodies.Release(charge)
	}
}
