package gateway

import (
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// TestAnswerlessPerPOST: the cancel bookkeeping that every POST of a stateful
// session goes through (serve, the writer's drop of each answer, end) allocates
// nothing while no cancel is kept (a session's one POST, with POSTs of other
// sessions served at once); and a cancel kept for a POST is dropped from its answers only,
// and forgotten with it. (Each POST allocated its served, a map for its session
// and a closure: 4 allocations a call more in BenchmarkGateway/paired.)
func TestAnswerlessPerPOST(t *testing.T) {
	var a answerless
	other := served{session: "S", body: []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call"}`)}
	elsewhere := served{session: "T", body: []byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`)}
	a.serve(&other)
	a.serve(&elsewhere)
	answer := []byte("event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n")
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	var s served
	for range 3 { // the set's room is made once
		s = served{session: "U", body: body}
		a.serve(&s)
		a.end(&s)
	}
	allocs := testing.AllocsPerRun(200, func() {
		s = served{session: "U", body: body} // its session's one POST, as a client's call
		a.serve(&s)
		if a.drop(&s, answer) {
			t.Error("an answer no cancel names was dropped")
		}
		a.end(&s)
	})
	if allocs != 0 {
		t.Errorf("a POST's bookkeeping allocated %v times, want none", allocs)
	}

	// A cancel of 7 (another connection's POST) is kept for the POST carrying 7,
	// and dropped from its answers alone.
	s = served{session: "S", body: body}
	a.serve(&s)
	a.noteCancel("S", []byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`))
	seven7, _ := jsonrpc.MakeID(float64(7))
	if n := a.n.Load(); n != 1 || !other.cancelled[seven7] {
		t.Fatalf("kept %d cancels (%v for the POST carrying 7), want that one", n, other.cancelled)
	}
	seven := []byte(`{"jsonrpc":"2.0","id":7,"result":{}}`)
	if a.drop(&s, seven) || a.drop(&elsewhere, seven) {
		t.Error("the answer to 7 was dropped from a POST that does not carry the request cancelled")
	}
	a.end(&s)
	a.end(&other)
	if n := a.n.Load(); n != 0 || len(a.posts) != 1 {
		t.Errorf("after the POSTs ended: %d cancels and %d POSTs kept, want none and the one served", n, len(a.posts))
	}
	a.end(&elsewhere)
}
