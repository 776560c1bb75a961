package transport

import (
	"encoding/json"
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
