package transport

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// FuzzParamsRefusal: the answer to params that do not decode, whatever they are,
// is -32602 (or -32600, for null), in at most 400 bytes, and quotes no more than
// maxQuoted bytes of them.
func FuzzParamsRefusal(f *testing.F) {
	big := strings.Repeat("x", 4096)
	for _, seed := range []string{
		`{"protocolVersion":5}`, `[1]`, `null`, `{"name":7}`, `{"uri":{}}`, `{"cursor":99999999999999999999999}`,
		`{"name":"p","arguments":{"` + big + `":7}}`, `{"name":"t","inputResponses":{"` + big + `":5}}`,
		`{"capabilities":{"roots":["` + big + `"]}}`, `{"level":["` + big + `"]}`, `{"ref":{"type":5}}`,
		strings.Repeat("[", 1100) + strings.Repeat("]", 1100), `{"_meta":5}`, `"` + big + `"`,
	} {
		f.Add(uint8(0), seed)
	}
	methods := slices.Sorted(func(yield func(string) bool) {
		for m := range serverParams {
			if !yield(m) {
				return
			}
		}
	})
	f.Fuzz(func(t *testing.T, m uint8, params string) {
		if !json.Valid([]byte(params)) {
			return // the go-sdk reads only messages that are JSON
		}
		for i := range methods {
			method := methods[(int(m)+i)%len(methods)]
			cause, refused := decodeParams(method, json.RawMessage(params))
			if !refused {
				continue
			}
			e := paramsRefusal(cause)
			if want := int64(jsonrpc.CodeInvalidParams); cause == nil {
				if e.Code != jsonrpc.CodeInvalidRequest {
					t.Errorf("%s %.100s: code %d for params null", method, params, e.Code)
				}
			} else if e.Code != want {
				t.Errorf("%s %.100s: code %d", method, params, e.Code)
			}
			if len(e.Message) > 400 {
				t.Errorf("%s %.100s: %d bytes: %.500s", method, params, len(e.Message), e.Message)
			}
			if len(params) <= 8192 {
				for i := 0; i+maxQuoted+1 <= len(params); i++ {
					if w := params[i : i+maxQuoted+1]; strings.Contains(e.Message, w) {
						t.Errorf("%s: the answer %q quotes %q", method, e.Message, w)
						break
					}
				}
			}
		}
	})
}

// TestParamsRefusalWhere: the answer names where in the params the value that
// does not decode is, and what it should have been.
func TestParamsRefusalWhere(t *testing.T) {
	for _, c := range []struct{ method, params, want string }{
		{"initialize", `{"protocolVersion":5}`, `invalid params: "protocolVersion" must be a string, not a number`},
		{"initialize", `{"capabilities":{"roots":[1]}}`, `invalid params: "capabilities.roots" must be an object, not an array`},
		{"tools/call", `[1]`, `invalid params: params must be an object, not an array`},
		{"tools/call", `{"name":true}`, `invalid params: "name" must be a string, not a boolean`},
		{"tools/call", `{"name":"t","inputResponses":{"k":5}}`, `invalid params: "inputResponses[\"k\"]" must be an object, not a number`},
		{"tools/list", `{"cursor":null,"_meta":"m"}`, `invalid params: "_meta" must be an object, not a string`},
		{"resources/read", `{"uri":{"a":1}}`, `invalid params: "uri" must be a string, not an object`},
		{"completion/complete", `{"ref":{"type":"ref/prompt","name":"p"},"argument":{"name":"a","value":1e400}}`, `invalid params: "argument.value" must be a string, not a number`},
	} {
		cause, refused := decodeParams(c.method, json.RawMessage(c.params))
		if !refused {
			t.Errorf("%s %s: decoded", c.method, c.params)
			continue
		}
		if got := paramsRefusal(cause).Message; got != c.want {
			t.Errorf("%s %s:\n got %s\nwant %s", c.method, c.params, got, c.want)
		}
	}
}

// TestParamsRefusalFrames: only the go-sdk's refusal of params is re-coded, in its
// frame (an SSE event, or a JSON body), under the ID as it was written; an answer
// with a result is looked at no further than its ID.
func TestParamsRefusalFrames(t *testing.T) {
	body := []byte(`{"jsonrpc":"2.0","id":"a\"b","method":"tools/call","params":{"name":7}}`)
	sdk := `{"jsonrpc":"2.0","id":"a\"b","error":{"code":-32602,"message":"handling 'tools/call': invalid params: unmarshaling \"{\\\"name\\\":7}\" into a *mcp.CallToolParamsRaw: json: cannot unmarshal..."}}`
	want := `{"jsonrpc":"2.0","id":"a\"b","error":{"code":-32602,"message":"invalid params: \"name\" must be a string, not a number"}}`
	for _, c := range []struct{ frame, want string }{
		{sdk, want},
		{"event: message\nid: 3_0\ndata: " + sdk + "\n\n", "event: message\nid: 3_0\ndata: " + want + "\n\n"},
		{`{"jsonrpc":"2.0","id":"a\"b","result":{"content":[{"type":"text","text":"handling 'x': "}]}}`, ""},
		{`{"jsonrpc":"2.0","id":"a\"b","error":{"code":-32602,"message":"unknown tool \"x\""}}`, ""},
		{`{"jsonrpc":"2.0","method":"notifications/progress","params":{}}`, ""},
	} {
		if got := string(ParamsRefusal([]byte(c.frame), held(body))); got != c.want {
			t.Errorf("%q:\n got %q\nwant %q", c.frame, got, c.want)
		}
	}
	// Without the body, or a request of another ID: the field is not named.
	if got := string(ParamsRefusal([]byte(sdk), nil)); !strings.Contains(got, `"code":-32602,"message":"invalid params of \"tools/call\""`) {
		t.Errorf("without the body: %s", got)
	}
}

// TestParamsRefusalLookalikes: an error answer that reads like the go-sdk's refusal
// of a request but is not its refusal of the request answered (a backend's error
// passed on by the gateway: its request's params decode, its method is another,
// it carries data) is left as it is, with the body held and without.
func TestParamsRefusalLookalikes(t *testing.T) {
	good := []byte(`{"jsonrpc":"2.0","id":"a\u0022b","method":"prompts/get","params":{"name":"p"}}`)
	bad := []byte(`{"jsonrpc":"2.0","id":"a\"b","method":"prompts/get","params":{"name":7}}`)
	answer := func(code int, message, data string) string {
		if data != "" {
			data = `,"data":` + data
		}
		m, _ := json.Marshal(message)
		return `{"jsonrpc":"2.0","id":"a\"b","error":{"code":` + strconv.Itoa(code) + `,"message":` + string(m) + data + `}}`
	}
	for _, c := range []struct {
		frame string
		body  []byte
	}{
		{answer(-32000, "handling 'payment': card declined", ""), good},
		{answer(-32000, "handling 'payment': card declined", ""), nil},
		{answer(-32000, "handling 'payment': card declined", ""), bad},
		{answer(-32602, `handling 'prompts/get': invalid params: unmarshaling "{}" into a *T: no`, ""), good},
		{answer(-32602, `handling 'prompts/get': invalid params: unmarshaling "{}" into a *T: no`, `{"k":1}`), bad},
		{answer(-32602, `handling 'prompts/get': invalid params: unmarshaling "{}" into a *T: no`, `{"k":1}`), nil},
		{answer(-32600, `handling 'prompts/get': invalid request: missing required "params"`, ""), good},
		{answer(-32601, `JSON RPC not handled: "prompts/list" unsupported`, ""), good},
		{answer(-32601, `JSON RPC not handled: "prompts/get" unsupported`, ""), nil},
		{answer(-32020, `failed to extract name from parameters for method "prompts/get"`, ""), good},
	} {
		if got := ParamsRefusal([]byte(c.frame), held(c.body)); got != nil {
			t.Errorf("%s (body %.30s) was re-coded: %s", c.frame, c.body, got)
		}
	}
	// The go-sdk's refusal of the request answered, ID escaped or not.
	sdk := answer(-32602, `handling 'prompts/get': invalid params: unmarshaling "{\"name\":7}" into a *mcp.GetPromptParams: json: no`, "")
	for _, body := range [][]byte{bad, bytes.Replace(bad, []byte(`"a\"b"`), []byte(`"a\u0022b"`), 1), nil} {
		if got := ParamsRefusal([]byte(sdk), held(body)); !bytes.Contains(got, []byte(`"id":"a\"b","error":{"code":-32602,"message":"invalid params`)) {
			t.Errorf("the go-sdk's refusal (body %s) was re-coded: %s", body, got)
		}
	}
}

// held is body held, or none.
func held(body []byte) *PostBody {
	b := NewPostBody(body)
	return &b
}

// TestParamsRefusalBatch: the refusals of a batch's requests (a 2025-03-26
// session's POST, each answered by an event of its own) are re-coded in time
// linear in the body: each decoded the whole body, and 20,000 of them (1.4 MB)
// took minutes of CPU (a 4 MiB body, hours). The bound is generous: linear
// takes well under a second.
func TestParamsRefusalBatch(t *testing.T) {
	const n = 20000
	var b strings.Builder
	b.WriteString("[")
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":7}}`, i)
	}
	b.WriteString("]")
	body := held([]byte(b.String()))
	start := time.Now()
	for i := range n {
		frame := fmt.Sprintf("event: message\nid: s_%d\ndata: {\"jsonrpc\":\"2.0\",\"id\":%d,\"error\":{\"code\":-32602,\"message\":%q}}\n\n",
			i, i, `handling 'tools/call': invalid params: unmarshaling "{\"name\":7}" into a *mcp.CallToolParamsRaw: json: no`)
		want := fmt.Sprintf("event: message\nid: s_%d\ndata: {\"jsonrpc\":\"2.0\",\"id\":%d,\"error\":{\"code\":-32602,\"message\":%q}}\n\n",
			i, i, `invalid params: "name" must be a string, not a number`)
		if got := string(ParamsRefusal([]byte(frame), body)); got != want {
			t.Fatalf("answer %d:\n got %q\nwant %q", i, got, want)
		}
		if d := time.Since(start); d > 30*time.Second {
			t.Fatalf("%d of %d refusals re-coded in %v", i+1, n, d)
		}
	}
	t.Logf("%d refusals of a %d-byte batch re-coded in %v", n, b.Len(), time.Since(start))
}

// BenchmarkParamsRefusalResult: what the HTTP front's look at each answer it writes
// (ParamsRefusal) costs on a call's result of 1 MiB in an SSE event: its first bytes
// say it is no error, and the rest is not read.
func BenchmarkParamsRefusalResult(b *testing.B) {
	frame := []byte("event: message\nid: 1_0\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"" +
		strings.Repeat("x", 1<<20) + "\"}]}}\n\n")
	body := NewPostBody([]byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"a"}}`))
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		if ParamsRefusal(frame, &body) != nil {
			b.Fatal("a result was re-coded")
		}
	}
}
