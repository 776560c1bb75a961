package mcpfsm

import (
	"errors"
	"fmt"

	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
)

// ErrClosed is the error of a call on a connection that has been closed.
var ErrClosed = machine.ErrClosed

// ErrBreakerOpen is the error of a call made while the connection's breaker is open:
// the server has failed breaker_threshold times in a row, and calls fail at once until
// a trial connect after the cooldown succeeds.
var ErrBreakerOpen = errors.New("breaker open: the server keeps failing, calls fail fast until a trial connect succeeds")

// ErrNotReady is the error of a call whose context ended while it waited for the
// connection to become ready. It comes joined with the context's error.
var ErrNotReady = errors.New("not ready")

// ErrMayHaveRun is the error of a call that failed in a way that leaves open whether
// the server ran it (the connection broke while the call was in flight), for a tool
// not annotated read-only or idempotent, so it was not retried.
var ErrMayHaveRun = errors.New("the server may have run the call")

// A CallError is the error of a call through a Conn. It wraps what went wrong (one of
// the errors above, or the transport's error) and says what the connection made of it.
type CallError struct {
	Server string       // the connection's name
	Tool   string       // the tool called, or "" for other requests
	State  states.State // the connection's state when the call gave up
	Cause  states.Cause // the classified cause
	// Retried is set when the call was made twice: once on a session that failed
	// under it, once on the next.
	Retried bool
	Err     error
}

func (e *CallError) Error() string {
	what := "call"
	if e.Tool != "" {
		what = fmt.Sprintf("call %q", e.Tool)
	}
	msg := fmt.Sprintf("mcpfsm: server %q: %s failed while %s", e.Server, what, e.State)
	if e.Cause != states.CauseNone {
		msg += " (" + e.Cause.String() + ")"
	}
	if e.Retried {
		msg += " after one retry"
	}
	return msg + ": " + e.Err.Error()
}

// Unwrap returns the underlying error.
func (e *CallError) Unwrap() error { return e.Err }
