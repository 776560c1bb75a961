package transport

import (
	"bytes"
	"encoding/json"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// A backend's error of code -32601 (method not found), passed on to a front's client.
//
// The go-sdk's jsonrpc2 answers a request whose handler returned an error of code
// -32601 (processResult: errors.Is ErrMethodNotFound, and a *jsonrpc.Error is that
// error by its code alone) with its own `method not found: "M"`, whatever the
// error said: a backend's own -32601 (a backend without completion/complete or
// resources/subscribe, its message saying so and its data what it has) reached the
// front's client in the go-sdk's words, its message and data lost. PassError hides
// the code from that test; where the answer reaches a connection of ours (the stdio
// front's lineConn.write) the error is put back whole (refusedAnswer); over
// streamable HTTP the go-sdk encodes the answer itself, with the error's code and
// message but not its data, which the front puts back as it writes the answer
// (PassedAnswer).

// passedError is a backend's error of code -32601 passed on (see PassError): not
// the go-sdk's ErrMethodNotFound to errors.Is, the backend's error to errors.As.
type passedError struct{ e *jsonrpc.Error }

func (p *passedError) Error() string { return p.e.Message }

// As gives the backend's error: the go-sdk's encoding of an error that is no
// *jsonrpc.Error takes its code from it (its message from Error).
func (p *passedError) As(target any) bool {
	t, ok := target.(**jsonrpc.Error)
	if ok {
		*t = p.e
	}
	return ok
}

// PassError returns e, a backend's JSON-RPC error, as a front's request handler
// returns it for the front's client to get it as it was (code, message, data): e
// itself, but for code -32601, which the go-sdk would answer in words of its own
// (see above).
func PassError(e *jsonrpc.Error) error {
	if e == nil || e.Code != jsonrpc.CodeMethodNotFound {
		return e
	}
	return &passedError{e}
}

// passedOf returns the backend's error of err, if err is one PassError made for
// -32601; nil otherwise.
func passedOf(err error) *jsonrpc.Error {
	if p, ok := err.(*passedError); ok {
		return p.e
	}
	return nil
}

// PassedAnswer returns what to write in place of frame, a message the go-sdk's
// streamable HTTP handler writes to a POST's response (an SSE event, or a JSON
// body), where the message is an error of code -32601 without data that passed
// finds by its message: a backend's error passed on (PassError), whose data the
// go-sdk's encoding dropped; nil otherwise. It looks no further than a message's
// ID unless the message is an error.
func PassedAnswer(frame []byte, passed func(message string) *jsonrpc.Error) []byte {
	f, ok := errorFrame(frame)
	if !ok || f.err.Code != jsonrpc.CodeMethodNotFound || f.err.Data != nil {
		return nil
	}
	e := passed(f.err.Message)
	if e == nil || e.Data == nil {
		return nil
	}
	return f.with(e)
}

// A frame is an error answer the go-sdk's streamable HTTP handler writes: head and
// tail around the message (an SSE event's; none for a JSON body), the message's
// bytes up to its ID's end (start), and the answer decoded.
type frame struct {
	head, start, tail []byte
	resp              *jsonrpc.Response
	err               *jsonrpc.Error
}

// errorFrame reads an answer the go-sdk's streamable HTTP handler writes, if it is
// an error: an answer that is no error (a call's result, of any size) is told from
// its first bytes.
func errorFrame(data []byte) (frame, bool) {
	head, tail := data[:0], data[len(data):]
	if !(len(data) > 0 && data[0] == '{') { // an SSE event: the message is its data
		i := bytes.Index(data, []byte("data: "))
		if i < 0 {
			return frame{}, false
		}
		head, data = data[:i+len("data: ")], data[i+len("data: "):]
		if _, ok := errorAnswerStart(data); !ok {
			return frame{}, false
		}
		j := bytes.IndexByte(data, '\n')
		if j < 0 {
			return frame{}, false
		}
		data, tail = data[:j], data[j:]
	}
	start, ok := errorAnswerStart(data)
	if !ok {
		return frame{}, false
	}
	msg, err := jsonrpc.DecodeMessage(data)
	if err != nil {
		return frame{}, false
	}
	resp, ok := msg.(*jsonrpc.Response)
	var we *jsonrpc.Error
	if !ok || !errors.As(resp.Error, &we) {
		return frame{}, false
	}
	return frame{head: head, start: data[:start], tail: tail, resp: resp, err: we}, true
}

// with returns the frame with e in place of its error.
func (f frame) with(e *jsonrpc.Error) []byte {
	encoded, err := json.Marshal(e)
	if err != nil {
		return nil
	}
	out := make([]byte, 0, len(f.head)+len(f.start)+len(`,"error":}`)+len(encoded)+len(f.tail))
	out = append(append(out, f.head...), f.start...)
	out = append(append(append(out, `,"error":`...), encoded...), '}')
	return append(out, f.tail...)
}
