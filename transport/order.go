package transport

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The order of a server's messages.
//
// The go-sdk reads a session's messages on one goroutine. It hands the notifications to
// their handlers one at a time, in the order they came, on a goroutine of their own,
// but gives a request its answer at once, from the reading goroutine: an answer can
// overtake the notifications the server sent before it. A tool's last progress
// notification or log message then reaches its handler after the call has returned,
// or never, for a caller that stopped listening when the call returned (a gateway
// forwarding them to its own client does).
//
// So a session puts a mark in the queue of notifications: when it reads an answer and
// notifications came since the last mark, it hands the SDK a mark (a progress
// notification with a token of its own) before the answer. The SDK queues it behind
// those notifications; the client's innermost receiving middleware (NewClient's)
// takes it off the queue, never passing it on, and notes it passed. Settle waits for
// the marks handed out so far to have passed: every notification the server sent
// before the answers read so far has then been handled.
//
// Over stdio, SSE and in-memory transports the session's connection hands out the
// marks (orderConn); over streamable HTTP, whose SDK connection cannot be wrapped (the
// client session updates it through an unexported method, which a wrapper would
// hide), the SSE bodies do (sseMarks, below).

// orderToken is the progress token of a session's marks: random, so that a server
// cannot pass its own notifications off as marks (they never go to the server).
var orderToken = "mcpfsm/order/" + rand.Text()

// settleMax bounds Settle: a handler that takes longer than this (user code) does not
// hold the request it follows.
const settleMax = time.Second

// order is a session's marks: handed out (sent) and passed through the handlers.
type order struct {
	notes  atomic.Uint64 // notifications read
	marked uint64        // notes when the last mark was handed out (the reader's own)
	sent   atomic.Uint64
	done   atomic.Uint64
	mu     sync.Mutex
	wake   chan struct{} // closed when a mark passes; replaced under mu
}

// orderConn is a session's own view of its connection (stdio, SSE, in memory): it
// hands out the marks of s's order (see above), and shows s's listens the
// subscriptions/listen requests written and what answers them (subscribe.go). Only
// the SDK's reading goroutine calls Read.
type orderConn struct {
	mcp.Connection
	s *Session
	// next are the messages to return before reading again: the answer read, which
	// follows the mark just returned, or the list-changed notifications that follow
	// the acknowledgment of a listen sent again (see listens.missedChanges).
	next []jsonrpc.Message
}

// Read implements mcp.Connection.
func (c *orderConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	if len(c.next) > 0 {
		m := c.next[0]
		c.next = c.next[1:]
		return m, nil
	}
	msg, err := c.Connection.Read(ctx)
	for err == nil && ownAnswer(msg) {
		// A relisten's answer: the session's own (relistenRule).
		if next := c.s.listens.relistenEnded(msg.(*jsonrpc.Response).ID); next != nil {
			c.send(next)
		}
		msg, err = c.Connection.Read(ctx)
	}
	o := &c.s.order
	if missed := c.s.listens.read(msg); len(missed) > 0 {
		o.notes.Add(uint64(len(missed)))
		c.next = append(c.next, missed...)
	}
	switch m := msg.(type) {
	case *jsonrpc.Request:
		if !m.IsCall() {
			o.notes.Add(1)
		}
	case *jsonrpc.Response:
		if n := o.notes.Load(); n != o.marked {
			o.marked = n
			seq := o.sent.Add(1)
			c.next = append(c.next, msg)
			return &jsonrpc.Request{Method: "notifications/progress", Params: markParams(seq)}, nil
		}
	}
	return msg, err
}

// Write implements mcp.Connection.
func (c *orderConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	c.s.listens.wrote(msg)
	return c.Connection.Write(ctx, msg)
}

// send writes a message of the session's own (see relistenRule in subscribe.go),
// from a goroutine of its own: it is called on the SDK's reading goroutine, which
// must not wait on a write. The goroutine ends with the write, which the session's
// life bounds; once the session is closing nothing is sent.
func (c *orderConn) send(msg jsonrpc.Message) {
	s := c.s
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if s.closing.Load() || s.life.Err() != nil {
		return
	}
	s.sending.Add(1)
	go func() {
		defer s.sending.Done()
		if err := c.Connection.Write(s.life, msg); err != nil {
			s.logAt(slog.LevelDebug, "sending a message of the session's own", "error", err)
		}
	}()
}

func markParams(seq uint64) json.RawMessage {
	return json.RawMessage(`{"progressToken":"` + orderToken + `","progress":` + strconv.FormatUint(seq, 10) + `}`)
}

// markSeq returns the sequence number of a mark, if req is one.
func markSeq(method string, req mcp.Request) (uint64, bool) {
	if method != "notifications/progress" {
		return 0, false
	}
	p, ok := req.GetParams().(*mcp.ProgressNotificationParams)
	if !ok || p == nil || p.ProgressToken != orderToken {
		return 0, false
	}
	return uint64(p.Progress), true
}

// IsOrderMark reports whether a message a client's receiving middleware is given is
// not the server's but a session's own mark of the order of its notifications (see
// Session.Settle), which middleware must pass on to the next handler untouched.
func IsOrderMark(method string, req mcp.Request) bool {
	_, ok := markSeq(method, req)
	return ok
}

// passMarks is NewClient's innermost receiving middleware: it takes a session's marks
// off the queue of its notifications.
func passMarks(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		seq, ok := markSeq(method, req)
		if !ok {
			return next(ctx, method, req)
		}
		if s, _ := ctx.Value(orderKey{}).(*Session); s != nil {
			s.order.pass(seq)
		}
		return nil, nil
	}
}

// orderKey keys, in the context a client is connected with, the session whose marks
// its handlers see.
type orderKey struct{}

func (o *order) pass(seq uint64) {
	if seq > o.sent.Load() {
		return // not one handed out
	}
	o.mu.Lock()
	if seq > o.done.Load() {
		o.done.Store(seq)
	}
	if o.wake != nil {
		close(o.wake)
		o.wake = nil
	}
	o.mu.Unlock()
}

// Settle waits until the session's handlers have been given every notification the
// server sent before the answers received so far: a request's progress and log
// messages, once the request has returned and Settle after it, have all been
// handled. It returns at once when no notification came; otherwise when they have
// been handled, when ctx ends, when the session ends, or after a second (a handler
// that slow does not hold the request it follows for longer).
func (s *Session) Settle(ctx context.Context) {
	o := &s.order
	want := o.sent.Load()
	if o.done.Load() >= want {
		return
	}
	t := time.NewTimer(settleMax)
	defer t.Stop()
	for {
		o.mu.Lock()
		if o.done.Load() >= want {
			o.mu.Unlock()
			return
		}
		if o.wake == nil {
			o.wake = make(chan struct{})
		}
		wake := o.wake
		o.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return
		case <-s.life.Done():
			return
		case <-t.C:
			return
		}
	}
}

// marking holds the clients NewClient made: their sessions hand out marks, which
// only NewClient's middleware takes off the queue.
var marking sync.Map // weak.Pointer[mcp.Client] -> struct{}

func markable(c *mcp.Client) {
	key := weak.Make(c)
	marking.Store(key, struct{}{})
	runtime.AddCleanup(c, func(key weak.Pointer[mcp.Client]) { marking.Delete(key) }, key)
}

func isMarkable(c *mcp.Client) bool {
	_, ok := marking.Load(weak.Make(c))
	return ok
}

// Over streamable HTTP the SDK's connection cannot be wrapped, but its messages come
// as the events of SSE response bodies, each body read in order by one goroutine of
// the SDK's: sseMarks hands out the marks there. A stream that carried notifications
// gets a mark just before the event of its next answer. Marks are per stream, as the
// SDK queues each stream's messages in the order they came, whatever the other
// streams do.

// maxMarkedEvent bounds what sseMarks holds of one event while it waits for the
// event's end: a longer event passes through unread (the SDK bounds events itself).
const maxMarkedEvent = 1 << 20

// sseMarks reads an SSE body and puts a mark before the event of an answer that
// follows notifications on the same stream.
type sseMarks struct {
	io.ReadCloser
	r       *bufio.Reader
	o       *order
	out     []byte // ready to be read
	ev      []byte // the current event's lines, held until its end
	data    []byte // the current event's data
	pass    bool   // the current event is too long to hold: it passes through
	start   int    // where the line being read begins in ev
	partial bool   // the last read ended inside a line
	notes   int    // notifications on this stream since its last mark
	err     error
	listens *listens // on the stream of a subscriptions/listen: shown each message
	// lost, on the stream of a subscriptions/listen, is told once if the stream
	// ends (or carries the listen's answer) after the server acknowledged the
	// listen and agreed to hold something: it no longer holds it. held: it did.
	lost func(error)
	held bool
	// answered, on a POST's stream, is told when an answer passes: the server
	// answered the POST's request (its stream carries that answer).
	answered *answers
}

func newSSEMarks(body io.ReadCloser, o *order) *sseMarks {
	return &sseMarks{ReadCloser: body, r: bufio.NewReaderSize(body, 1024), o: o}
}

// Read implements io.Reader.
func (m *sseMarks) Read(p []byte) (int, error) {
	for len(m.out) == 0 {
		if m.err != nil {
			return 0, m.err
		}
		m.line()
	}
	n := copy(p, m.out)
	m.out = m.out[n:]
	return n, nil
}

// line reads a line (or as much of a long one as the buffer holds) and decides what
// to hand on.
func (m *sseMarks) line() {
	chunk, err := m.r.ReadSlice('\n')
	if err != nil && err != bufio.ErrBufferFull {
		m.err = err
		m.listenEnded(err)
		m.out = append(append(m.out[:0], m.ev...), chunk...) // what is held, as it came
		m.ev, m.data, m.partial = m.ev[:0], m.data[:0], false
		return
	}
	whole := err == nil
	if m.pass {
		m.out = append(m.out[:0], chunk...)
		if whole && !m.partial && isBlank(chunk) {
			m.pass = false
		}
		m.partial = !whole
		return
	}
	if !m.partial {
		m.start = len(m.ev)
	}
	m.ev = append(m.ev, chunk...)
	m.partial = !whole
	if len(m.ev) > maxMarkedEvent {
		m.out = append(m.out[:0], m.ev...)
		m.ev, m.data, m.pass = m.ev[:0], m.data[:0], true
		return
	}
	if !whole {
		return
	}
	line := m.ev[m.start:]
	if !isBlank(line) {
		if v, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), []byte("data:")); ok {
			if len(m.data) > 0 {
				m.data = append(m.data, '\n')
			}
			m.data = append(m.data, bytes.TrimSpace(v)...)
		}
		return
	}
	// The event's end.
	m.out = m.out[:0]
	if m.listens != nil {
		if msg, err := decodeMessage(m.data); err == nil {
			m.listens.read(msg)
			switch msg := msg.(type) {
			case *jsonrpc.Request:
				m.held = m.held || agreed(msg)
			case *jsonrpc.Response:
				m.listenEnded(io.EOF) // the server answered the listen: it ended it
			}
		}
	}
	switch kindOf(m.data) {
	case kindNote:
		m.notes++
	case kindAnswer:
		if m.answered != nil {
			m.answered.answered.Store(true)
		}
		if m.notes > 0 {
			m.notes = 0
			m.out = append(m.out, "event: message\ndata: "...)
			m.out = append(m.out, markMessage(m.o.sent.Add(1))...)
			m.out = append(m.out, "\n\n"...)
		}
	}
	m.out = append(m.out, m.ev...)
	m.ev, m.data = m.ev[:0], m.data[:0]
}

// listenEnded tells lost, once, that the listen whose stream this is ended with err,
// if the server had agreed to hold something.
func (m *sseMarks) listenEnded(err error) {
	if f := m.lost; f != nil && m.held {
		m.lost = nil
		f(err)
	}
}

func isBlank(line []byte) bool { return len(bytes.TrimRight(line, "\r\n")) == 0 }

const (
	kindOther = iota
	kindNote
	kindAnswer
)

// kindOf tells a JSON-RPC notification and answer apart from anything else, by the
// keys of the top-level object ("method" without "id", or "id" without "method"),
// scanned without decoding: it runs on every event of every answer.
func kindOf(data []byte) int {
	data = bytes.TrimSpace(data)
	if len(data) < 2 || data[0] != '{' {
		return kindOther
	}
	var hasID, hasMethod bool
	depth, inString, escaped, keyStart := 0, false, false, -1
	expectKey := false
	for i, c := range data {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
				if keyStart >= 0 {
					switch string(data[keyStart:i]) {
					case "id":
						hasID = true
					case "method":
						hasMethod = true
					}
					keyStart = -1
				}
			}
			continue
		}
		switch c {
		case '"':
			inString = true
			if depth == 1 && expectKey {
				keyStart = i + 1
				expectKey = false
			}
		case '{', '[':
			depth++
			expectKey = depth == 1 && c == '{'
		case '}', ']':
			depth--
		case ',':
			expectKey = depth == 1
		}
	}
	switch {
	case hasMethod && !hasID:
		return kindNote
	case hasID && !hasMethod:
		return kindAnswer
	}
	return kindOther
}

// markMessage is a mark as a JSON-RPC message.
func markMessage(seq uint64) []byte {
	return []byte(`{"jsonrpc":"2.0","method":"notifications/progress","params":` + string(markParams(seq)) + `}`)
}
