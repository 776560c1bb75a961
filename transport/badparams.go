package transport

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Params that do not decode.
//
// The go-sdk decodes a request's params into their type before any middleware
// runs (mcp/shared.go, handleReceive), and answers params that do not decode
// itself, with the decoder's error wrapped as "handling 'METHOD': %w". In
// v1.8.0 that answer has code -32602 (invalid params), except for initialize
// (mcp/server.go, initializeMethodInfo: its decoder does not wrap
// jsonrpc2.ErrInvalidParams), whose answer has code 0, no JSON-RPC code; and
// its message quotes the whole params (%q), however long they are, and names
// the go-sdk's Go types. The answer is re-coded as it goes out (refusedAnswer):
// -32602, with a message that names the field and quotes at most maxQuoted bytes
// of the request (a field's name), and the go-sdk's -32600 for required params
// that are null or missing, initialize's too. Where the error value reaches a
// connection of ours (the stdio front's, and a client's to a server over
// stdio, in memory or SSE) it is read from the error; the streamable HTTP
// front sees only the encoded answer, and re-decodes the request's params
// (ParamsRefusal), on that error's path alone.

// sdkRefusal is how the go-sdk's answer to params that do not decode begins.
const sdkRefusal = "handling '"

// maxQuoted bounds what of a request an answer to its params quotes.
const maxQuoted = 64

// refusedMethod returns the method of the go-sdk's refusal of a request's params,
// given its answer's message, and whether the message is one.
func refusedMethod(message string) (string, bool) {
	rest, ok := strings.CutPrefix(message, sdkRefusal)
	if !ok {
		return "", false
	}
	method, _, ok := strings.Cut(rest, "': ")
	return method, ok
}

// sdkRefusalText reports whether message, of an answer to a request of method, is
// the go-sdk's refusal of its params, as its server words it: "handling 'M': "
// around its invalid params error ("invalid params: unmarshaling %q into a %T:
// %w"), its invalid request error ("invalid request: missing required
// \"params\""), or initialize's error ("unmarshaling %q into a %T: %w",
// "missing required \"params\"").
func sdkRefusalText(method, message string) bool {
	rest, ok := strings.CutPrefix(message, sdkRefusal+method+"': ")
	if !ok {
		return false
	}
	if method == "initialize" {
		rest = strings.TrimPrefix(rest, "invalid params: ")
		return strings.HasPrefix(rest, `unmarshaling "`) || rest == missingParams
	}
	return strings.HasPrefix(rest, `invalid params: unmarshaling "`) || rest == "invalid request: "+missingParams
}

// refusedAnswer returns the answer in place of err, a request handler's error,
// where err is the go-sdk's refusal of the request's params, or its answer to a
// method it does not handle (which quoted the whole method: see methodNotFound);
// nil otherwise. Both are the go-sdk's wrappings (fmt.Errorf with %w) around the
// cause; an error a handler returned as it is, a *jsonrpc.Error (a backend's own,
// passed on by the gateway), is never one, whatever its message says.
func refusedAnswer(err error) *jsonrpc.Error {
	if e := passedOf(err); e != nil {
		return e // a backend's -32601, as it was (see PassError)
	}
	inner := errors.Unwrap(err)
	if _, ok := err.(*jsonrpc.Error); ok || inner == nil {
		return nil
	}
	message := err.Error()
	var je *jsonrpc.Error
	if errors.As(err, &je) && je.Code == jsonrpc.CodeMethodNotFound {
		if rest, ok := strings.CutPrefix(message, notFound); ok {
			if method, err := strconv.Unquote(rest); err == nil {
				return methodNotFound(method)
			}
		}
		return nil
	}
	method, ok := refusedMethod(message)
	if !ok || message != sdkRefusal+method+"': "+inner.Error() {
		return nil // not "handling 'M': %w" around inner
	}
	cause := refusalCause(err)
	if cause == nil && !strings.HasSuffix(message, missingParams) {
		return invalidParamsOf(method) // a refusal this reading does not know
	}
	return paramsRefusal(cause)
}

// notFound begins the go-sdk's answer to a request of a method it does not handle
// (its jsonrpc2's, with the method quoted).
const notFound = "method not found: "

// methodNotFound is the answer to a request of method, which no one handles: the
// go-sdk's, quoting at most maxQuoted bytes of the method (the go-sdk quoted it
// whole, however long).
func methodNotFound(method string) *jsonrpc.Error {
	return &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: notFound + quoteBounded(method)}
}

// missingParams ends the go-sdk's refusal of params null or missing.
const missingParams = `missing required "params"`

// invalidParamsOf is the answer to a request of method whose params do not
// decode, where the decoder's error is not known.
func invalidParamsOf(method string) *jsonrpc.Error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("invalid params of %.40q", method)}
}

// refusalCause returns the decoder's error that the go-sdk's refusal err wraps:
// "handling 'M': %w" around "%w: unmarshaling %q into a %T: %w" (the invalid
// params error, then the decoder's), or initialize's "unmarshaling %q into a
// %T: %w". It returns nil where the params were null or missing ("%w: missing
// required \"params\"" around the invalid request error, or initialize's error
// wrapping nothing).
func refusalCause(err error) error {
	switch inner := errors.Unwrap(err).(type) {
	case interface{ Unwrap() []error }:
		for _, e := range inner.Unwrap() {
			var je *jsonrpc.Error
			if !errors.As(e, &je) {
				return e
			}
		}
	case interface{ Unwrap() error }:
		var je *jsonrpc.Error
		if e := inner.Unwrap(); !errors.As(e, &je) {
			return e
		}
	}
	return nil
}

// paramsRefusal returns the answer to a request whose params did not decode,
// cause being the decoder's error; nil cause: they were null or missing.
func paramsRefusal(cause error) *jsonrpc.Error {
	if cause == nil {
		// As the go-sdk answers every other method's.
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "invalid request: " + missingParams}
	}
	var msg string
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(cause, &te):
		what := "params" // the whole value: Field names none
		if where, ok := strings.CutSuffix(cause.Error(), te.Error()); ok && where != "" {
			// A decoder of the go-sdk's own (of a map of input responses)
			// says where, around the type error of a value of it.
			where = strings.TrimSuffix(where, ": ")
			if te.Field != "" {
				where += "." + te.Field
			}
			what = quoteBounded(where)
		} else if te.Field != "" {
			what = quoteBounded(te.Field)
		}
		msg = fmt.Sprintf("%s must be %s, not %s", what, jsonKind(te.Type), valueKind(te.Value))
	case errors.As(cause, &se):
		msg = "params are not valid JSON"
	default:
		// Not a decoder's type error (nesting too deep, a value its type's
		// own decoding refused): said in so many bytes.
		msg = boundedText(cause.Error(), 2*maxQuoted)
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "invalid params: " + msg}
}

// jsonKind names the JSON values a Go type decodes from.
func jsonKind(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "another value"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "another value"
}

// valueKind names the kind of JSON value an UnmarshalTypeError's Value says was
// found: a kind ("number", as encoding/json says), or the start of the value,
// quoted (as the go-sdk's decoder says).
func valueKind(v string) string {
	if strings.HasPrefix(v, "number ") && strings.HasSuffix(v, " overflows") {
		return "a number out of its range"
	}
	if s, err := strconv.Unquote(v); err == nil {
		v = s
	}
	v = strings.TrimLeft(v, " \t\r\n")
	if v == "" {
		return "another value"
	}
	switch {
	case v[0] == '"' || v == "string":
		return "a string"
	case v[0] == '{' || v == "object":
		return "an object"
	case v[0] == '[' || v == "array":
		return "an array"
	case strings.HasPrefix(v, "true") || strings.HasPrefix(v, "false") || v == "bool":
		return "a boolean"
	case strings.HasPrefix(v, "null"):
		return "null"
	case v[0] == '-' || ('0' <= v[0] && v[0] <= '9') || v == "number":
		return "a number"
	}
	return "another value"
}

// quoteBounded quotes s, cut to maxQuoted bytes (at a rune's start) and marked so.
func quoteBounded(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	return strconv.Quote(cutRunes(s, maxQuoted)) + "…"
}

// boundedText is s cut to n bytes (at a rune's start) and marked so.
func boundedText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return cutRunes(s, n) + "…"
}

func cutRunes(s string, n int) string {
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// serverParams are the params the go-sdk's server decodes the requests it takes
// into, by method (mcp/server.go, serverMethodInfos); initialize's, which it
// decodes into a variant of mcp.InitializeParams, fail to decode as these do.
var serverParams = map[string]func() any{
	"completion/complete":      func() any { return new(mcp.CompleteParams) },
	"server/discover":          func() any { return new(mcp.DiscoverParams) },
	"initialize":               func() any { return new(mcp.InitializeParams) },
	"ping":                     func() any { return new(mcp.PingParams) },
	"prompts/list":             func() any { return new(mcp.ListPromptsParams) },
	"prompts/get":              func() any { return new(mcp.GetPromptParams) },
	"tools/list":               func() any { return new(mcp.ListToolsParams) },
	"tools/call":               func() any { return new(mcp.CallToolParamsRaw) },
	"resources/list":           func() any { return new(mcp.ListResourcesParams) },
	"resources/templates/list": func() any { return new(mcp.ListResourceTemplatesParams) },
	"resources/read":           func() any { return new(mcp.ReadResourceParams) },
	"logging/setLevel":         func() any { return new(mcp.SetLoggingLevelParams) },
	"resources/subscribe":      func() any { return new(mcp.SubscribeParams) },
	"resources/unsubscribe":    func() any { return new(mcp.UnsubscribeParams) },
	"subscriptions/listen":     func() any { return new(mcp.SubscriptionsListenParams) },
}

// decodeParams decodes the params of a request of method as the go-sdk's server
// does, and returns the decoder's error; nil, with null params.
func decodeParams(method string, params json.RawMessage) (cause error, refused bool) {
	if p := bytes.TrimSpace(params); len(p) == 0 || bytes.Equal(p, []byte("null")) {
		return nil, true
	}
	newParams := serverParams[method]
	if newParams == nil {
		return nil, false
	}
	if err := checkDepth(params); err != nil {
		return err, true
	}
	if err := unmarshal(params, newParams()); err != nil {
		return err, true
	}
	return nil, false
}

// A PostBody is the body of a POST to the go-sdk's streamable HTTP handler, held
// while the handler writes its answers, for ParamsRefusal. Its requests are decoded
// at most once, at the first answer that needs them: a batch's refusals each
// decoded the whole body (a 4 MiB batch of requests whose params do not decode,
// on a 2025-03-26 session, took minutes of CPU). Its methods are called from one
// goroutine at a time (the handler's writes to one response are).
type PostBody struct {
	data     []byte
	decoded  bool
	requests map[jsonrpc.ID]*jsonrpc.Request // by ID, the first of each
}

// NewPostBody holds data, the body of a POST (nil: none held).
func NewPostBody(data []byte) PostBody { return PostBody{data: data} }

// Bytes returns the body held: nil if none is.
func (b *PostBody) Bytes() []byte {
	if b == nil {
		return nil
	}
	return b.data
}

func (b *PostBody) held() bool { return b.Bytes() != nil }

// request returns the request of the body whose ID is id, if any.
func (b *PostBody) request(id jsonrpc.ID) *jsonrpc.Request {
	if !b.held() {
		return nil
	}
	if !b.decoded {
		b.decoded = true
		msgs, _, _ := decodeLine(b.data, false)
		for _, m := range msgs {
			r, ok := m.(*jsonrpc.Request)
			if !ok || !r.IsCall() {
				continue
			}
			if b.requests == nil {
				b.requests = make(map[jsonrpc.ID]*jsonrpc.Request)
			}
			if _, ok := b.requests[r.ID]; !ok {
				b.requests[r.ID] = r
			}
		}
	}
	return b.requests[id]
}

// ParamsRefusal returns what to write in place of frame, a message the go-sdk's
// streamable HTTP handler writes to the response of a POST whose body is body
// (an SSE event, or a JSON body), where the message is the go-sdk's answer to a
// request of the body whose params do not decode (see refusedAnswer); nil
// otherwise. It looks no further than a message's ID unless the message is an
// error. An error is the go-sdk's refusal only where the request it answers
// (found in body by its ID) is refused as the go-sdk refuses it: an error with
// the same words, a backend's passed on, is left as it is. With body nil only the
// go-sdk's own words tell its refusal, and the answer names no field.
func ParamsRefusal(frame []byte, body *PostBody) []byte {
	f, ok := errorFrame(frame)
	if !ok {
		return nil
	}
	resp, we := f.resp, f.err
	if we.Data != nil {
		return nil // the go-sdk's refusals carry no data
	}
	method, handling := refusedMethod(we.Message)
	switch {
	case handling:
		if !body.held() && !sdkRefusalText(method, we.Message) {
			// Which request it answers is not known: only the go-sdk's
			// words say it is its refusal.
			return nil
		}
	case we.Code == jsonrpc.CodeMethodNotFound && strings.HasPrefix(we.Message, "JSON RPC not handled: "):
		// On 2026-07-28 the go-sdk's handler answers a method it does not
		// handle itself ("JSON RPC not handled: %q unsupported", with 404),
		// quoting the whole method: answered as a session answers it. (A
		// session's answer of code -32601 is the go-sdk's jsonrpc2's "method
		// not found: %q", or a backend's error passed on: see PassError.)
	case we.Code == mcp.CodeHeaderMismatch:
		// On 2026-07-28 the go-sdk's handler reads a request's name
		// (Mcp-Name) from params it cannot decode (mcp/streamable_headers.go,
		// validateMcpHeaders) as one that does not match its header.
		rest, found := strings.CutPrefix(we.Message, "failed to extract name from parameters for method ")
		var err error
		if method, err = strconv.Unquote(rest); !found || err != nil {
			return nil
		}
	default:
		return nil
	}
	req := body.request(resp.ID) // the request answered
	// The answer, where it is the go-sdk's refusal of the request answered
	// (a backend's error, passed on, may say anything): the request's method
	// is not handled, or its params do not decode as the go-sdk's server
	// decodes them.
	var answer *jsonrpc.Error
	switch {
	case req == nil && !body.held() && handling:
		if answer = paramsRefusal(nil); !strings.HasSuffix(we.Message, missingParams) {
			answer = invalidParamsOf(method)
		}
	case req == nil:
	case we.Code == jsonrpc.CodeMethodNotFound && !handling:
		if we.Message == "JSON RPC not handled: "+strconv.Quote(req.Method)+" unsupported" {
			answer = methodNotFound(req.Method)
		}
	case req.Method == method:
		if cause, refused := decodeParams(method, req.Params); refused {
			answer = paramsRefusal(cause)
		}
	}
	if answer == nil {
		return nil
	}
	return f.with(answer)
}

// errorAnswerStart reports whether data, a message as the go-sdk encodes it
// ({"jsonrpc":"2.0","id":ID,"error":...), is an error answer, and where the
// error begins: the length of its {"jsonrpc":"2.0","id":ID. It reads no
// further than the ID.
func errorAnswerStart(data []byte) (int, bool) {
	const prefix = `{"jsonrpc":"2.0","id":`
	if !bytes.HasPrefix(data, []byte(prefix)) {
		return 0, false
	}
	i := len(prefix)
	if i < len(data) && data[i] == '"' {
		for i++; i < len(data) && data[i] != '"'; i++ {
			if data[i] == '\\' {
				i++
			}
		}
		i++
	} else {
		for i < len(data) && strings.IndexByte("-+.0123456789eE", data[i]) >= 0 {
			i++
		}
	}
	if i > len(data) || !bytes.HasPrefix(data[i:], []byte(`,"error":`)) {
		return 0, false
	}
	return i, true
}
