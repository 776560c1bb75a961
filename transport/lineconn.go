package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	segjson "github.com/segmentio/encoding/json"
)

// maxLineLength bounds one message read from a stdio server, as the go-sdk's
// own stdio connection does (mcp.DefaultMaxLineLength).
const maxLineLength = mcp.DefaultMaxLineLength

// maxDepth bounds the nesting of a message read from a stdio server, as the
// go-sdk bounds every value it decodes.
const maxDepth = 1000

// errLineTooLong is the read error of a stdio server that wrote a message
// longer than maxLineLength.
var errLineTooLong = fmt.Errorf("a message from the server exceeded the maximum line length (%d bytes)", maxLineLength)

// lineTransport is a stdio server's transport: its connection is a lineConn
// over the child's stdout and stdin.
type lineTransport struct {
	r io.ReadCloser
	w io.WriteCloser
	// noise is told each line the server wrote that is not a message (see
	// lineConn.noise).
	noise func(line []byte)
}

// Connect implements mcp.Transport.
func (t *lineTransport) Connect(context.Context) (mcp.Connection, error) {
	return newLineConn(t.r, t.w, t.noise), nil
}

// lineConn is the connection to a stdio server: newline-delimited JSON-RPC
// messages. It does what the go-sdk's own stdio connection (mcp.IOTransport)
// does, message for message (TestLineConnDecodesAsTheSDK and FuzzLineDecode
// hold it to that), but decodes each message once, from the bytes read, where
// the SDK decodes it twice through a streaming decoder whose first buffer is
// 32 KB: two of those per message read were a fifth of all a gateway
// allocated per call (docs/performance.md).
//
// Its reader goroutine belongs to the connection: it ends when the child's
// stdout ends (closed once the child has exited; see process.closeStdout) or,
// once Close has been called, at the next message it reads.
type lineConn struct {
	r io.ReadCloser
	w io.WriteCloser

	incoming <-chan lineOrErr
	closed   chan struct{}

	// front is set on a server's side of the pipes (ServerStdio): a line that
	// is not a message is answered with an error and skipped.
	front bool

	// noise, if set (a stdio server's side: see Session.connect), is handed
	// each line the server wrote that is not a message and could not be one (a
	// start-up banner, a console.log, a JSON log record: see skipNoise and
	// notAMessage), and the line is skipped, as the TypeScript and Python
	// SDKs' clients skip such lines; a line that starts as a message and is
	// broken still ends the connection. Without noise, lineConn reads as the
	// go-sdk's connection does: the first line that is not a message ends it.
	// Called in Read, one line at a time, in the stream's order; the line is
	// cut at maxNoiseText bytes and must not be kept.
	noise func(line []byte)

	queue []jsonrpc.Message // the rest of a batch; reads are serialized
	// init is where a front's session is in its initialization: not begun,
	// begun (initID, an initialize, read and not yet answered: the requests
	// read meanwhile are let through, as the go-sdk handles them once it has
	// answered initialize), or done (the initialize answered with a result, or
	// a 2026-07-28 request read; an error answering the initialize is the start
	// again). See uninitialized.
	init   atomic.Int32
	initID jsonrpc.ID // under cancelMu
	// unanswered holds a token for each request a front has read and not yet
	// answered (see maxUnanswered); nil but on a front. answeredOne is told (if
	// it is not already) each time one is given back, for drain.
	unanswered  chan struct{}
	answeredOne chan struct{}

	writeMu sync.Mutex

	batchMu sync.Mutex
	batches map[jsonrpc.ID]*batch // the batch each request not yet answered came in

	// cancelled are the requests a front's client cancelled (notifications/
	// cancelled) whose answers are not to be written: the go-sdk's server answers a
	// request whatever happened to it, and a cancelled one with the error its
	// handler returned ("context canceled", code 0), which the client, having
	// forgotten the request, takes for the answer to one it never sent. Nil but on
	// a front; ncancelled, its size, is read without the lock.
	cancelMu   sync.Mutex
	cancelled  map[jsonrpc.ID]struct{}
	ncancelled atomic.Int32

	// inFlight are the IDs of the requests a front has read and not yet
	// answered: a request reusing one is refused by the front (see admit), as
	// the go-sdk drops it unanswered, which also kept its token of unanswered
	// for good. Each says whether it is a 2026-07-28 subscriptions/listen,
	// which is answered only when it ends (see drain). Under cancelMu; nil but
	// on a front. pending is the bytes of their lines (see maxPending).
	inFlight map[jsonrpc.ID]inFlight
	pending  int

	// stopping is closed when a front's Shutdown begins: reading goes on
	// through its grace, but a new request is answered at once with its error
	// (see refuseCalls); and stopped once it has answered the requests left
	// (then reads report the end). shutAnswered are the requests it answered, whose own answers are
	// dropped (under cancelMu). Nil but on a front.
	stopping     chan struct{}
	stopped      chan struct{}
	stopOnce     sync.Once
	shutAnswered map[jsonrpc.ID]struct{}
	shutMessage  string // Shutdown's error message, set before stopping is closed

	closeOnce sync.Once
	closeErr  error
}

// lineOrErr is one message read, or the read's error.
type lineOrErr struct {
	raw     []byte
	err     error
	tooLong bool // a front's line longer than maxLineLength, skipped (raw holds only its ID: see readLine)
	noise   bool // a line that is not a message, skipped (raw holds its text: see skipNoise)
}

func newLineConn(r io.ReadCloser, w io.WriteCloser, noise func(line []byte)) *lineConn {
	incoming := make(chan lineOrErr)
	c := &lineConn{r: r, w: w, incoming: incoming, closed: make(chan struct{}), noise: noise}
	go c.readLoop(incoming)
	return c
}

// readLoop reads the stream's JSON values one by one, as the go-sdk's stdio
// connection does: through one streaming decoder, so a value may span lines,
// but a value must be followed by a line's end, not by more on its line. With
// noise set, a line that is not a message and could not be one (see
// skipNoise) is handed to it and skipped; reading goes on with a new decoder.
func (c *lineConn) readLoop(incoming chan<- lineOrErr) {
	src := &heldReader{r: c.r}
	limiter := &lineLimitReader{r: src}
	dec := json.NewDecoder(limiter)
	for {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		trailing := false
		if err == nil {
			var tr [1]byte
			if n, readErr := dec.Buffered().Read(tr[:]); n > 0 {
				if tr[0] != '\n' && tr[0] != '\r' {
					err, trailing = errors.New("invalid trailing data at the end of a message"), true
				}
			} else if readErr != nil && readErr != io.EOF {
				err = readErr
			}
		}
		if err != nil && c.noise != nil {
			text, skipped, skipErr := c.skipNoise(dec, src, raw, err, trailing)
			if skipped && !c.send(incoming, lineOrErr{raw: text, noise: true}) {
				return
			}
			if skipped && skipErr == nil {
				limiter.n = 0
				dec = json.NewDecoder(limiter)
				continue
			}
			if skipErr != nil {
				err = skipErr
			}
		}
		select {
		case incoming <- lineOrErr{raw: raw, err: err}:
		case <-c.closed:
			return
		}
		if err != nil {
			return
		}
		limiter.n = 0
	}
}

// send hands v to Read, unless the connection closes first.
func (c *lineConn) send(incoming chan<- lineOrErr, v lineOrErr) bool {
	select {
	case incoming <- v:
		return true
	case <-c.closed:
		return false
	}
}

// maxNoiseText is how much of a line that is not a message is handed to noise.
const maxNoiseText = 4 << 10

// skipNoise is readLoop's judgment of a value it could not read: a syntax
// error, a value cut off by the stream's end, or a value followed by more on its
// line (trailing). If the value is not a message and could not be one (see
// messageStart and notAMessage), its line is skipped: the line the value starts
// on, to its end, whatever the decoder read past it (a value may span lines, but
// what follows the noise's first line is a line of its own: "[1, 2" or "{" alone
// on a line does not take the message on the next one with it). The bytes the
// decoder holds after the line's end are put back in src, for a new decoder, and
// the line's text (at most maxNoiseText bytes) returned, for noise. A line that
// starts as a message would is not skipped: it is a broken message. The line is
// read to its end, at most maxLineLength bytes (errLineTooLong past that); a
// stream that ends first returns the text and the read's error.
func (c *lineConn) skipNoise(dec *json.Decoder, src *heldReader, raw json.RawMessage, err error, trailing bool) (text []byte, skipped bool, _ error) {
	buffered, _ := io.ReadAll(dec.Buffered())
	var line, rest []byte
	switch se := (*json.SyntaxError)(nil); {
	case trailing && notAMessage(raw):
		// A scalar and more on its line ("404 not found", "true story"): the
		// decoder holds what follows the scalar.
		line, rest = raw, buffered
	case (errors.As(err, &se) || errors.Is(err, io.ErrUnexpectedEOF)) && !messageStart(buffered):
		// The decoder did not move past the value: buffered starts with it
		// (after the space before it).
		line = buffered[firstNonSpace(buffered):]
		if i := bytes.IndexByte(line, '\n'); i >= 0 {
			line, rest = line[:i], line[i:]
		}
	default:
		return nil, false, nil
	}
	text = noiseText(nil, line)
	if i := bytes.IndexByte(rest, '\n'); i >= 0 {
		text = noiseText(text, rest[:i])
		src.hold(rest[i+1:])
	} else {
		text = noiseText(text, rest)
		if err := src.skipLine(len(line)+len(rest), &text); errors.Is(err, io.EOF) {
			return bytes.TrimRight(text, "\r"), true, err // the last line, then the end
		} else if err != nil {
			return nil, false, err
		}
	}
	return bytes.TrimRight(text, "\r"), true, nil
}

// noiseText appends b to text, up to maxNoiseText bytes in all.
func noiseText(text, b []byte) []byte {
	return append(text, b[:min(len(b), max(0, maxNoiseText-len(text)))]...)
}

// messageStart reports whether b, JSON that failed to read, starts as a message
// would: an object's brace and then a member's quote (or its end), or a batch's
// bracket and an object's brace. Anything else (a banner's word, a number, a log's
// "[INFO]") is not a message and could not be one.
func messageStart(b []byte) bool {
	i := firstNonSpace(b)
	if i == len(b) {
		return true // nothing to judge by
	}
	open := b[i]
	if open != '{' && open != '[' {
		return false
	}
	j := i + 1 + firstNonSpace(b[i+1:])
	if j == len(b) {
		return true
	}
	if open == '{' {
		return b[j] == '"' || b[j] == '}'
	}
	return b[j] == '{' || b[j] == ']'
}

// notAMessage reports whether data, a JSON value read whole that is not a
// valid message, could not be one: a scalar ("text", 17, null), an object
// without a "jsonrpc" member (a JSON log record, whatever else it holds: a log
// record's "id", "method" or "error" says nothing of a message, and a message
// has a "jsonrpc"), or an array without such an object ([], a printed list). An
// object with a "jsonrpc" member (a wrong version tag, an ID of the wrong kind),
// or an array holding one, is a broken message, not noise.
func notAMessage(data []byte) bool {
	i := firstNonSpace(data)
	if i == len(data) {
		return false
	}
	switch data[i] {
	case '{':
		return !hasVersionTag(data)
	case '[':
		var batch []json.RawMessage
		if unmarshal(data, &batch) != nil {
			return false
		}
		for _, raw := range batch {
			if hasVersionTag(raw) {
				return false
			}
		}
	}
	return true
}

// hasVersionTag reports whether data, a JSON value, is an object with a
// "jsonrpc" member (of any value), as a message is; an object that does not
// decode is taken for one.
func hasVersionTag(data []byte) bool {
	if i := firstNonSpace(data); i == len(data) || data[i] != '{' {
		return false
	}
	var m struct {
		VersionTag json.RawMessage `json:"jsonrpc"`
	}
	return unmarshal(data, &m) != nil || m.VersionTag != nil
}

// heldReader reads the bytes held back first (put back by skipNoise), then r.
// What is put back is kept as it was given, not copied in front of what is held
// already: a run of short lines that are not messages puts back, at each line,
// what its decoder read past it, and copying that in front of the rest (up to a
// pipe's read, 64 KiB) at every line made the run's cost grow with its square.
type heldReader struct {
	r    io.Reader
	held [][]byte // the first to be read first; none empty
}

func (h *heldReader) Read(p []byte) (int, error) {
	if len(h.held) > 0 {
		n := copy(p, h.held[0])
		if h.held[0] = h.held[0][n:]; len(h.held[0]) == 0 {
			h.held[0] = nil
			h.held = h.held[1:]
		}
		return n, nil
	}
	return h.r.Read(p)
}

// hold puts b back before what is held already (b was read after it). The held
// pieces stay few: a new decoder reads b before the pieces behind it.
func (h *heldReader) hold(b []byte) {
	if len(b) > 0 {
		h.held = slices.Insert(h.held, 0, b)
	}
}

// skipLine reads on to the end of a line of which n bytes were read already,
// adding what it reads to text (see noiseText) and holding back what follows the
// line: errLineTooLong once the line has taken maxLineLength bytes, and the read's
// error if the stream ends first.
func (h *heldReader) skipLine(n int, text *[]byte) error {
	var buf [4 << 10]byte
	for {
		if n >= maxLineLength {
			return errLineTooLong
		}
		m, err := h.Read(buf[:min(len(buf), maxLineLength-n)])
		if i := bytes.IndexByte(buf[:m], '\n'); i >= 0 {
			*text = noiseText(*text, buf[:i])
			h.hold(bytes.Clone(buf[i+1 : m]))
			return nil
		}
		*text = noiseText(*text, buf[:m])
		n += m
		if err != nil {
			return err
		}
	}
}

// lineLimitReader fails a read once one message has taken maxLineLength bytes.
type lineLimitReader struct {
	r io.Reader
	n int
}

func (r *lineLimitReader) Read(p []byte) (int, error) {
	if r.n >= maxLineLength {
		return 0, errLineTooLong
	}
	if len(p) > maxLineLength-r.n {
		p = p[:maxLineLength-r.n]
	}
	n, err := r.r.Read(p)
	r.n += n
	return n, err
}

// SessionID implements mcp.Connection: a stdio connection has none.
func (c *lineConn) SessionID() string { return "" }

// Read implements mcp.Connection.
func (c *lineConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if c.stopped != nil {
		select {
		case <-c.stopped:
			return nil, io.EOF
		default:
		}
	}
	for len(c.queue) > 0 {
		next := c.queue[0]
		c.queue = c.queue[1:]
		if err := c.hold(ctx, next); errors.Is(err, errStopping) {
			continue // in flight: Shutdown answers it at the grace's end
		} else if err != nil {
			return nil, err
		}
		c.noteCancel(next)
		return next, nil
	}
	for {
		var v lineOrErr
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.stopped: // nil but on a front
			return nil, io.EOF
		case v = <-c.incoming:
			if v.err != nil {
				select {
				case <-c.closed:
					return nil, io.EOF // the read failed because we closed the stream
				default:
				}
				if c.isStopping() {
					return nil, c.awaitStopped(ctx) // Shutdown reports the end
				}
				if c.front && errors.Is(v.err, io.EOF) {
					c.drain(ctx)
				}
				return nil, v.err
			}
		case <-c.closed:
			return nil, io.EOF
		}
		if v.noise {
			c.noise(v.raw)
			continue
		}
		if v.tooLong {
			if err := c.answerBadLine(v.raw, errFrontLineTooLong); err != nil {
				return nil, err
			}
			continue
		}
		msgs, batch, err := decodeLine(v.raw, c.front)
		if err == nil && c.isStopping() {
			// Shutdown's grace: a new request is answered at once with its
			// error; the rest (a cancel, the answer to a request of the
			// server) goes to the go-sdk, as the requests in flight may wait
			// for it.
			if msgs, err = c.refuseCalls(msgs, batch); err != nil {
				return nil, err
			}
			if len(msgs) == 0 {
				continue
			}
			c.queue = msgs[1:]
			c.noteCancel(msgs[0])
			return msgs[0], nil
		}
		var initializer *jsonrpc.Request
		if err == nil && c.front && c.init.Load() == initNone {
			var refused *jsonrpc.Request
			if initializer, refused = uninitialized(msgs); refused != nil {
				err = notInitializedCause(refused) // answered as notInitialized answers it
			}
		}
		if err == nil && c.front {
			err = c.admit(msgs, len(v.raw))
		}
		switch {
		case err != nil || initializer == nil:
		case initializer.Method == "initialize":
			c.cancelMu.Lock()
			c.initID = initializer.ID
			c.cancelMu.Unlock()
			c.init.Store(initBegun)
		default: // a 2026-07-28 request: its _meta said what initialize would
			c.init.Store(initDone)
		}
		if err == nil {
			c.queue = msgs[1:] // kept even if the batch is refused below, as the SDK keeps them
			if batch {
				err = c.addBatch(msgs)
			}
		}
		if err == nil {
			if err := c.hold(ctx, msgs[0]); errors.Is(err, errStopping) {
				// In flight: Shutdown answers it at the grace's end; the rest
				// of its batch, queued, is read as the grace reads.
				return c.Read(ctx)
			} else if err != nil {
				return nil, err
			}
			c.noteCancel(msgs[0])
			return msgs[0], nil
		}
		if !c.front {
			if c.noise != nil && notAMessage(v.raw) {
				c.noise(v.raw[:min(len(v.raw), maxNoiseText)])
				continue
			}
			return nil, err
		}
		c.queue = nil
		if err := c.answerBadLine(v.raw, err); err != nil {
			return nil, err
		}
	}
}

// A batch of requests from the server (protocols before 2025-06-18) is answered
// with one array of the responses, once all are written, as the go-sdk's stdio
// connection answers it.
type batch struct {
	unresolved map[jsonrpc.ID]int // a request's place in responses
	responses  []*jsonrpc.Response
}

// addBatch notes the requests of a batch read; a request ID seen twice in it, or
// in a batch not yet answered, is an error.
func (c *lineConn) addBatch(msgs []jsonrpc.Message) error {
	var b *batch
	for _, msg := range msgs {
		req, ok := msg.(*jsonrpc.Request)
		if !ok || !req.IsCall() {
			continue
		}
		if b == nil {
			b = &batch{unresolved: map[jsonrpc.ID]int{}}
		}
		if _, ok := b.unresolved[req.ID]; ok {
			return fmt.Errorf("duplicate message ID %q", req.ID)
		}
		b.unresolved[req.ID] = len(b.responses)
		b.responses = append(b.responses, nil)
	}
	if b == nil {
		return nil
	}
	c.batchMu.Lock()
	defer c.batchMu.Unlock()
	for id := range b.unresolved {
		if _, ok := c.batches[id]; ok {
			return fmt.Errorf("invalid request: batch contains previously seen request %v", id.Raw())
		}
	}
	if c.batches == nil {
		c.batches = map[jsonrpc.ID]*batch{}
	}
	for id := range b.unresolved {
		c.batches[id] = b
	}
	return nil
}

// updateBatch records resp if it answers a request of a batch, and reports whether
// it did; the batch's responses are returned once all have been recorded.
func (c *lineConn) updateBatch(resp *jsonrpc.Response) ([]*jsonrpc.Response, bool) {
	c.batchMu.Lock()
	defer c.batchMu.Unlock()
	b, ok := c.batches[resp.ID]
	if !ok {
		return nil, false
	}
	b.responses[b.unresolved[resp.ID]] = resp
	delete(b.unresolved, resp.ID)
	delete(c.batches, resp.ID)
	if len(b.unresolved) == 0 {
		return b.responses, true
	}
	return nil, true
}

// hold takes a front's token for a request read, waiting for one while
// maxUnanswered requests wait for their answers.
func (c *lineConn) hold(ctx context.Context, msg jsonrpc.Message) error {
	if req, ok := msg.(*jsonrpc.Request); c.unanswered == nil || !ok || !req.IsCall() {
		return nil
	}
	select {
	case c.unanswered <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.closed:
		return io.EOF
	case <-c.stopping:
		return errStopping
	}
}

// admit notes, on a front, the IDs of the requests of a line read (one message,
// or a batch), and refuses the line if one of them is in use by a request not
// yet answered, or twice in the batch: MCP forbids it, and the go-sdk drops such
// a request unanswered (not to attribute its error to the other one), which left
// it holding its token of unanswered for good (4,096 of them, and the front read
// nothing more).
//
// The requests also take the bytes of their line from maxPending; a line that
// finds too few left is refused, unless nothing else is held (a line is at most
// maxLineLength).
func (c *lineConn) admit(msgs []jsonrpc.Message, size int) error {
	c.cancelMu.Lock()
	defer c.cancelMu.Unlock()
	calls := 0
	for i, msg := range msgs {
		req, ok := msg.(*jsonrpc.Request)
		if !ok || !req.IsCall() {
			continue
		}
		_, used := c.inFlight[req.ID]
		for _, other := range msgs[:i] {
			if o, ok := other.(*jsonrpc.Request); ok && o.IsCall() && o.ID == req.ID {
				used = true
			}
		}
		if used {
			return fmt.Errorf("%w: %s", errIDInUse, idText(req.ID))
		}
		calls++
	}
	if calls == 0 {
		return nil
	}
	if c.pending > 0 && c.pending+size > maxPending {
		return fmt.Errorf("%w: %d MiB held, at most %d MiB", errPendingFull, (c.pending+1<<20-1)>>20, maxPending>>20)
	}
	each := size / calls
	for _, msg := range msgs {
		if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() {
			if c.inFlight == nil {
				c.inFlight = map[jsonrpc.ID]inFlight{}
			}
			c.inFlight[req.ID] = inFlight{listen: req.Method == "subscriptions/listen", size: each}
			c.pending += each
		}
	}
	return nil
}

// The states of a front's initialization (lineConn.init).
const (
	initNone int32 = iota
	initBegun
	initDone
)

// initAnswered ends a front's initialization begun, if resp answers the request
// that began it: done with a result, not begun with an error (an initialize whose
// params the go-sdk could not read: its session is not initialized).
func (c *lineConn) initAnswered(resp *jsonrpc.Response) {
	c.cancelMu.Lock()
	defer c.cancelMu.Unlock()
	if resp.ID != c.initID {
		return
	}
	if resp.Error != nil {
		c.init.Store(initNone)
	} else {
		c.init.Store(initDone)
	}
}

// An inFlight is a request a front has read and not yet answered.
type inFlight struct {
	listen bool // a 2026-07-28 subscriptions/listen, answered only when it ends
	size   int  // its share of the bytes of its line
}

// maxPending bounds the bytes of the lines of the requests a front has read and
// not yet answered (a variable for tests): each line read is decoded, and its
// request forwarded, in copies that are all held until it is answered. A stdio
// client sending 20 calls of 15 MiB at once took a gateway to 1.8 GB, and it may
// have 1,024 of them in flight. As the HTTP front's body memory (32 MiB by
// default), past it a request is refused at once (not waited for: a request read
// later may be the answer the ones in flight wait for).
var maxPending = 64 << 20

// errPendingFull is a front's error for a request past maxPending.
var errPendingFull = errors.New("the requests in flight on this session hold as many bytes as the server reads at once: wait for their answers")

// awaited is the number of requests a front has read and not yet answered,
// listens left out: a listen is answered only when it ends.
func (c *lineConn) awaited() int {
	c.cancelMu.Lock()
	defer c.cancelMu.Unlock()
	n := 0
	for _, r := range c.inFlight {
		if !r.listen {
			n++
		}
	}
	return n
}

// answered forgets, on a front, the ID of a request being answered, and reports
// whether the front's Shutdown answered it already (its own answer is then
// dropped).
func (c *lineConn) answered(id jsonrpc.ID) (shut bool) {
	c.cancelMu.Lock()
	defer c.cancelMu.Unlock()
	if _, ok := c.shutAnswered[id]; ok {
		return true
	}
	if r, ok := c.inFlight[id]; ok {
		c.pending -= r.size
		delete(c.inFlight, id)
	}
	return false
}

// idText is an ID as JSON writes it.
func idText(id jsonrpc.ID) string {
	raw, err := json.Marshal(id.Raw())
	if err != nil {
		return "?"
	}
	return string(raw)
}

// drainGrace is how long a front, at the end of its stdin, lets the requests
// it has read and not yet answered run on before it reports the end (which has
// the go-sdk cancel them): a variable for tests.
var drainGrace = 5 * time.Second

// drain waits, on a front whose stdin has ended, until every request read has
// been answered (a 2026-07-28 listen aside: it lasts until its client ends it,
// which it can no longer do), for at most drainGrace (and until ctx ends or the
// connection is closed). A client that writes its requests and closes its stdin, as a
// shell pipeline or a script does (and as MCP's stdio shutdown begins, the
// client then waiting for the server to exit), gets their answers: the end
// reported at once had the go-sdk cancel them all, unanswered.
func (c *lineConn) drain(ctx context.Context) {
	c.settle(ctx, drainGrace)
}

// maxCancelled bounds the cancelled requests a front remembers: a client that
// cancels requests already answered leaves their IDs behind.
const maxCancelled = 1024

// noteCancel notes, on a front, a request its client cancels (MCP: the receiver
// of notifications/cancelled SHOULD NOT answer the request), and forgets a
// cancelled request's ID when the client uses it again for a new request (MCP
// forbids it; the new one is answered all the same). Requests of a batch are
// answered together, and are not noted.
func (c *lineConn) noteCancel(msg jsonrpc.Message) {
	req, ok := msg.(*jsonrpc.Request)
	if !ok || c.unanswered == nil {
		return
	}
	if req.IsCall() {
		if c.ncancelled.Load() > 0 {
			c.cancelMu.Lock()
			if _, ok := c.cancelled[req.ID]; ok {
				delete(c.cancelled, req.ID)
				c.ncancelled.Add(-1)
			}
			c.cancelMu.Unlock()
		}
		return
	}
	if req.Method != "notifications/cancelled" {
		return
	}
	var p struct {
		RequestID any `json:"requestId"`
	}
	if unmarshal(req.Params, &p) != nil {
		return
	}
	id, err := jsonrpc.MakeID(p.RequestID)
	if err != nil || !id.IsValid() {
		return
	}
	c.batchMu.Lock()
	_, inBatch := c.batches[id]
	c.batchMu.Unlock()
	if inBatch {
		return
	}
	c.cancelMu.Lock()
	defer c.cancelMu.Unlock()
	if c.cancelled == nil || len(c.cancelled) >= maxCancelled {
		c.cancelled = map[jsonrpc.ID]struct{}{}
	}
	c.cancelled[id] = struct{}{}
	c.ncancelled.Store(int32(len(c.cancelled)))
}

// dropAnswer reports whether the answer to request id is not to be written (its
// client cancelled it), and forgets the request.
func (c *lineConn) dropAnswer(id jsonrpc.ID) bool {
	if c.ncancelled.Load() == 0 {
		return false
	}
	c.cancelMu.Lock()
	defer c.cancelMu.Unlock()
	if _, ok := c.cancelled[id]; !ok {
		return false
	}
	delete(c.cancelled, id)
	c.ncancelled.Add(-1)
	return true
}

// Write implements mcp.Connection: one message, on one line.
func (c *lineConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	return c.write(ctx, msg, false)
}

// write writes msg; shut is set for the answers of a front's Shutdown, which go
// out whatever answered its ID before.
func (c *lineConn) write(ctx context.Context, msg jsonrpc.Message, shut bool) error {
	if resp, ok := msg.(*jsonrpc.Response); ok && c.front {
		// Before its answer goes out: the client may use the ID again once it
		// has it. One the front's Shutdown answered is not answered again.
		if c.answered(resp.ID) && !shut {
			return nil
		}
		if resp.Error != nil {
			if e := refusedAnswer(resp.Error); e != nil { // params that do not decode
				msg = &jsonrpc.Response{ID: resp.ID, Error: e}
			}
		}
	}
	if _, ok := msg.(*jsonrpc.Response); ok && c.unanswered != nil {
		defer func() { // once written, or not to be: its request is answered
			select {
			case <-c.unanswered:
			default:
			}
			select {
			case c.answeredOne <- struct{}{}:
			default:
			}
		}()
	}
	if resp, ok := msg.(*jsonrpc.Response); ok && c.front {
		if c.init.Load() == initBegun {
			c.initAnswered(resp)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if resp, ok := msg.(*jsonrpc.Response); ok && c.dropAnswer(resp.ID) {
		return nil // its request was cancelled: the client wants no answer
	}
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	var data []byte
	var err error
	if resp, ok := msg.(*jsonrpc.Response); ok {
		if all, ok := c.updateBatch(resp); ok {
			if all == nil {
				return nil // the batch's other responses are still to come
			}
			raws := make([]json.RawMessage, 0, len(all))
			for _, r := range all {
				raw, err := jsonrpc.EncodeMessage(r)
				if err != nil {
					return fmt.Errorf("encoding batch message: %w", err)
				}
				raws = append(raws, raw)
			}
			if data, err = json.Marshal(raws); err != nil {
				return err
			}
		}
	}
	if data == nil {
		if data, err = jsonrpc.EncodeMessage(msg); err != nil {
			return fmt.Errorf("marshaling message: %v", err)
		}
	}
	data = append(data, '\n')
	_, err = c.w.Write(data)
	return err
}

// Close implements mcp.Connection: it closes both ends (see procReader and
// procWriter for what that does to a child) and ends pending reads.
func (c *lineConn) Close() error {
	c.closeOnce.Do(func() {
		// Marked closed first: what closing the reader makes the read under way
		// fail with is then read as the end it is (see Read).
		close(c.closed)
		c.closeErr = errors.Join(c.r.Close(), c.w.Close())
	})
	return c.closeErr
}

// decodeLine decodes one value read from a stdio server: a message, or a
// batch of them (which the go-sdk's stdio connection accepts from a server at
// every protocol version, since its session never tells it the version). On a
// front (exactIDs), a numeric ID that the go-sdk's ID cannot hold exactly is an
// error (see exactID).
func decodeLine(data []byte, exactIDs bool) (msgs []jsonrpc.Message, isBatch bool, _ error) {
	if err := checkDepth(data); err != nil {
		return nil, false, err
	}
	if i := firstNonSpace(data); i < len(data) && data[i] == '[' {
		var batch []json.RawMessage
		if err := unmarshal(data, &batch); err == nil {
			if len(batch) == 0 {
				return nil, true, errors.New("empty batch")
			}
			msgs := make([]jsonrpc.Message, 0, len(batch))
			for _, raw := range batch {
				msg, err := decodeMessageIDs(raw, exactIDs)
				if err != nil {
					return nil, true, err
				}
				msgs = append(msgs, msg)
			}
			return msgs, true, nil
		}
	}
	msg, err := decodeMessageIDs(data, exactIDs)
	if err != nil {
		return nil, false, err
	}
	return []jsonrpc.Message{msg}, false, nil
}

// wireMessage is a JSON-RPC message as it is read (the go-sdk's own).
type wireMessage struct {
	VersionTag string          `json:"jsonrpc"`
	ID         any             `json:"id,omitempty"`
	Method     json.RawMessage `json:"method"`
	Params     json.RawMessage `json:"params,omitempty"`
	Result     json.RawMessage `json:"result,omitempty"`
	Error      *jsonrpc.Error  `json:"error,omitempty"`
}

// decodeMessage decodes one JSON-RPC message as jsonrpc.DecodeMessage does.
func decodeMessage(data []byte) (jsonrpc.Message, error) {
	return decodeMessageIDs(data, false)
}

// decodeMessageIDs decodes one JSON-RPC message as jsonrpc.DecodeMessage does; with
// exactIDs (a front's), a numeric ID must be written as the go-sdk writes it back
// (exactID), a string ID must decode to what it says (exactStringID), a request's
// ID must not be null, and a cancel must have none.
func decodeMessageIDs(data []byte, exactIDs bool) (jsonrpc.Message, error) {
	var msg wireMessage
	if err := unmarshal(data, &msg); err != nil {
		return nil, fmt.Errorf("unmarshaling jsonrpc message: %w", err)
	}
	if msg.VersionTag != "2.0" {
		return nil, fmt.Errorf("invalid message version tag %q; expected %q", msg.VersionTag, "2.0")
	}
	if exactIDs {
		// The ID as written (only a front's: a server's messages are read as the
		// go-sdk reads them, without a second look).
		var written struct {
			ID json.RawMessage `json:"id"`
		}
		if err := unmarshal(data, &written); err != nil {
			return nil, fmt.Errorf("unmarshaling jsonrpc message: %w", err)
		}
		switch msg.ID.(type) {
		case float64:
			if !exactID(written.ID) {
				return nil, errInexactNumber
			}
		case string:
			if !exactStringID(written.ID) {
				return nil, errInexactString
			}
		case nil:
			if len(msg.Method) > 0 && written.ID != nil {
				return nil, errNullID // written, as null (a message without one is a notification)
			}
		}
	}
	id, err := jsonrpc.MakeID(msg.ID)
	if err != nil {
		return nil, err
	}
	if len(msg.Method) > 0 {
		var method string
		if err := unmarshal(msg.Method, &method); err != nil {
			return nil, fmt.Errorf("unmarshaling jsonrpc message: %w", err)
		}
		if exactIDs && id.IsValid() && method == "notifications/cancelled" {
			return nil, errCancelWithID
		}
		return &jsonrpc.Request{Method: method, ID: id, Params: msg.Params}, nil
	}
	if !id.IsValid() {
		return nil, errInvalidRequest
	}
	resp := &jsonrpc.Response{ID: id, Result: msg.Result}
	if msg.Error != nil {
		resp.Error = msg.Error
	}
	return resp, nil
}

// exactID reports whether a numeric ID, as written (text), is one the go-sdk
// answers under the same text: an integer literal (no fraction, no exponent, not
// -0) below 2^53 in magnitude. The go-sdk decodes the number into a float64 and
// makes an int64 of it, written back as an integer: 1.5 and 1.0000000000000001
// would be answered under 1, 1.0 and 1e0 under 1, -0 under 0, 2^53+1 under 2^53. A
// client that matches answers by the ID as it wrote it (its text, or a number of
// its own that tells 1.0 from 1) would match such an answer to no request, or to
// another one. JSON-RPC asks for numbers without fractions, MCP for strings or
// integers.
func exactID(text []byte) bool {
	digits := bytes.TrimPrefix(text, []byte("-"))
	if len(digits) == 0 || len(digits) > 16 || (digits[0] == '0' && len(text) > 1) {
		return false // empty, 2^53 or more, or -0 (JSON has no other leading zero)
	}
	n := int64(0)
	for _, d := range digits {
		if d < '0' || d > '9' {
			return false
		}
		n = n*10 + int64(d-'0')
	}
	return n < 1<<53
}

// exactStringID reports whether a string ID, as written (text, its quotes
// included), is one the go-sdk answers under the same value: valid UTF-8, with
// no lone surrogate escaped (\ud800 not followed by a low surrogate, \udc00 not
// after a high one). The go-sdk decodes either as U+FFFD, and answers under it:
// a client that matched answers by the ID it wrote matched none (and two such
// IDs were one to the front). Other escapes are written back otherwise ("\u0061"
// as "a"), of the same value to any JSON decoder.
func exactStringID(text []byte) bool {
	if !utf8.Valid(text) {
		return false
	}
	high := false // the last escape was a high surrogate, to be followed by a low one
	for i := 0; i < len(text); i++ {
		if text[i] != '\\' {
			if high {
				return false
			}
			continue
		}
		i++ // a valid JSON string: an escape is whole
		if text[i] != 'u' {
			if high {
				return false
			}
			continue
		}
		r, err := strconv.ParseUint(string(text[i+1:i+5]), 16, 16)
		if err != nil {
			return false
		}
		i += 4
		switch {
		case r >= 0xd800 && r < 0xdc00:
			if high {
				return false
			}
			high = true
		case r >= 0xdc00 && r < 0xe000:
			if !high {
				return false
			}
			high = false
		case high:
			return false
		}
	}
	return !high
}

// errIDInUse is a front's error for a request whose ID is that of a request not
// yet answered.
var errIDInUse = errors.New("the request ID is in use by a request not yet answered")

// errFrontLineTooLong is a front's error for a line longer than maxLineLength.
var errFrontLineTooLong = fmt.Errorf("the line exceeds the maximum length of a message (%d bytes)", maxLineLength)

// errNullID is a front's error for a request whose ID is null: MCP forbids it
// (JSON-RPC discourages it), and the go-sdk took it for a notification: the
// request went unanswered, its client waiting for ever.
var errNullID = errors.New("a request's ID must be a string or an integer, not null")

// errCancelWithID is a front's error for a notifications/cancelled sent with an
// ID: the go-sdk refuses a notification's method with an ID, but acts on a cancel
// by its method first, so that it cancelled the request named (whose answer, its
// handler's error of code 0, was then written) and answered one whose params did
// not decode with the decoder's error (code 0, "EOF").
var errCancelWithID = errors.New(`unexpected id for "notifications/cancelled": a cancel is a notification`)

// errInexactID is a front's error for a request whose ID the go-sdk would answer
// under another: errInexactNumber, a number exactID refuses; errInexactString, a
// string exactStringID refuses.
var (
	errInexactID     = errors.New("the request ID would be answered under another")
	errInexactNumber = fmt.Errorf("%w: a numeric request ID must be written as an integer (no fraction, no exponent, not -0) between -2^53 and 2^53 (exclusive)", errInexactID)
	errInexactString = fmt.Errorf("%w: a string request ID must be valid UTF-8, without a lone surrogate (\\ud800-\\udfff)", errInexactID)
)

// errInvalidRequest is the error of a message that is neither a request nor
// a response (the go-sdk's jsonrpc2.ErrInvalidRequest, which is not exported).
var errInvalidRequest = &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "JSON RPC invalid request"}

// unmarshal decodes data into v as the go-sdk does (field names matched
// exactly), from the bytes themselves.
func unmarshal(data []byte, v any) error {
	rest, err := segjson.Parse(data, v, segjson.DontMatchCaseInsensitiveStructFields)
	if err != nil {
		return err
	}
	if i := firstNonSpace(rest); i < len(rest) {
		return fmt.Errorf("invalid character %q after top-level value", rest[i])
	}
	return nil
}

func firstNonSpace(b []byte) int {
	return len(b) - len(bytes.TrimLeft(b, " \t\r\n"))
}

// errTooDeep is the error of a message nested deeper than maxDepth.
var errTooDeep = fmt.Errorf("json: exceeded maximum nesting depth of %d", maxDepth)

// checkDepth reports errTooDeep if data nests objects and arrays deeper than
// maxDepth, in one pass that skips the contents of strings (as the go-sdk's
// own check does).
func checkDepth(data []byte) error {
	depth := 0
	inString, escaped := false, false
	for _, b := range data {
		if inString {
			switch {
			case escaped:
				escaped = false
			case b == '\\':
				escaped = true
			case b == '"':
				inString = false
			}
			continue
		}
		switch b {
		case '"':
			inString = true
		case '{', '[':
			depth++
			if depth > maxDepth {
				return errTooDeep
			}
		case '}', ']':
			if depth > 0 {
				depth--
			}
		}
	}
	return nil
}
