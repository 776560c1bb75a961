package transport

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ServerStdio returns the transport of an MCP server that speaks over a host's
// pipes: r is the server's stdin, w its stdout (which the connection's Close
// leaves open, as the go-sdk's mcp.StdioTransport does). It is the stdio front
// of mcpfsm serve.
//
// Messages are read as the MCP stdio transport frames them, one per line, and
// each is decoded once from the bytes read (as a stdio server's messages are:
// see lineConn). Unlike the go-sdk's mcp.StdioTransport, a line that is not a
// message does not end the session, and with it the gateway: it is answered with
// a JSON-RPC error and skipped. The error is -32700 (parse error) for a line
// that is not JSON and -32600 (invalid request) for JSON that is not a message
// or for a line longer than the go-sdk's limit (mcp.DefaultMaxLineLength, of
// which no more is held in memory); its id is the line's, where one can be
// read (of a line too long, the top-level "id" wherever it is written), and
// null otherwise. Blank lines are skipped, and a UTF-8 byte order
// mark that starts the stream. Batches are accepted as
// the go-sdk accepts them before a session's protocol is negotiated. While 4,096
// requests read wait for their answers to be written (a client that reads none),
// no more is read. A request that would take the lines of the requests read and
// not answered past 64 MiB gets -32603 at once (one alone is taken whatever its
// size). A request its client cancels (notifications/cancelled) is not
// answered, as MCP asks (the go-sdk's server would answer it with its handler's
// error), unless it came in a batch. A request whose ID is that of a request not
// yet answered (MCP forbids it; the go-sdk drops it unanswered) gets -32600
// under that ID, as JSON-RPC asks of an ID it could read (a batch holding one,
// or one ID twice, gets it with a null id, as a batch refused whole). The
// client then has two answers under one ID; a null id, the other choice, is
// an answer no client can match. The ID's answer goes to the request the
// client made last under it: a client keeps its requests in a map by ID (the
// TypeScript, Python and Go SDKs do), so the reused ID had replaced the one in
// flight there, whose answer it then drops as unknown; and a client that
// reused the ID of a request it had cancelled (whose answer the front drops)
// gets exactly one answer. A numeric ID must be written as an integer below
// 2^53 in magnitude, without fraction or exponent, and not -0 (the go-sdk's ID,
// an int64 made from a float64, would answer 1.5, 1.0 and 1.0000000000000001
// under 1: see exactID), and a string ID valid UTF-8 without a lone surrogate
// escaped (decoded as U+FFFD: see exactStringID): another gets -32600 under the
// ID as it was written. A request whose ID is
// null (MCP forbids it; the go-sdk took it for a notification, never answered)
// gets -32600 with a null id. A notifications/cancelled sent with an ID gets
// -32600 under it, and cancels nothing (the go-sdk acted on it as a cancel).
// Until the session is initialized (an initialize read, and answered with a
// result; or a request whose _meta names protocol 2026-07-28 read), a request the
// go-sdk's server refuses there gets -32600 from the front (see Uninitialized; the
// go-sdk's error has code 0, no JSON-RPC code). A request whose params the
// go-sdk's server cannot decode gets -32602 with a message that names the field
// and quotes at most 64 bytes of the request; one whose required params are null,
// -32600 (the go-sdk answered initialize's with code 0, and quoted the whole params
// in every such answer: see badparams.go).
// At the end of r, the requests read and not yet answered get up to 5 s to be
// answered (a client that writes its requests and closes its end, as a script
// or MCP's stdio shutdown does, gets their answers), then the session ends; a
// 2026-07-28 subscriptions/listen, answered only when it ends, is not waited for.
// A server that stops (a signal) ends the session with StdioFront.Shutdown.
func ServerStdio(r io.ReadCloser, w io.Writer) *StdioFront {
	return &StdioFront{r: r, w: w}
}

// A StdioFront is ServerStdio's transport: it connects once.
type StdioFront struct {
	r io.ReadCloser
	w io.Writer

	mu   sync.Mutex
	conn *lineConn
}

// Connect implements mcp.Transport.
func (t *StdioFront) Connect(context.Context) (mcp.Connection, error) {
	incoming := make(chan lineOrErr)
	c := &lineConn{r: t.r, w: openWriter{t.w}, incoming: incoming, closed: make(chan struct{}), front: true,
		unanswered: make(chan struct{}, maxUnanswered), answeredOne: make(chan struct{}, 1),
		stopping: make(chan struct{}), stopped: make(chan struct{})}
	t.mu.Lock()
	t.conn = c
	t.mu.Unlock()
	go c.readLines(incoming)
	return c, nil
}

// Shutdown ends the front's session for a server that stops, as the HTTP front's
// shutdown ends its requests: the requests read and not yet answered get up to
// grace to be answered (a 2026-07-28 subscriptions/listen,
// answered only when it ends, is not waited for); then each still unanswered
// gets a JSON-RPC error (-32603, message) written by the front (its own answer,
// if it comes later, is dropped; a request its client cancelled gets none), and
// the session's reads report the end, which has the go-sdk cancel its
// handlers. It returns once the errors are written (or a write failed: a
// write to stdout is bounded only by its file's deadline) or ctx ends, and at
// once if the session has not connected or has closed. Reading goes on through
// the grace: a notification (a cancel: the request gets no answer) or a response
// (the client's answer to a request of the server, such as sampling, a request in
// flight waits for) goes to the go-sdk as usual; a new request is answered at
// once with the same error, and not handed on. It is safe to call more
// than once: later calls wait for the first.
func (t *StdioFront) Shutdown(ctx context.Context, grace time.Duration, message string) error {
	t.mu.Lock()
	c := t.conn
	t.mu.Unlock()
	if c == nil {
		return nil
	}
	return c.shutdown(ctx, grace, message)
}

func (c *lineConn) shutdown(ctx context.Context, grace time.Duration, message string) error {
	first := false
	c.stopOnce.Do(func() {
		first = true
		c.shutMessage = message
		close(c.stopping)
	})
	if !first {
		select {
		case <-c.stopped:
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}
	defer close(c.stopped)
	c.settle(ctx, grace)
	c.cancelMu.Lock()
	ids := make([]jsonrpc.ID, 0, len(c.inFlight))
	for id := range c.inFlight {
		ids = append(ids, id)
	}
	if len(ids) > 0 && c.shutAnswered == nil {
		c.shutAnswered = make(map[jsonrpc.ID]struct{}, len(ids))
	}
	for _, id := range ids {
		c.shutAnswered[id] = struct{}{}
	}
	c.cancelMu.Unlock()
	var errs []error
	for _, id := range ids {
		select {
		case <-c.closed:
			return errors.Join(errs...)
		default:
		}
		resp := &jsonrpc.Response{ID: id, Error: &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: message}}
		if err := c.write(ctx, resp, true); err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
		}
	}
	return errors.Join(errs...)
}

// errStopping is hold's error for a request read as a front's Shutdown begins:
// the request is in flight, and Shutdown answers it at the grace's end.
var errStopping = errors.New("the front is shutting down")

// isStopping reports whether a front's Shutdown has begun.
func (c *lineConn) isStopping() bool {
	if c.stopping == nil {
		return false
	}
	select {
	case <-c.stopping:
		return true
	default:
		return false
	}
}

// refuseCalls answers, during a front's Shutdown grace, the requests (calls) of
// a line read at once with Shutdown's error (-32603): they are not handed to the
// go-sdk, nor noted in flight, so that nothing else answers them and Shutdown
// does not wait for them. The calls of a batch are answered in one array, as a
// batch is. It returns the line's other messages (notifications, among them a
// cancel of a request in flight, and responses, such as the client's answer to
// a sampling request a call in flight waits for), to be handed on as usual.
func (c *lineConn) refuseCalls(msgs []jsonrpc.Message, batch bool) ([]jsonrpc.Message, error) {
	var rest []jsonrpc.Message
	var answers []json.RawMessage
	for _, msg := range msgs {
		req, ok := msg.(*jsonrpc.Request)
		if !ok || !req.IsCall() {
			rest = append(rest, msg)
			continue
		}
		c.noteCancel(req) // a cancelled request's ID used again: forgotten
		raw, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: req.ID,
			Error: &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: c.shutMessage}})
		if err != nil {
			return nil, fmt.Errorf("encoding the answer to a request read during the shutdown: %w", err)
		}
		answers = append(answers, raw)
	}
	if len(answers) == 0 {
		return rest, nil
	}
	data := []byte(answers[0])
	if batch {
		var err error
		if data, err = json.Marshal(answers); err != nil {
			return nil, err
		}
	}
	data = append(data, '\n')
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if _, err := c.w.Write(data); err != nil {
		return nil, err
	}
	return rest, nil
}

// settle waits until every request read has been answered (a 2026-07-28 listen
// aside), for at most grace, and until ctx ends or the connection is closed.
func (c *lineConn) settle(ctx context.Context, grace time.Duration) {
	if c.awaited() == 0 {
		return
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	for c.awaited() > 0 {
		select {
		case <-c.answeredOne:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		case <-c.closed:
			return
		}
	}
}

// awaitStopped is a read once a front's Shutdown has begun: it waits until the
// requests left are answered, then reports the end.
func (c *lineConn) awaitStopped(ctx context.Context) error {
	select {
	case <-c.stopped:
		return io.EOF
	case <-c.closed:
		return io.EOF
	case <-ctx.Done():
		return ctx.Err()
	}
}

// openWriter leaves a front's stdout open when its connection closes.
type openWriter struct{ io.Writer }

func (openWriter) Close() error { return nil }

// readLines reads a front's messages, one per line; a line longer than
// maxLineLength is read to its end, keeping only its ID (see readLine), and
// handed on as too long. It ends as readLoop does.
func (c *lineConn) readLines(incoming chan<- lineOrErr) {
	br := bufio.NewReaderSize(c.r, 64<<10)
	for first := true; ; first = false {
		line, tooLong, err := readLine(br)
		if first {
			// A byte order mark that starts the stream is skipped (RFC 8259
			// lets a parser ignore it; Windows PowerShell writes one to a
			// native command's stdin): the client's first message, its
			// initialize, was a parse error.
			line = bytes.TrimPrefix(line, utf8BOM)
		}
		if err == nil && !tooLong && len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if err != nil && len(line) > 0 {
			// The last line, not ended by a newline: read as a message, then
			// the end.
			select {
			case incoming <- lineOrErr{raw: line, tooLong: tooLong}:
			case <-c.closed:
				return
			}
		}
		if err != nil {
			line, tooLong = nil, false
		}
		select {
		case incoming <- lineOrErr{raw: line, err: err, tooLong: tooLong}:
		case <-c.closed:
			return
		}
		if err != nil {
			return
		}
	}
}

// utf8BOM is the byte order mark of UTF-8.
var utf8BOM = []byte("\xef\xbb\xbf")

// readLine reads one line (without its end) of at most maxLineLength bytes; of a
// longer line it reads the rest, saying it was too long, and returns only its ID:
// {"id":ID}, the top-level member "id" of the object the line holds, wherever it
// is written (a client may write it last, as the TypeScript SDK does), or nothing
// if there is none to be found. Without its ID the refusal's answer names no
// request (id null): the TypeScript SDK's client waited for the request's answer
// until its timeout, and the go-sdk's ended its session.
func readLine(br *bufio.Reader) (line []byte, tooLong bool, err error) {
	var ids idScanner
	for {
		chunk, err := br.ReadSlice('\n')
		switch {
		case tooLong:
			ids.feed(chunk)
		case len(line)+len(chunk) > maxLineLength+1: // +1: the newline
			tooLong = true
			ids.feed(line)
			ids.feed(chunk)
			line = nil
		default:
			line = append(line, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if tooLong {
			if ids.id != nil {
				line = append(append([]byte(`{"id":`), ids.id...), '}')
			}
		} else {
			line = bytes.TrimSuffix(line, []byte("\n"))
		}
		return line, tooLong, err
	}
}

// maxIDBytes bounds the ID an idScanner keeps: a longer one is not looked for.
const maxIDBytes = 256

// An idScanner finds the top-level member "id" of a JSON object read in pieces,
// keeping no more of it than the ID's own text (at most maxIDBytes): id is the
// last such member's value, as the front's decoding takes it (its name matched
// exactly, once unescaped: see isIDName), if it is a string or a
// number (or true, false, null: the answer's probe refuses them). It reads
// whatever it is given without failing; for text that is not an object (a batch,
// say) it finds nothing.
type idScanner struct {
	depth      int  // of objects and arrays, outside strings
	inString   bool // in a string
	escaped    bool // in a string, after a backslash
	expectKey  bool // at depth 1: the next string is a member's name
	inKey      bool // reading a member's name at depth 1
	key        []byte
	keyIsID    bool // the member name last read at depth 1 is "id"
	valueIsID  bool // at depth 1, after "id": the next value is the ID
	inID       bool // reading the ID
	candidate  []byte
	id         []byte // the ID found
	overlength bool   // the ID being read is longer than maxIDBytes
}

func (s *idScanner) feed(p []byte) {
	for _, b := range p {
		s.step(b)
	}
}

func (s *idScanner) step(b byte) {
	if s.inString {
		closing := !s.escaped && b == '"'
		s.escaped = !s.escaped && b == '\\'
		if s.inKey {
			if closing {
				s.inKey = false
				s.keyIsID = isIDName(s.key)
			} else if len(s.key) <= maxIDName {
				s.key = append(s.key, b)
			}
		}
		if s.inID {
			s.keep(b)
			if closing {
				s.endID()
			}
		}
		if closing {
			s.inString = false
		}
		return
	}
	if s.inID { // a number (or a literal): it ends where a separator begins
		switch b {
		case ' ', '\t', '\r', '\n', ',', '}', ']':
			s.endID()
		default:
			s.keep(b)
			return
		}
	}
	switch b {
	case ' ', '\t', '\r', '\n':
	case '"':
		s.inString = true
		switch {
		case s.depth == 1 && s.expectKey:
			s.inKey, s.key, s.expectKey = true, s.key[:0], false
		case s.depth == 1 && s.valueIsID:
			s.valueIsID = false
			s.startID(b)
		}
	case '{', '[':
		if s.depth == 1 && s.valueIsID {
			s.valueIsID, s.id = false, nil // an object or an array: no ID
		}
		if s.depth == 0 && b == '{' {
			s.expectKey = true
		}
		s.depth++
	case '}', ']':
		s.depth--
	case ',':
		if s.depth == 1 {
			s.expectKey = true
		}
	case ':':
		if s.depth == 1 {
			s.valueIsID, s.keyIsID = s.keyIsID, false
		}
	default:
		if s.depth == 1 && s.valueIsID {
			s.valueIsID = false
			s.startID(b)
		}
	}
}

// maxIDName is the longest a member's name, as written, can be and be "id": each
// of its letters escaped (\u0069\u0064).
const maxIDName = 12

// isIDName reports whether a member's name, as written between its quotes (its
// first maxIDName+1 bytes at most), is "id" once unescaped: the front matches
// names exactly, as the go-sdk does (see unmarshal), so "ID" is not one, and
// "\u0069d" is.
func isIDName(name []byte) bool {
	if len(name) > maxIDName {
		return false
	}
	if bytes.IndexByte(name, '\\') < 0 {
		return string(name) == "id"
	}
	var v string
	return json.Unmarshal(append(append([]byte{'"'}, name...), '"'), &v) == nil && v == "id"
}

func (s *idScanner) startID(b byte) {
	s.inID, s.overlength, s.candidate = true, false, append(s.candidate[:0], b)
}

func (s *idScanner) keep(b byte) {
	if len(s.candidate) < maxIDBytes {
		s.candidate = append(s.candidate, b)
	} else {
		s.overlength = true
	}
}

func (s *idScanner) endID() {
	s.inID = false
	s.id = nil
	if !s.overlength {
		s.id = append([]byte(nil), s.candidate...)
	}
}

// maxUnanswered is the most requests a front reads before their answers are
// written: past it the front reads no more until one is. A client that writes
// requests and reads no answers otherwise holds a goroutine for each, blocked
// writing its answer (a variable for tests).
var maxUnanswered = 4096

// maxAnswerMessage bounds the message of an error answering a line: the
// cause of an invalid request may quote the line's parts.
const maxAnswerMessage = 512

// answerBadLine writes the error answering a line that is not a message.
func (c *lineConn) answerBadLine(line []byte, cause error) error {
	data, err := badLine(line, cause)
	if err != nil {
		return err
	}
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	_, err = c.w.Write(append(data, '\n'))
	return err
}

// badLine encodes the error answering a line that is not a message, cause being
// why (the decoder's error, or the front's).
func badLine(line []byte, cause error) ([]byte, error) {
	code, message := int64(jsonrpc.CodeInvalidRequest), "Invalid request: "+cause.Error()
	if len(message) > maxAnswerMessage {
		message = message[:maxAnswerMessage] + "…"
	}
	if !json.Valid(line) {
		code, message = jsonrpc.CodeParseError, "Parse error: the line is not JSON"
		var syn *json.SyntaxError
		if err := json.Unmarshal(line, new(any)); errors.As(err, &syn) {
			message += ": " + syn.Error()
		}
	}
	if errors.Is(cause, errFrontLineTooLong) {
		code, message = jsonrpc.CodeInvalidRequest, "Invalid request: "+cause.Error()
	}
	if errors.Is(cause, errPendingFull) {
		code, message = jsonrpc.CodeInternalError, cause.Error()
	}
	return refusal(line, &jsonrpc.Error{Code: code, Message: message})
}

// refusal encodes the JSON-RPC error e answering line, a message (or a batch) a
// front refuses, under the line's ID as it was written, where it is a string or a
// number (a number the go-sdk's ID cannot hold exactly included: see exactID);
// null otherwise (a batch, a line with no readable ID). An ID in use by a request
// not yet answered is no exception (see ServerStdio).
// Its member is named "id" exactly, as the front's decoding matches names (see
// unmarshal), after its escapes: encoding/json's struct fields match "ID" too, and
// a line holding both "id" and "ID" was refused under the "ID", whatever request
// that named. (A map, not unmarshal: a line refused for its depth must not reach a
// decoder without a bound on it.)
func refusal(line []byte, e *jsonrpc.Error) ([]byte, error) {
	id := json.RawMessage("null")
	var probe map[string]json.RawMessage
	if json.Unmarshal(line, &probe) == nil && probe["id"] != nil {
		var v any
		if json.Unmarshal(probe["id"], &v) == nil {
			switch v.(type) {
			case string, float64:
				id = probe["id"]
			}
		}
	}
	return json.Marshal(struct {
		Version string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   *jsonrpc.Error  `json:"error"`
	}{"2.0", id, e})
}
