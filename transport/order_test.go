package transport

import (
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestOrderMarks: a mark is known by its token and number; one not handed out (a
// number beyond those sent) does not count as passed, and a progress notification
// of the server's is not a mark.
func TestOrderMarks(t *testing.T) {
	var p mcp.ProgressNotificationParams
	if err := json.Unmarshal(markParams(7), &p); err != nil {
		t.Fatal(err)
	}
	req := &mcp.ProgressNotificationClientRequest{Params: &p}
	if seq, ok := markSeq("notifications/progress", req); !ok || seq != 7 {
		t.Errorf("markSeq(mark 7) = %d, %v", seq, ok)
	}
	if IsOrderMark("notifications/message", req) {
		t.Error("a mark under another method is a mark")
	}
	theirs := &mcp.ProgressNotificationClientRequest{Params: &mcp.ProgressNotificationParams{ProgressToken: "mcpfsm/order", Progress: 1}}
	if IsOrderMark("notifications/progress", theirs) {
		t.Error("a server's progress notification is taken for a mark")
	}
	var o order
	o.pass(3)
	if got := o.done.Load(); got != 0 {
		t.Errorf("a mark never handed out passed: done = %d", got)
	}
	o.sent.Store(2)
	o.pass(2)
	o.pass(1) // late: done does not go back
	if got := o.done.Load(); got != 2 {
		t.Errorf("done = %d, want 2", got)
	}
}

// TestSSEMarks: an SSE body passes through as it came, but for a mark put before the
// event of an answer that follows notifications on the same stream; long lines, long
// events (which pass through unread), CRLF line ends, comments and a body cut off
// mid-event keep their bytes.
func TestSSEMarks(t *testing.T) {
	note := "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"" + strings.Repeat("x", 10_000) + "\"}}\n\n"
	answer := "id: 7\r\ndata: {\"jsonrpc\":\"2.0\",\r\ndata: \"id\":3,\"result\":{}}\r\n\r\n"
	huge := "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"data\":\"" + strings.Repeat("y", maxMarkedEvent+10) + "\"}}\n\n"
	for _, tc := range []struct {
		name, in string
		marks    int // marks expected, each before the answer
	}{
		{"answer alone", ": comment\n\n" + answer, 0},
		{"note then answer", note + answer, 1},
		{"two notes, two answers", note + note + answer + answer, 1},
		{"note, answer, note, answer", note + answer + note + answer, 2},
		{"a huge note passes unread", huge + answer, 0},
		{"cut mid-event", note + answer[:20], 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o order
			got, err := io.ReadAll(newSSEMarks(io.NopCloser(strings.NewReader(tc.in)), &o))
			if err != nil {
				t.Fatal(err)
			}
			want := tc.in
			if tc.marks > 0 {
				want = ""
				rest, seq := tc.in, uint64(0)
				for range tc.marks {
					i := strings.Index(rest, answer)
					seq++
					want += rest[:i] + "event: message\ndata: " + string(markMessage(seq)) + "\n\n" + answer
					rest = rest[i+len(answer):]
				}
				want += rest
			}
			if string(got) != want {
				t.Errorf("got %d bytes, want %d; marks handed out %d, want %d", len(got), len(want), o.sent.Load(), tc.marks)
			}
			if int(o.sent.Load()) != tc.marks {
				t.Errorf("marks handed out: %d, want %d", o.sent.Load(), tc.marks)
			}
		})
	}
}

// TestKindOf: only the top-level keys of a message tell a notification from an answer.
func TestKindOf(t *testing.T) {
	for in, want := range map[string]int{
		`{"jsonrpc":"2.0","method":"notifications/message","params":{"id":1}}`:     kindNote,
		`{"jsonrpc":"2.0","id":3,"result":{"method":"x","content":[{"id":2}]}}`:    kindAnswer,
		`{"jsonrpc":"2.0","id":"a","error":{"code":1,"message":"\"method\": no"}}`: kindAnswer,
		`{"jsonrpc":"2.0","id":4,"method":"sampling/createMessage","params":{}}`:   kindOther, // a request
		` {"text":"{\"id\":1}","method":"notifications/progress"} `:                kindNote,
		`{"jsonrpc":"2.0","result":{}}`:                                            kindOther,
		`[{"id":1}]`:                                                               kindOther,
		`not json`:                                                                 kindOther,
		``:                                                                         kindOther,
		`{"a":{"b":["id","method"]},"id":5}`:                                       kindAnswer,
	} {
		if got := kindOf([]byte(in)); got != want {
			t.Errorf("kindOf(%s) = %d, want %d", in, got, want)
		}
	}
}
