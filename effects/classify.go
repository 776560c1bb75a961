package effects

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"syscall"

	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// JSON-RPC codes the SDK uses and does not export.
const (
	codeClientClosing = -32003 // the client's connection is closing
	codeServerClosing = -32004 // the server's connection is closing
	codeRejected      = -32005 // the transport rejected the request: refused, or a non-2xx answer
)

// Classify decides what an error means for the connection. It is the one place that
// reads the SDK's errors; transport's facts tests pin the shapes it relies on.
//
// ownClose says that we were closing the session when the error happened (the error of
// a teardown we ran, or of a call it caught): the noise of a closing connection (EOF,
// "connection closed", the exit of a child we stopped, a close we forced at our own
// deadline) is then an artifact, not a failure.
//
// An error tree (errors.Join, multiple %w) is classified leaf by leaf. If any leaf
// says retrying cannot help (config), the whole is config; else if any leaf is a
// failure that counts (lost, timeout, expired, protocol), the whole is that failure, the
// gravest one found; otherwise it is the first leaf's cause that is not an artifact;
// otherwise it is an artifact. Real trouble joined with cleanup noise still counts.
func Classify(err error, ownClose bool) states.Cause {
	if err == nil {
		return states.CauseNone
	}
	var worst, other states.Cause // the gravest counting cause; the first other real one
	config := false
	walkLeaves(err, nil, func(path []error) {
		switch c := classifyPath(path, ownClose); {
		case c == states.CauseConfig:
			config = true
		case c.Counts():
			if gravity(c) > gravity(worst) {
				worst = c
			}
		case c != states.CauseArtifact && other == states.CauseNone:
			other = c
		}
	})
	switch {
	case config:
		return states.CauseConfig
	case worst != states.CauseNone:
		return worst
	case other != states.CauseNone:
		return other
	}
	return states.CauseArtifact
}

// gravity orders the counting causes: an expired session needs a new one whatever
// else happened, a timeout says more than garbage, and garbage more than a broken pipe.
func gravity(c states.Cause) int {
	switch c {
	case states.CauseExpired:
		return 4
	case states.CauseTimeout:
		return 3
	case states.CauseProtocol:
		return 2
	case states.CauseLost:
		return 1
	}
	return 0
}

// walkLeaves calls fn with the path from err to each of its leaves, root first. A
// forced close (transport.ErrForcedClose beside the reason it was forced) is one leaf:
// the reason, our own deadline or Close, is not a failure of the server's.
func walkLeaves(err error, path []error, fn func([]error)) {
	path = append(path, err)
	if nilValue(err) {
		fn(path) // a typed nil holds nothing, and its methods may panic: an opaque leaf
		return
	}
	switch x := err.(type) {
	case interface{ Unwrap() []error }:
		kids := x.Unwrap()
		if !slices.ContainsFunc(kids, func(k error) bool { return k != nil }) || forcedClose(kids) {
			fn(path) // no kids (or only nil ones) is a leaf
			return
		}
		for _, k := range kids {
			if k != nil {
				walkLeaves(k, path[:len(path):len(path)], fn)
			}
		}
	case interface{ Unwrap() error }:
		if k := x.Unwrap(); k != nil {
			walkLeaves(k, path, fn)
			return
		}
		fn(path)
	default:
		fn(path)
	}
}

// nilValue reports whether err is a typed nil: a nil pointer (or map, slice, func,
// chan) in a non-nil error interface.
func nilValue(err error) bool {
	switch v := reflect.ValueOf(err); v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return v.IsNil()
	}
	return false
}

// timedOut asks a net.Error whether it timed out. Its Timeout method looks inside it,
// and panics on a typed nil there (a *net.OpError around a nil *net.OpError): that says
// no.
func timedOut(e net.Error) (yes bool) {
	defer func() { _ = recover() }()
	return e.Timeout()
}

func forcedClose(kids []error) bool {
	for _, k := range kids {
		if k == transport.ErrForcedClose {
			return true
		}
	}
	return false
}

// classifyPath classifies one path through an error tree by the most specific error
// on it, read from the leaf up.
func classifyPath(path []error, ownClose bool) states.Cause {
	noise := states.CauseLost
	if ownClose {
		noise = states.CauseArtifact
	}
	status, dial := 0, false // the HTTP status of the answer that failed, if any; during a dial
	notJSON, notMCP, answered := false, false, false
	for _, e := range path {
		switch e.(type) {
		case *json.UnsupportedTypeError, *json.UnsupportedValueError, *json.MarshalerError:
			// Parameters that JSON cannot encode (a NaN, a channel, a failing
			// MarshalJSON, whatever it returned): found before anything was
			// sent, and the same on any session.
			return states.CauseRequest
		}
		if te, ok := e.(*transport.Error); ok && te != nil {
			if te.HTTPStatus != 0 {
				status = te.HTTPStatus
			}
			dial = dial || te.Op == transport.OpDial
			notJSON, notMCP = notJSON || te.NotJSON, notMCP || te.NotMCP
			answered = answered || te.Answered
		}
	}
	// What the HTTP status says comes first: a 401 whose body holds a JSON-RPC
	// error is a refusal of our credentials, whatever the error says.
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return states.CauseAuth
	case dial && (status == http.StatusNotFound || status == http.StatusMethodNotAllowed || notMCP):
		// The URL answers, but not as an MCP endpoint (no such path, or a page
		// that is not JSON nor an event stream): nothing there to initialize.
		return states.CauseConfig
	case notJSON:
		return states.CauseProtocol // the server said JSON and sent garbage
	}
	for i := len(path) - 1; i >= 0; i-- {
		e := path[i]
		if nilValue(e) {
			continue // a typed nil says nothing
		}
		if x, ok := e.(interface{ Unwrap() []error }); ok && forcedClose(x.Unwrap()) {
			return states.CauseArtifact
		}
		switch e {
		case exec.ErrNotFound, exec.ErrDot:
			return states.CauseConfig // no such command on $PATH
		case machine.ErrClosed:
			return states.CauseArtifact
		case transport.ErrInvalidRequest:
			return states.CauseRequest // found before anything was sent
		case machine.ErrEffectTimeout, context.DeadlineExceeded, os.ErrDeadlineExceeded:
			return states.CauseTimeout
		case context.Canceled:
			return states.CauseCanceled
		case mcp.ErrSessionMissing:
			return states.CauseExpired
		case mcp.ErrConnectionClosed, io.EOF, io.ErrUnexpectedEOF, io.ErrClosedPipe, net.ErrClosed, os.ErrProcessDone:
			return noise
		}
		switch x := e.(type) {
		case *jsonrpc.Error:
			return classifyCode(x.Code, status, noise)
		case syscall.Errno:
			switch x {
			case syscall.ENOENT, syscall.EACCES, syscall.ENOEXEC, syscall.ENOTDIR, syscall.EISDIR:
				// The command (or its directory) is missing or cannot run:
				// retrying the same config cannot help.
				return states.CauseConfig
			case syscall.ECONNREFUSED:
				return states.CauseLost // nothing there to talk to, closing or not
			case syscall.ETIMEDOUT:
				return states.CauseTimeout
			}
			return noise
		case *exec.ExitError:
			return noise
		case *json.SyntaxError:
			return states.CauseProtocol // bytes that are not JSON
		case *json.UnmarshalTypeError:
			return states.CauseServer // JSON of the wrong shape: the server answered, wrongly
		case net.Error:
			if timedOut(x) {
				return states.CauseTimeout
			}
		}
	}
	if answered {
		// Nothing above says the connection failed, and the server's answer came:
		// the error is the SDK's reading of it (a content type it does not know, a
		// field of the wrong kind). The server answered, wrongly; the session is
		// sound, whoever is closing.
		return states.CauseServer
	}
	return noise
}

// classifyCode reads a JSON-RPC error code, with the HTTP status of the answer that
// carried it.
func classifyCode(code int64, status int, noise states.Cause) states.Cause {
	switch code {
	case codeClientClosing, codeServerClosing:
		return noise
	case codeRejected:
		switch {
		case status == 0 || status == http.StatusTooManyRequests || status == http.StatusNotFound || status >= 500:
			return states.CauseLost // refused, dropped, overloaded or down
		}
		// Another 4xx with a JSON-RPC error in it: the server answered. The SDK
		// joins -32005 to the server's own error; that one is on another path.
		return states.CauseServer
	}
	return states.CauseServer
}

// A Retry is the rule by which a request that failed because its session broke may be
// sent again, once, on the next session.
type Retry uint8

// The retry rules.
const (
	// RetrySafe: running the request twice is harmless (a read: listing, reading a
	// resource, getting a prompt, completing, pinging; or an idempotent change:
	// subscribe, unsubscribe, set the log level; or a tool annotated readOnlyHint or
	// idempotentHint). It is sent again after any failure that broke the session.
	RetrySafe Retry = iota + 1
	// RetryIfNotRun: the request may change something (a tool call without those
	// annotations). It is sent again only if the server cannot have run it: the
	// session had expired (HTTP 404), the server refused its own POST with another
	// 4xx, or the server could not be reached at all.
	RetryIfNotRun
)

// A Verdict is what a request's error means: for the connection (Cause, which the
// caller reports when it counts) and for the request.
type Verdict struct {
	Cause states.Cause
	// Retry: send the request again on the next session (at most once).
	Retry bool
	// MayHaveRun: the request was not retried although the server may have run it
	// (the connection broke with it in flight, or what came back was not an answer).
	MayHaveRun bool
}

// Judge classifies the error a request got on a session (ownClose: we were closing
// that session, see Classify) and decides, by the request's rule, whether it may be
// sent again on the next session. This is the one place that says whether a server
// could have run a request that failed.
func Judge(err error, ownClose bool, rule Retry) Verdict {
	v := Verdict{Cause: Classify(err, ownClose)}
	broke := v.Cause.Counts() || v.Cause == states.CauseArtifact
	switch {
	case !broke:
	case rule == RetrySafe || notRun(v.Cause, err):
		v.Retry = true
	default:
		v.MayHaveRun = true
	}
	return v
}

// unsent reports whether err says the request never reached a server.
func unsent(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// notRun reports whether a request that failed with err, of the given cause, cannot
// have run: the session had expired, the server could not be reached, or it refused
// the request's own POST with a 4xx (it did not accept the message: server-everything
// answers a session ID it does not know, after a restart, with 400 where the spec
// says 404), and no HTTP request carrying it may have reached the server. (The SDK
// fails every request in flight with the 404 that one request met, including
// requests the server took and is running; transport.Error.Sent tells them apart.)
func notRun(cause states.Cause, err error) bool {
	var te *transport.Error
	found := errors.As(err, &te)
	refused := found && te.HTTPStatus >= 400 && te.HTTPStatus <= 499
	if cause != states.CauseExpired && !unsent(err) && !refused {
		return false
	}
	return !found || !te.Sent
}

// ClassifyEffect classifies the error an invoked effect ran into. When the effect's
// context has ended, what counts is why it ended (its timeout, or Close), which the
// SDK's bare context error does not say: the error is then that reason, in words,
// followed by what err says was waiting (the request a server left unanswered, such
// as a restore's logging/setLevel), if it says more than that its context ended.
// Except at its timeout, for a server's refusal met before it (cause auth or
// config): that refusal is the effect's failure, as it was.
func ClassifyEffect(ctx context.Context, inv machine.Invocation, err error, ownClose bool) (states.Cause, error) {
	if ctx.Err() == nil {
		return Classify(err, ownClose), err
	}
	why := context.Cause(ctx)
	if errors.Is(why, machine.ErrEffectTimeout) {
		// A server's refusal met before the time ran out (our credentials, a
		// config that cannot work) is why the effect failed, not the time: a dial
		// whose authorization failed ends at its deadline (transport's
		// Options.Deadline) with that refusal, which must reach unauthorized.
		if c := Classify(err, ownClose); c == states.CauseAuth || c == states.CauseConfig {
			return c, err
		}
	}
	msg := fmt.Sprintf("%s interrupted by Close", inv.Effect)
	if errors.Is(why, machine.ErrEffectTimeout) {
		msg = fmt.Sprintf("%s: no answer within %s (%s)", inv.Effect, inv.Timeout, inv.TimeoutPolicy)
	}
	if err != nil {
		// The context's own words at its end say nothing more.
		text := err.Error()
		for _, end := range []string{why.Error(), context.Canceled.Error(), context.DeadlineExceeded.Error()} {
			text = strings.TrimSuffix(strings.TrimSuffix(text, end), ": ")
		}
		if text != "" {
			msg += ": " + text
		}
	}
	return Classify(why, ownClose), &reasonError{msg: msg, reason: why}
}

// reasonError says why an effect's context ended, in words, and wraps the reason.
type reasonError struct {
	msg    string
	reason error
}

func (e *reasonError) Error() string { return e.msg }

// Unwrap returns the reason the context ended.
func (e *reasonError) Unwrap() error { return e.reason }

// CloseOutcome classifies the error of our own close of a session (a teardown, a
// retire): noise of the close itself is an artifact, and what else the close ran into
// counts as it would anywhere. A close we forced at our own deadline (a server that
// hangs in close) is an artifact too, not a timeout.
func CloseOutcome(ctx context.Context, inv machine.Invocation, err error) (states.Cause, error) {
	if err == nil {
		return states.CauseNone, nil
	}
	cause, reason := ClassifyEffect(ctx, inv, err, true)
	if errors.Is(context.Cause(ctx), machine.ErrEffectTimeout) {
		cause = Classify(err, true)
	}
	return cause, reason
}
