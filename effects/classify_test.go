package effects

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// dial opens a session to cfg or fails the test; the session is closed at cleanup.
func dial(t *testing.T, cfg transport.Config, opts transport.Options) *transport.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := transport.Dial(ctx, cfg, opts)
	if err != nil {
		t.Fatalf("dial %s: %v", cfg, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

func stdioConfig(t *testing.T, opts testserver.Options) transport.Config {
	return transport.Config{Name: "stdio-test", Stdio: &transport.Stdio{Command: testserver.Build(t), Args: testserver.Args(opts)}}
}

func httpConfig(h *testserver.HTTPServer) transport.Config {
	return transport.Config{Name: "http-test", HTTP: &transport.HTTP{URL: h.URL()}}
}

func call(s *transport.Session, tool string, args any, within time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	_, err := s.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	return err
}

// failingMarshaler is a parameter whose encoding fails with an error that, alone, would
// say the transport broke.
type failingMarshaler struct{}

func (failingMarshaler) MarshalJSON() ([]byte, error) { return nil, io.EOF }

// TestClassifyRealErrors classifies errors that real servers produce under real faults,
// never hand-made ones, over every transport.
func TestClassifyRealErrors(t *testing.T) {
	cases := []struct {
		name     string
		ownClose bool
		want     states.Cause
		make     func(t *testing.T) error
	}{
		{"stdio crash, the call in flight", false, states.CauseLost, func(t *testing.T) error {
			s := dial(t, stdioConfig(t, testserver.Options{}), transport.Options{})
			return call(s, "crash", nil, 10*time.Second)
		}},
		{"stdio crash, a later call", false, states.CauseLost, func(t *testing.T) error {
			s := dial(t, stdioConfig(t, testserver.Options{}), transport.Options{})
			_ = call(s, "crash", nil, 10*time.Second)
			return call(s, "echo", map[string]any{"text": "x"}, 10*time.Second)
		}},
		{"stdio crash, the end reported", false, states.CauseLost, func(t *testing.T) error {
			ended := make(chan error, 1)
			s := dial(t, stdioConfig(t, testserver.Options{}), transport.Options{OnEnd: func(err error) { ended <- err }})
			_ = call(s, "crash", nil, 10*time.Second)
			return <-ended
		}},
		{"stdio crash, a call caught by our own close", true, states.CauseArtifact, func(t *testing.T) error {
			s := dial(t, stdioConfig(t, testserver.Options{}), transport.Options{})
			_ = call(s, "crash", nil, 10*time.Second)
			return call(s, "echo", map[string]any{"text": "x"}, 10*time.Second)
		}},
		{"stdio close that exits with a status", true, states.CauseArtifact, func(t *testing.T) error {
			s := dial(t, stdioConfig(t, testserver.Options{ExitStatus: 3}), transport.Options{})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return s.Close(ctx)
		}},
		{"stdio close forced at our teardown deadline", true, states.CauseArtifact, func(t *testing.T) error {
			s := dial(t, stdioConfig(t, testserver.Options{HangClose: true}), transport.Options{})
			ctx, cancel := context.WithTimeoutCause(context.Background(), 200*time.Millisecond, machine.ErrEffectTimeout)
			defer cancel()
			return s.Close(ctx)
		}},
		{"stdio handshake timed out by the connect policy", false, states.CauseTimeout, func(t *testing.T) error {
			ctx, cancel := context.WithTimeoutCause(context.Background(), 300*time.Millisecond, machine.ErrEffectTimeout)
			defer cancel()
			_, err := transport.Dial(ctx, stdioConfig(t, testserver.Options{HangInitialize: true}), transport.Options{})
			cause, _ := ClassifyEffect(ctx, machine.Invocation{Effect: "connect"}, err, false)
			if cause != states.CauseTimeout {
				t.Errorf("classifyEffect = %s", cause)
			}
			return context.Cause(ctx)
		}},
		{"stdio command not found", false, states.CauseConfig, func(t *testing.T) error {
			_, err := transport.Dial(context.Background(), transport.Config{Name: "x", Stdio: &transport.Stdio{Command: "/nonexistent/mcp-server"}}, transport.Options{})
			return err
		}},
		{"stdio garbage on stdout", false, states.CauseProtocol, func(t *testing.T) error {
			// The SDK fails the connection and keeps the JSON error only as text;
			// the transport joins the error the stream broke with.
			_, err := transport.Dial(context.Background(), stdioConfig(t, testserver.Options{Garbage: true}), transport.Options{})
			return err
		}},
		{"stdio: arguments JSON cannot encode", false, states.CauseRequest, func(t *testing.T) error {
			s := dial(t, stdioConfig(t, testserver.Options{}), transport.Options{})
			return call(s, "echo", map[string]any{"text": math.NaN()}, 10*time.Second)
		}},
		{"http: arguments whose MarshalJSON fails with EOF", false, states.CauseRequest, func(t *testing.T) error {
			h := testserver.StartHTTP(t, testserver.Options{})
			s := dial(t, httpConfig(h), transport.Options{})
			return call(s, "echo", map[string]any{"text": failingMarshaler{}}, 10*time.Second)
		}},
		{"http stopped: connection refused", false, states.CauseLost, func(t *testing.T) error {
			h := testserver.StartHTTP(t, testserver.Options{})
			s := dial(t, httpConfig(h), transport.Options{})
			h.Stop()
			_ = call(s, "echo", map[string]any{"text": "x"}, 10*time.Second) // a stale pooled connection may fail first
			return call(s, "echo", map[string]any{"text": "x"}, 10*time.Second)
		}},
		{"http refused, even while closing", true, states.CauseLost, func(t *testing.T) error {
			h := testserver.StartHTTP(t, testserver.Options{})
			s := dial(t, httpConfig(h), transport.Options{})
			h.Stop()
			_ = call(s, "echo", map[string]any{"text": "x"}, 10*time.Second)
			return call(s, "echo", map[string]any{"text": "x"}, 10*time.Second)
		}},
		{"http 503", false, states.CauseLost, httpStatus(http.StatusServiceUnavailable)},
		{"http 500", false, states.CauseLost, httpStatus(http.StatusInternalServerError)},
		{"http 429", false, states.CauseLost, httpStatus(http.StatusTooManyRequests)},
		{"http 401", false, states.CauseAuth, httpStatus(http.StatusUnauthorized)},
		{"http 403", false, states.CauseAuth, httpStatus(http.StatusForbidden)},
		{"http restarted, session forgotten", false, states.CauseExpired, func(t *testing.T) error {
			h := testserver.StartHTTP(t, testserver.Options{})
			s := dial(t, httpConfig(h), transport.Options{})
			h.Restart(true)
			var err error
			for range 3 { // the first POST may hit the old pooled connection
				if err = call(s, "echo", map[string]any{"text": "x"}, 10*time.Second); errors.Is(err, mcp.ErrSessionMissing) {
					break
				}
			}
			return err
		}},
		{"http frozen, the caller's deadline", false, states.CauseTimeout, func(t *testing.T) error {
			h := testserver.StartHTTP(t, testserver.Options{})
			s := dial(t, httpConfig(h), transport.Options{})
			h.Freeze()
			defer h.Thaw()
			return call(s, "echo", map[string]any{"text": "x"}, 200*time.Millisecond)
		}},
		{"http unknown tool", false, states.CauseServer, func(t *testing.T) error {
			h := testserver.StartHTTP(t, testserver.Options{})
			return call(dial(t, httpConfig(h), transport.Options{}), "no_such_tool", nil, 10*time.Second)
		}},
		{"stateless http unknown tool", false, states.CauseServer, func(t *testing.T) error {
			h := testserver.StartHTTP(t, testserver.Options{Stateless: true})
			return call(dial(t, httpConfig(h), transport.Options{}), "no_such_tool", nil, 10*time.Second)
		}},
		{"stateless http stopped", false, states.CauseLost, func(t *testing.T) error {
			h := testserver.StartHTTP(t, testserver.Options{Stateless: true})
			s := dial(t, httpConfig(h), transport.Options{})
			h.Stop()
			return s.Probe(context.Background())
		}},
		{"ping refused", false, states.CauseServer, func(t *testing.T) error {
			h := testserver.StartHTTP(t, testserver.Options{RefusePing: true})
			return dial(t, httpConfig(h), transport.Options{}).ClientSession().Ping(context.Background(), nil)
		}},
		{"sse stopped", false, states.CauseLost, func(t *testing.T) error {
			h := testserver.StartHTTP(t, testserver.Options{SSE: true})
			s := dial(t, transport.Config{Name: "sse-test", SSE: &transport.HTTP{URL: h.URL()}}, transport.Options{})
			h.Stop()
			return call(s, "echo", map[string]any{"text": "x"}, 10*time.Second)
		}},
		{"in-memory server closed the session", false, states.CauseLost, func(t *testing.T) error {
			s := dial(t, transport.Config{Name: "mem", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}}, transport.Options{})
			return call(s, "crash", nil, 10*time.Second)
		}},
		{"a forced close joined with a refused connection", true, states.CauseLost, func(t *testing.T) error {
			s := dial(t, stdioConfig(t, testserver.Options{HangClose: true}), transport.Options{})
			ctx, cancel := context.WithTimeoutCause(context.Background(), 200*time.Millisecond, machine.ErrEffectTimeout)
			defer cancel()
			noise := s.Close(ctx)
			h := testserver.StartHTTP(t, testserver.Options{})
			hs := dial(t, httpConfig(h), transport.Options{})
			h.Stop()
			_ = call(hs, "echo", map[string]any{"text": "x"}, 10*time.Second)
			real := call(hs, "echo", map[string]any{"text": "x"}, 10*time.Second)
			if Classify(noise, true) != states.CauseArtifact || Classify(real, true) != states.CauseLost {
				t.Fatalf("parts: %v (%s), %v (%s)", noise, Classify(noise, true), real, Classify(real, true))
			}
			return errors.Join(noise, real)
		}},
		{"a refusal of our credentials met as the connect policy timed out", false, states.CauseAuth, func(t *testing.T) error {
			// A dial ends at its deadline with its first refusal (transport's
			// Options.Deadline), which the connect's context shares.
			ctx, cancel := context.WithTimeoutCause(context.Background(), time.Millisecond, machine.ErrEffectTimeout)
			defer cancel()
			<-ctx.Done()
			refused := &transport.Error{Server: "x", Op: transport.OpDial, HTTPStatus: http.StatusUnauthorized, Err: &transport.AuthError{Status: http.StatusUnauthorized, Err: transport.ErrLoginRequired}}
			cause, err := ClassifyEffect(ctx, machine.Invocation{Effect: "connect"}, refused, false)
			if cause != states.CauseAuth || err != refused {
				t.Errorf("ClassifyEffect = %s, %v; want auth, the refusal", cause, err)
			}
			// A refusal does not outweigh Close, nor does another error the timeout.
			closed, stop := context.WithCancelCause(context.Background())
			stop(machine.ErrClosed)
			if cause, _ := ClassifyEffect(closed, machine.Invocation{Effect: "connect"}, refused, false); cause != states.CauseArtifact {
				t.Errorf("ClassifyEffect at Close = %s, want artifact", cause)
			}
			if cause, _ := ClassifyEffect(ctx, machine.Invocation{Effect: "connect"}, io.ErrUnexpectedEOF, false); cause != states.CauseTimeout {
				t.Errorf("ClassifyEffect of another error at the timeout = %s, want timeout", cause)
			}
			return refused
		}},
		{"Close interrupted an effect", false, states.CauseArtifact, func(t *testing.T) error {
			ctx, cancel := context.WithCancelCause(context.Background())
			go func() { time.Sleep(200 * time.Millisecond); cancel(machine.ErrClosed) }()
			_, err := transport.Dial(ctx, stdioConfig(t, testserver.Options{HangInitialize: true}), transport.Options{})
			cause, _ := ClassifyEffect(ctx, machine.Invocation{Effect: "connect"}, err, false)
			if cause != states.CauseArtifact {
				t.Errorf("classifyEffect = %s", cause)
			}
			return context.Cause(ctx)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := c.make(t)
			if got := Classify(err, c.ownClose); got != c.want {
				t.Errorf("Classify(%v, %v) = %s, want %s", err, c.ownClose, got, c.want)
			}
		})
	}
}

func httpStatus(code int) func(t *testing.T) error {
	return func(t *testing.T) error {
		h := testserver.StartHTTP(t, testserver.Options{})
		s := dial(t, httpConfig(h), transport.Options{})
		h.SetStatus(code)
		return call(s, "echo", map[string]any{"text": "x"}, 10*time.Second)
	}
}

// TestClassifyTrees: the rules for trees, on errors from the table's sources.
func TestClassifyTrees(t *testing.T) {
	if Classify(nil, false) != states.CauseNone {
		t.Error("nil is not None")
	}
	expired := mcp.ErrSessionMissing
	lost := mcp.ErrConnectionClosed
	for _, c := range []struct {
		err      error
		ownClose bool
		want     states.Cause
	}{
		{errors.Join(lost, expired), false, states.CauseExpired},
		{errors.Join(machine.ErrClosed, lost), true, states.CauseArtifact},
		{errors.Join(machine.ErrClosed, lost), false, states.CauseLost},
		{errors.Join(context.Canceled, machine.ErrClosed), false, states.CauseCanceled},
	} {
		if got := Classify(c.err, c.ownClose); got != c.want {
			t.Errorf("Classify(%v, %v) = %s, want %s", c.err, c.ownClose, got, c.want)
		}
	}
}
