package transport

import (
	"bytes"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/internal/testutil"
)

// FuzzPostAnswers: what the HTTP front writes in place of the go-sdk's answers and
// refusals (ParamsRefusal, Unhandled, TooLarge), whatever the frames, texts and
// bodies, never panics and is bounded: a re-coded frame is at most its frame and
// a short error longer; Unhandled's answer at most its body's ID and a short error;
// TooLarge's at most a short error with an ID of at most maxIDBytes.
func FuzzPostAnswers(f *testing.F) {
	sdk := `{"jsonrpc":"2.0","id":"a\"b","error":{"code":-32602,"message":"handling 'tools/call': invalid params: unmarshaling \"{\\\"name\\\":7}\" into a *mcp.CallToolParamsRaw: json: no"}}`
	for _, seed := range []struct{ frame, body, text string }{
		{sdk, `{"jsonrpc":"2.0","id":"a\"b","method":"tools/call","params":{"name":7}}`, "JSON RPC not handled: \"x\" unsupported"},
		{"event: message\nid: 1\ndata: " + sdk + "\n\n", `[{"jsonrpc":"2.0","id":"a\u0022b","method":"tools/call","params":{"name":7}}]`, "invalid request: missing required \"params\""},
		{`{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"JSON RPC not handled: \"x\" unsupported"}}`, `{"jsonrpc":"2.0","id":1,"method":"x"}`, "JSON RPC not handled: \"x\" unsupported\n"},
		{`{"jsonrpc":"2.0","id":1,"error":{"code":-32020,"message":"failed to extract name from parameters for method \"tools/call\""}}`, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":[]}}`, ""},
		{`{"jsonrpc":"2.0","id":"` + strings.Repeat(`\"`, 100) + `","error":{}}`, strings.Repeat("{", 1000), strings.Repeat(`\`, 100)},
		{"data: {\"jsonrpc\":\"2.0\",\"id\":1", `{"id":` + strings.Repeat("9", 300) + `}`, "invalid request: "},
		{"", `{"jsonrpc":"2.0","id":1.5,"method":"ping","params":{"x":{"id":1e99}}}`, "malformed payload: x"},
		{"", `[{"jsonrpc":"2.0","id":"a\uDBFFb","method":"ping"}]`, ""},
		{"", `[{"jsonrpc":"2.0","id":7,"method":"ping"},{"jsonrpc":"2.0","id":-0,"method":"ping"}]`, ""},
	} {
		f.Add([]byte(seed.frame), []byte(seed.body), seed.text, int64(100))
	}
	f.Fuzz(func(t *testing.T, frame, body []byte, text string, limit int64) {
		for _, b := range []*PostBody{nil, held(body)} {
			if out := ParamsRefusal(frame, b); out != nil && len(out) > len(frame)+512 {
				t.Errorf("ParamsRefusal: %d bytes in place of %d", len(out), len(frame))
			}
		}
		if out, _ := Unhandled(body, text); out != nil && len(out) > len(body)+512 {
			t.Errorf("Unhandled: %d bytes for a body of %d", len(out), len(body))
		}
		if out := RefusedBody(body); out != nil && len(out) > len(body)+512 {
			t.Errorf("RefusedBody: %d bytes for a body of %d", len(out), len(body))
		}
		// A body whose ID the decoding refuses as one answered under another is
		// decoded (RefusedBody's look first lets it through), its member's name
		// written with escapes too.
		if _, _, err := decodeLine(body, true); errors.Is(err, errInexactID) && !mayBeInexact(body) {
			t.Errorf("RefusedBody does not look at %q, whose ID the decoding refuses: %v", body, err)
		}
		if out := TooLarge(body, limit); out != nil && len(out) > maxIDBytes+256 {
			t.Errorf("TooLarge: %d bytes", len(out))
		}
	})
}

// TestPostAnswersHostile: bodies and frames of megabytes built to be costly (4 MiB
// of '{', of '[', of escapes in a string ID, an error answer of 64 KiB whose ID is
// escapes) are read in time linear in their size: well under the generous bound.
// The time is the work done, the CPU time of the test's thread (testutil.WorkClock),
// not the wall clock, which also runs while other processes hold the CPUs (under a
// CPU hog of 20 threads the wall clock ran past the bound).
func TestPostAnswersHostile(t *testing.T) {
	const size = 4 << 20
	esc := `{"jsonrpc":"2.0","id":"` + strings.Repeat(`\\`, size/2) + `","method":"tools/call","params":{"name":7}}`
	bodies := [][]byte{
		bytes.Repeat([]byte("{"), size),
		bytes.Repeat([]byte("["), size),
		bytes.Repeat([]byte(`{"id":`), size/6),
		[]byte(esc),
		[]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + strings.Repeat(`\u00e9`, size/6) + `"}}`),
		[]byte("[" + strings.Repeat(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":7}},`, size/70) + "1]"),
		[]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"a":[` + strings.Repeat(`{"id":1.5},`, size/11) + `1]}}`),
		bytes.Repeat([]byte(`"id": 1e5`), size/9),
	}
	frames := [][]byte{
		[]byte(`{"jsonrpc":"2.0","id":"` + strings.Repeat(`\"`, 32<<10) + `","error":{"code":-32602,"message":"handling 'tools/call': invalid params: unmarshaling \"x\" into a *T: no"}}`),
		[]byte("event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32602,\"message\":\"handling 'tools/call': " + strings.Repeat(`\\`, 32<<10) + "\"}}\n\n"),
		[]byte("data: " + strings.Repeat("{", 64<<10)),
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := time.Now()
	spent := testutil.WorkClock()
	for _, body := range bodies {
		for _, frame := range frames {
			ParamsRefusal(frame, held(body))
		}
		Unhandled(body, "invalid request: missing required \"params\"")
		Unhandled(body, "JSON RPC not handled: \"x\" unsupported")
		TooLarge(body, size)
		RefusedBody(body)
	}
	if d := spent(); d > 60*time.Second {
		t.Errorf("the hostile bodies and frames took %v of CPU (%v of wall clock)", d, time.Since(start))
	} else {
		t.Logf("the hostile bodies and frames took %v of CPU (%v of wall clock)", d, time.Since(start))
	}
}
