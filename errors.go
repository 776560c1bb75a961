package mcpfsm

import (
	"errors"
	"fmt"
	"strings"

	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
)

// ErrClosed is the error of a request on a connection that has been closed.
var ErrClosed = machine.ErrClosed

// ErrUnavailable is the error of a request made in a state whose calls fail fast (the
// default lifecycle's breaker-open, parked and unauthorized): the error names the state
// and wraps the connection's last failure, so that errors.Is and errors.As see it (a
// missing command's fs.ErrNotExist, or exec.ErrNotFound for a name not found in PATH;
// a refused connection's syscall.ECONNREFUSED).
var ErrUnavailable = errors.New("unavailable")

// ErrUnauthorized is the error of a request made while the connection cannot be used
// because the server refused its credentials (the last failure's cause is auth). It
// comes with ErrUnavailable.
var ErrUnauthorized = errors.New("unauthorized")

// ErrNotReady is the error of a request whose context ended while it waited for the
// connection to have a session. It comes joined with the context's error and, if
// there was one, the last failure.
var ErrNotReady = errors.New("not ready")

// ErrMayHaveRun is the error of a tool call that failed in a way that leaves open
// whether the server ran it (the connection broke while the call was in flight), for a
// tool not annotated read-only or idempotent, so it was not retried.
var ErrMayHaveRun = errors.New("the server may have run the call")

// A CallError is the error of a request through a Conn. It wraps what went wrong (one
// of the errors above, or the transport's error) and says what the connection made of
// it.
type CallError struct {
	Server string // the connection's name
	Method string // the request's method, such as "tools/call"
	Name   string // the tool, prompt or resource it was about, if any
	// State is the state the connection was in when the request was sent (or, for a
	// request that found no session, when it gave up).
	State states.State
	Cause states.Cause // the classified cause
	// Retried is set when the request was sent twice: once on a session that broke
	// under it, once on the next.
	Retried bool
	Err     error // what failed: the transport's, the SDK's or the server's error

	unsent bool // the request was never sent: it found no session to run on
	// resend: the request was to be sent again (its first attempt's session broke,
	// and it is safe to send again) and found no session to send it on.
	resend bool
}

// Error says the server, the method (and the tool's, prompt's or resource's name), the
// state or the broken session it failed in, the cause, and the underlying error.
func (e *CallError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "mcpfsm: server %q: %s", e.Server, e.Method)
	if e.Name != "" {
		fmt.Fprintf(&b, " %q", e.Name)
	}
	switch {
	case !e.unsent && (e.Cause.Counts() || e.Cause == states.CauseArtifact):
		// The session broke under the request: the state it ran in says little.
		fmt.Fprintf(&b, " failed: the session broke (%s)", e.Cause)
	case e.Cause == states.CauseRequest:
		// Nothing was sent: the state says nothing either.
		fmt.Fprintf(&b, " cannot be sent as given (%s)", e.Cause)
	default:
		fmt.Fprintf(&b, " failed while %s", e.State)
		if e.Cause != states.CauseNone {
			fmt.Fprintf(&b, " (%s)", e.Cause)
		}
	}
	if e.Retried {
		b.WriteString(" after one retry")
	}
	b.WriteString(": ")
	b.WriteString(machine.ErrorText(e.detail()))
	return b.String()
}

// detail is Err, which says the server and the tool again where it holds the
// transport's error of the call (`mcp server "x": call tool "y": ...`): that error
// is quoted without them (transport.Error.Detail), what wraps it as it is.
func (e *CallError) detail() error {
	var te *transport.Error
	if e.Err == nil || !errors.As(e.Err, &te) || te.Server != e.Server || te.Op != transport.OpCallTool || te.Tool != e.Name {
		return e.Err
	}
	full, detail := te.Error(), te.Detail()
	text := e.Err.Error()
	if detail == "" || !strings.Contains(text, full) {
		return e.Err
	}
	return errors.New(strings.Replace(text, full, detail, 1))
}

// Unwrap returns the underlying error.
func (e *CallError) Unwrap() error { return e.Err }

// unavailableError is the error of a request in a state whose calls fail fast.
type unavailableError struct {
	state states.State
	last  *machine.Failure
}

func (e *unavailableError) Error() string {
	msg := fmt.Sprintf("unavailable while %s", e.state)
	if e.last != nil {
		msg += fmt.Sprintf(" (last failure, %s: %s)", e.last.Cause, machine.ErrorText(e.last.Err))
	}
	return msg
}

// Unwrap returns ErrUnavailable, ErrUnauthorized if the last failure was the server
// refusing our credentials, and the last failure's error.
func (e *unavailableError) Unwrap() []error {
	errs := []error{ErrUnavailable}
	if e.last != nil {
		if e.last.Cause == states.CauseAuth {
			errs = append(errs, ErrUnauthorized)
		}
		if e.last.Err != nil {
			errs = append(errs, e.last.Err)
		}
	}
	return errs
}

// notReadyError is the error of a request whose context ended while it waited.
type notReadyError struct {
	ctxErr error
	last   *machine.Failure
}

func (e *notReadyError) Error() string {
	msg := "not ready: " + e.ctxErr.Error()
	if e.last != nil {
		msg += fmt.Sprintf(" (last failure, %s: %s)", e.last.Cause, machine.ErrorText(e.last.Err))
	}
	return msg
}

// Unwrap returns ErrNotReady, the context's error and the last failure's error.
func (e *notReadyError) Unwrap() []error {
	errs := []error{ErrNotReady, e.ctxErr}
	if e.last != nil && e.last.Err != nil {
		errs = append(errs, e.last.Err)
	}
	return errs
}
