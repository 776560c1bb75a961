package effects

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"reflect"
	"slices"
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
// An error tree (errors.Join, multiple %w) is classified leaf by leaf. If any leaf is a
// failure that counts (lost, timeout, expired), the whole is that failure, the gravest
// one found; otherwise it is the first leaf's cause that is not an artifact; otherwise
// it is an artifact. Real trouble joined with cleanup noise still counts.
func Classify(err error, ownClose bool) states.Cause {
	if err == nil {
		return states.CauseNone
	}
	var worst, other states.Cause // the gravest counting cause; the first other real one
	walkLeaves(err, nil, func(path []error) {
		switch c := classifyPath(path, ownClose); {
		case c.Counts():
			if gravity(c) > gravity(worst) {
				worst = c
			}
		case c != states.CauseArtifact && other == states.CauseNone:
			other = c
		}
	})
	switch {
	case worst != states.CauseNone:
		return worst
	case other != states.CauseNone:
		return other
	}
	return states.CauseArtifact
}

// gravity orders the counting causes: an expired session needs a new one whatever
// else happened, and a timeout says more than a broken pipe.
func gravity(c states.Cause) int {
	switch c {
	case states.CauseExpired:
		return 3
	case states.CauseTimeout:
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
	status := 0 // the HTTP status of the answer that failed, if any
	for _, e := range path {
		if te, ok := e.(*transport.Error); ok && te != nil && te.HTTPStatus != 0 {
			status = te.HTTPStatus
		}
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
		case machine.ErrClosed:
			return states.CauseArtifact
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
			case syscall.ECONNREFUSED, syscall.ENOENT, syscall.EACCES, syscall.ENOEXEC:
				return states.CauseLost // nothing there to talk to, closing or not
			case syscall.ETIMEDOUT:
				return states.CauseTimeout
			}
			return noise
		case *exec.ExitError:
			return noise
		case *json.SyntaxError, *json.UnmarshalTypeError:
			return states.CauseProtocol
		case net.Error:
			if timedOut(x) {
				return states.CauseTimeout
			}
		}
	}
	if status == http.StatusUnauthorized || status == http.StatusForbidden {
		return states.CauseAuth
	}
	return noise
}

// classifyCode reads a JSON-RPC error code, with the HTTP status of the answer that
// carried it.
func classifyCode(code int64, status int, noise states.Cause) states.Cause {
	switch code {
	case codeClientClosing, codeServerClosing:
		return noise
	case jsonrpc.CodeParseError, jsonrpc.CodeInvalidRequest:
		return states.CauseProtocol
	case codeRejected:
		switch {
		case status == http.StatusUnauthorized || status == http.StatusForbidden:
			return states.CauseAuth
		case status == 0 || status == http.StatusTooManyRequests || status == http.StatusNotFound || status >= 500:
			return states.CauseLost // refused, dropped, overloaded or down
		}
		// Another 4xx with a JSON-RPC error in it: the server answered. The SDK
		// joins -32005 to the server's own error; that one is on another path.
		return states.CauseServer
	}
	return states.CauseServer
}
