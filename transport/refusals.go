package transport

// A front's refusals of what a client sent, as JSON-RPC errors under the request's
// ID wherever one can be found: a request a session not yet initialized cannot take
// (Uninitialized), a body over the size of a message (TooLarge), and a request the
// go-sdk's streamable HTTP handler refused before any session saw it (Unhandled). The
// refusals of params the go-sdk's server cannot decode are in badparams.go.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// errNotInitialized is a front's error for a request its session cannot take
// before initialize.
var errNotInitialized = errors.New("the session is not initialized: a session begins with initialize")

// notInitialized returns the JSON-RPC error of a request that a session not yet
// initialized refuses, or nil: a request (not a notification) other than
// initialize, ping and the few others the go-sdk's server takes before initialize
// (logging/setLevel, resources/subscribe and unsubscribe, server/discover), unless
// its _meta names a protocol of 2026-07-28 or later (such a request carries what
// initialize would say). The go-sdk's server refuses it too, with an error of code 0,
// which is no JSON-RPC code (and an error record in the server's log each time): a
// front refuses it first, with -32600 (invalid request). The TypeScript SDK's server
// answers so over streamable HTTP (HTTP 400, with -32000).
func notInitialized(req *jsonrpc.Request) *jsonrpc.Error {
	if !req.IsCall() || initializes(req) {
		return nil
	}
	switch req.Method {
	case "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe", "server/discover":
		return nil
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "Invalid request: " + notInitializedCause(req).Error()}
}

// notInitializedCause is why req is refused before initialize (see notInitialized).
func notInitializedCause(req *jsonrpc.Request) error {
	return fmt.Errorf("%w (%.40q came first)", errNotInitialized, req.Method)
}

// initializes reports whether req begins its session: an initialize, or a request
// whose _meta names a protocol of 2026-07-28 or later (as the go-sdk's server takes
// it).
func initializes(req *jsonrpc.Request) bool {
	if req.Method == "initialize" {
		return true
	}
	var p struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	if len(req.Params) == 0 || unmarshal(req.Params, &p) != nil {
		return false
	}
	var version string
	return unmarshal(p.Meta[mcp.MetaKeyProtocolVersion], &version) == nil && NewProtocol(version)
}

// Uninitialized returns the JSON-RPC error answering data (a message, or a batch of
// them) sent on a session not yet initialized, encoded as the stdio front writes it
// (under the message's ID; null for a batch), where data holds a request the session
// cannot take before initialize and none that initializes the session; nil
// otherwise, and for data that is no message (the go-sdk answers that). See the
// stdio front (ServerStdio) for the requests refused.
func Uninitialized(data []byte) []byte {
	msgs, _, err := decodeLine(data, false)
	if err != nil {
		return nil
	}
	_, refused := uninitialized(msgs)
	if refused == nil {
		return nil
	}
	answer, err := refusal(data, notInitialized(refused))
	if err != nil {
		return nil // left to the go-sdk, which refuses it too
	}
	return answer
}

// uninitialized looks at the messages of a line (or body) read on a session not
// yet initialized: it returns the first request that initializes the session, if
// any, and otherwise the first request the session refuses, if any.
func uninitialized(msgs []jsonrpc.Message) (initializer, refused *jsonrpc.Request) {
	for _, msg := range msgs {
		req, ok := msg.(*jsonrpc.Request)
		if !ok {
			continue
		}
		if initializes(req) {
			return req, nil
		}
		if refused == nil && notInitialized(req) != nil {
			refused = req
		}
	}
	return nil, refused
}

// TooLarge returns the JSON-RPC error answering a message longer than limit bytes,
// of which prefix is what was read, encoded as the stdio front writes its refusal of
// a line too long (-32600, under the message's ID), where prefix holds the ID (the
// top-level "id" wherever it is written, found as the stdio front finds it); nil
// where it holds none. An HTTP front answers a body over its limit with it, beside
// its status: the go-sdk's client ends its whole session at a status whose body is
// no JSON-RPC answer, and takes one that is for the failure of that request alone.
func TooLarge(prefix []byte, limit int64) []byte {
	var ids idScanner
	ids.feed(prefix)
	if ids.id == nil {
		return nil
	}
	line := append(append([]byte(`{"id":`), ids.id...), '}')
	e := &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: fmt.Sprintf("Invalid request: the request body exceeds the maximum size of a message (%d bytes)", limit)}
	answer, err := refusal(line, e)
	if err != nil {
		return nil
	}
	return answer
}

// Unhandled returns the JSON-RPC answer to body, a POST's body that the go-sdk's
// streamable HTTP server refused before any session saw it, with HTTP 400 and text
// (its checkRequest's error: a method it does not handle, an ID on a notification's
// method, required params missing, or no ID on a request's method; or its decoding's
// error, a body that is no message), answered as the stdio front answers it:
//   - a request refused by checkRequest, as a session answers it: -32601 (method
//     not found) for a method not handled, -32600 (invalid request) otherwise,
//     under the request's ID, quoting at most a bounded part of the request (call
//     set: the request was a call, which a session answers);
//   - a notification so refused, with the same error and no ID, beside the HTTP
//     error status, as MCP's streamable HTTP transport asks (2025-11-25 and
//     2026-07-28: "If the server cannot accept it, it MUST return an HTTP error
//     status code (e.g., 400 Bad Request). The HTTP response body MAY comprise a
//     JSON-RPC error response that has no id");
//   - a body the stdio front refuses as a line (not JSON, an ID neither string
//     nor number, or null), refused by the go-sdk's decoding or checkRequest, as
//     the stdio front answers it: -32700 or -32600, under the ID as written where
//     it is a string or a number, null otherwise.
//
// It returns nil where text is no refusal of the body (a refusal of the request's
// headers stands), and for a batch (the go-sdk's refusal of one stands).
func Unhandled(body []byte, text string) (answer []byte, call bool) {
	text = strings.TrimSpace(text)
	if !bodyRefusal(text) {
		return nil, false // a refusal of the request's headers, not of its body
	}
	msgs, isBatch, err := decodeLine(body, true)
	if err != nil {
		answer, err = badLine(body, err)
		if err != nil {
			return nil, false
		}
		return answer, false
	}
	if isBatch || len(msgs) != 1 {
		return nil, false
	}
	req, ok := msgs[0].(*jsonrpc.Request)
	if !ok {
		return nil, false
	}
	var e *jsonrpc.Error
	switch {
	case strings.HasPrefix(text, "JSON RPC not handled: "):
		e = methodNotFound(req.Method)
	case strings.HasPrefix(text, "invalid request: "):
		e = &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: boundedText(text, 2*maxQuoted)}
	default:
		return nil, false
	}
	if !req.IsCall() {
		answer, err = json.Marshal(struct {
			Version string         `json:"jsonrpc"`
			Error   *jsonrpc.Error `json:"error"`
		}{"2.0", e})
		if err != nil {
			return nil, false
		}
		return answer, false
	}
	answer, err = refusal(body, e)
	if err != nil {
		return nil, false
	}
	return answer, true
}

// bodyRefusal reports whether text is the go-sdk's streamable HTTP handler's
// refusal of a POST's body (its decoding's, or checkRequest's), not of its headers
// (Accept, Mcp-Protocol-Version, Last-Event-ID: those stand as they are).
func bodyRefusal(text string) bool {
	for _, prefix := range []string{"malformed payload: ", "POST requires a non-empty body", "JSON RPC not handled: ", "invalid request: "} {
		if strings.HasPrefix(text, prefix) {
			return true
		}
	}
	return false
}

// RefusedBody returns the answer to body, a POST's body, that the stdio front
// refuses as a line and the go-sdk's HTTP handler takes:
//   - a request whose ID the go-sdk would answer under another (see exactID,
//     exactStringID): it answers 1.5 and 1.0000000000000001 under 1, 1e3 under
//     1000, 9007199254740993 under 9007199254740992, and "\ud800" under "\ufffd";
//   - a batch holding one request ID twice (MCP forbids it): it answers one of
//     the two and drops the other unanswered.
//
// The answer is the stdio front's to such a line: -32600, under the ID as written
// (null for a batch). It returns nil otherwise. Every POST's body is looked at,
// but decoded only where it is a batch, or a member "id" is followed by a number
// that is no plain integer of at most 15 digits, or is -0, or by a string that
// escapes a surrogate or is no UTF-8, or where a letter of "id" is written as an
// escape anywhere ("\u0069d", which the go-sdk's decoding takes for "id").
func RefusedBody(body []byte) []byte {
	i := firstNonSpace(body)
	batch := i < len(body) && body[i] == '['
	if !batch && !mayBeInexact(body) {
		return nil
	}
	msgs, _, err := decodeLine(body, true)
	if err == nil && batch {
		err = duplicateID(msgs)
	}
	if !errors.Is(err, errInexactID) && !errors.Is(err, errIDInUse) {
		return nil
	}
	answer, err := badLine(body, err)
	if err != nil {
		return nil
	}
	return answer
}

// duplicateID returns an error if two requests of msgs (a batch) have one ID, as
// the stdio front's admit refuses them.
func duplicateID(msgs []jsonrpc.Message) error {
	seen := make(map[jsonrpc.ID]bool, len(msgs))
	for _, msg := range msgs {
		req, ok := msg.(*jsonrpc.Request)
		if !ok || !req.IsCall() {
			continue
		}
		if seen[req.ID] {
			return fmt.Errorf("%w: %s", errIDInUse, idText(req.ID))
		}
		seen[req.ID] = true
	}
	return nil
}

// mayBeInexact reports whether data holds a member "id" (at any depth) whose value
// is a number with a fraction, an exponent, or more than 15 digits, or is -0; or a
// string that escapes a surrogate (\uD800 to \uDFFF) or is not valid UTF-8; or
// whether data escapes a letter of "id" anywhere (a member's name may be written
// so, "\u0069d" or "i\u0064", and is "id" to the go-sdk's decoding as to the stdio
// front's).
func mayBeInexact(data []byte) bool {
	if escapesIDLetter(data) {
		return true
	}
	const name = `"id"`
	for {
		i := bytes.Index(data, []byte(name))
		if i < 0 {
			return false
		}
		data = data[i+len(name):]
		j := firstNonSpace(data)
		if j == len(data) || data[j] != ':' {
			continue
		}
		data = data[j+1:]
		data = data[firstNonSpace(data):]
		if n, suspect := stringValue(data); n > 0 {
			if suspect {
				return true
			}
			data = data[n:]
			continue
		}
		n, digits, plain := number(data)
		if digits > 0 && (!plain || digits > 15 || bytes.HasPrefix(data, []byte("-0"))) {
			return true
		}
		data = data[n:]
	}
}

// escapesIDLetter reports whether data holds \u0069 or \u0064, an escaped "i" or
// "d" (their hexadecimal digits are digits: no other case).
func escapesIDLetter(data []byte) bool {
	for {
		i := bytes.Index(data, []byte(`\u006`))
		if i < 0 {
			return false
		}
		data = data[i+len(`\u006`):]
		if len(data) > 0 && (data[0] == '9' || data[0] == '4') {
			return true
		}
	}
}

// number reads the number that data begins with, if any: its length, how many
// digits it has, and whether it is plain (an integer, its sign at most).
func number(data []byte) (n, digits int, plain bool) {
	plain = true
	for ; n < len(data); n++ {
		switch c := data[n]; {
		case '0' <= c && c <= '9':
			digits++
		case c == '-' && n == 0:
		case c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-':
			plain = false
		default:
			return n, digits, plain
		}
	}
	return n, digits, plain
}

// stringValue reads the JSON string that data begins with, if any: its length
// (0 if data begins with none, or it does not end), and whether it may decode to
// another value than it says (see exactStringID): it escapes a surrogate, or is
// not valid UTF-8.
func stringValue(data []byte) (n int, suspect bool) {
	if len(data) == 0 || data[0] != '"' {
		return 0, false
	}
	ascii := true
	for i := 1; i < len(data); i++ {
		switch c := data[i]; {
		case c == '"':
			return i + 1, suspect || (!ascii && !utf8.Valid(data[:i]))
		case c == '\\':
			if i+5 < len(data) && data[i+1] == 'u' && (data[i+2] == 'd' || data[i+2] == 'D') && strings.IndexByte("89abcdefABCDEF", data[i+3]) >= 0 {
				suspect = true
			}
			i++
		case c >= 0x80:
			ascii = false
		}
	}
	return 0, false
}
