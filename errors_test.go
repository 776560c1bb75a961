package mcpfsm

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
)

// TestCallErrorSaysTheServerOnce: a CallError names its server and its tool once:
// the transport's error of the call it wraps (`mcp server "x": call tool "y": ...`)
// is quoted without them, whatever wraps it; errors.Is and As see the whole chain
// as before. A transport error of another operation, server or tool is quoted whole.
func TestCallErrorSaysTheServerOnce(t *testing.T) {
	callErr := func(op, server, tool string) *transport.Error {
		return &transport.Error{Server: server, Op: op, Tool: tool, Err: io.EOF, StderrTail: "panic: x"}
	}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"the call's, wrapped", fmt.Errorf("%w: %w", ErrMayHaveRun, callErr(transport.OpCallTool, "files", "read")),
			`mcpfsm: server "files": tools/call "read" failed: the session broke (lost): the server may have run the call: EOF; stderr: "panic: x"`},
		{"the call's", callErr(transport.OpCallTool, "files", "read"),
			`mcpfsm: server "files": tools/call "read" failed: the session broke (lost): EOF; stderr: "panic: x"`},
		{"another tool's", callErr(transport.OpCallTool, "files", "write"),
			`mcpfsm: server "files": tools/call "read" failed: the session broke (lost): mcp server "files": call tool "write": EOF; stderr: "panic: x"`},
		{"another operation's", callErr(transport.OpEnd, "files", ""),
			`mcpfsm: server "files": tools/call "read" failed: the session broke (lost): mcp server "files": end: EOF; stderr: "panic: x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ce := &CallError{Server: "files", Method: "tools/call", Name: "read", State: "ready", Cause: states.CauseLost, Err: tc.err}
			if diff := cmp.Diff(tc.want, ce.Error()); diff != "" {
				t.Errorf("Error() (-want +got):\n%s", diff)
			}
			var te *transport.Error
			if !errors.As(ce, &te) || !errors.Is(ce, io.EOF) {
				t.Errorf("errors.As and Is no longer see the chain of %v", ce)
			}
		})
	}
}
