package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sync/semaphore"
)

// The HTTP front's bounds, when HTTPOptions leave them zero.
const (
	// DefaultMaxSessions is the most stateful front sessions and 2026-07-28
	// subscriptions/listen streams open at once (a session costs some 27 KB and a
	// goroutine until it is deleted or times out; a stream, a goroutine and a
	// connection for as long as it listens).
	DefaultMaxSessions = 10000
	// DefaultBodyMemory is how many bytes of request bodies the front holds at
	// once: eight of the largest the go-sdk accepts (mcp.DefaultMaxRequestBodyBytes).
	DefaultBodyMemory = 8 * mcp.DefaultMaxRequestBodyBytes
)

// bodyWait is how long a request waits for its body's share of the front's
// memory before it is refused (a variable for tests).
var bodyWait = 10 * time.Second

// limits bound what the HTTP front holds for its clients whoever they are: the
// stateful sessions and 2026-07-28 listen streams open, and the bytes of the
// request bodies being served.
type limits struct {
	server      *mcp.Server
	maxSessions int // 0: none

	mu      sync.Mutex
	opening int // requests that may open a session, under way
	streams int // 2026-07-28 subscriptions/listen requests, under way

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
// when its answer starts (its session, if it opened one, is then counted as open)
// or it has been served, whichever comes first (it may be called again).
func (l *limits) openSession() (done func(), ok bool) {
	return l.admit(&l.opening)
}

// openStream admits a 2026-07-28 subscriptions/listen request, which holds its
// stream open for as long as it listens, if there is room for one more session or
// stream, and returns the function to call when it has been served.
func (l *limits) openStream() (done func(), ok bool) {
	return l.admit(&l.streams)
}

// admit counts one more in *under (l.opening or l.streams) if the sessions open,
// those opening and the streams leave room under maxSessions, and returns the
// function that counts it out (it may be called again).
func (l *limits) admit(under *int) (done func(), ok bool) {
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
	if open+l.opening+l.streams >= l.maxSessions {
		return nil, false
	}
	*under++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			*under--
			l.mu.Unlock()
		})
	}, true
}

// errBodyTooLarge is a body over the SDK's limit.
var errBodyTooLarge = errors.New("request body too large")

// A tooLargeError is holdBody's error for a body over the SDK's limit: errBodyTooLarge,
// with the JSON-RPC answer to the request, if what was read of it names its ID
// (transport.TooLarge).
type tooLargeError struct{ answer []byte }

func (e *tooLargeError) Error() string        { return errBodyTooLarge.Error() }
func (e *tooLargeError) Is(target error) bool { return target == errBodyTooLarge }

// firstBodyBuffer is what a body is first read into (and charged) before any of it
// has come: a client that declares a large body and sends none of it holds no more.
const firstBodyBuffer = 4 << 10

// holdBody reads a POST's body (Handler refuses any other request with a body)
// into memory charged to the front's budget as it arrives, and gives the SDK that
// copy. The charge is the buffer's size, grown by doubling as the bytes come: a
// client declaring 4 MiB and sending nothing holds 4 KiB, not 4 MiB (which eight
// such clients took the whole default budget with). When a growth finds no room,
// the part held is given back and the rest of the body (its declared length, or
// the SDK's limit) is waited for at once, up to bodyWait: requests each holding a
// part and waiting for more would only wait each other out. The charge is given
// back by releaseBody once the request has been served (the SDK keeps a call's
// arguments, which point into its own copy of the body, until it is answered).
//
// Without a budget (BodyMemory negative) the body is read and held the same way,
// charged to nothing: what the front answers a body over the limit, and a request
// whose params do not decode, needs it (see bodyTooLarge, deadlineWriter).
func (l *limits) holdBody(ctx context.Context, w http.ResponseWriter, r *http.Request) (charge int64, err error) {
	if r.Body == nil || r.Body == http.NoBody {
		return 0, nil
	}
	limit := l.maxBody // the SDK refuses a longer body
	if r.ContentLength >= 0 {
		limit = min(r.ContentLength, l.maxBody)
	}
	deadline := time.Now().Add(l.wait)
	covered := false // the whole body is charged: growing asks for nothing more
	grow := func(n int64) error {
		if covered || l.bodies == nil {
			return nil
		}
		if l.bodies.TryAcquire(n) {
			charge += n
			return nil
		}
		l.bodies.Release(charge)
		charge = 0
		wctx, cancel := context.WithDeadline(ctx, deadline)
		defer cancel()
		if err := l.bodies.Acquire(wctx, limit); err != nil {
			return err
		}
		charge, covered = limit, true
		return nil
	}
	defer func() {
		if err != nil && charge > 0 {
			l.bodies.Release(charge)
			charge = 0
		}
	}()
	size := min(max(limit, 1), firstBodyBuffer)
	if err := grow(size); err != nil {
		return charge, err
	}
	data := make([]byte, 0, size)
	// Given the server's own writer: past the limit, the reader tells it so
	// (an unexported method of net/http's, which no wrapper has), and net/http
	// closes the connection once the answer is written. Told nothing, net/http
	// first read up to 256 KiB more of the body before it wrote the answer: a
	// client pausing past the limit waited for its 413 until it sent them, or
	// for ever (see TestGateway_BodyTooLargeAnsweredAtOnce).
	body := http.MaxBytesReader(serverWriter(w), r.Body, l.maxBody)
	for {
		buf := data[len(data):cap(data)]
		if len(buf) == 0 && int64(cap(data)) < limit {
			next := min(2*int64(cap(data)), limit)
			if err := grow(next - int64(cap(data))); err != nil {
				return charge, err
			}
			grown := make([]byte, len(data), next)
			copy(grown, data)
			data = grown
			buf = data[len(data):cap(data)]
		}
		if len(buf) == 0 { // at the limit: only the body's end may come
			var one [1]byte
			buf = one[:]
		}
		n, rerr := body.Read(buf)
		if int64(len(data)+n) > limit {
			return charge, &tooLargeError{transport.TooLarge(data, l.maxBody)}
		}
		data = data[:len(data)+n]
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			var mbe *http.MaxBytesError
			if errors.As(rerr, &mbe) {
				return charge, &tooLargeError{transport.TooLarge(data, l.maxBody)}
			}
			return charge, fmt.Errorf("reading the request body: %w", rerr)
		}
	}
	if held := int64(cap(data)); charge > held {
		l.bodies.Release(charge - held)
		charge = held
	}
	r.Body = &heldBody{data: data}
	return charge, nil
}

// serverWriter is the writer under w's wrappers (each of which gives the one it
// wraps by Unwrap, as http.ResponseController finds them): the server's own.
func serverWriter(w http.ResponseWriter) http.ResponseWriter {
	for {
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return w
		}
		w = u.Unwrap()
	}
}

// heldBody is a body read whole, which forgets its bytes once they have been read
// (the SDK keeps its own copy).
type heldBody struct{ data []byte }

func (b *heldBody) Read(p []byte) (int, error) {
	if len(b.data) == 0 {
		b.data = nil
		return 0, io.EOF
	}
	n := copy(p, b.data)
	b.data = b.data[n:]
	return n, nil
}

func (b *heldBody) Close() error { return nil }

// releaseBody gives back what holdBody charged.
func (l *limits) releaseBody(charge int64) {
	if charge > 0 {
		l.bodies.Release(charge)
	}
}
