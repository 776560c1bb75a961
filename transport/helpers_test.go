package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Generous deadlines: they bound a hung test, they do not measure anything.
const (
	dialTimeout = 20 * time.Second
	callTimeout = 20 * time.Second
)

func stdioConfig(t testing.TB, opts testserver.Options) Config {
	return Config{Name: "stdio-test", Stdio: &Stdio{Command: testserver.Build(t), Args: testserver.Args(opts)}}
}

func httpConfig(h *testserver.HTTPServer) Config {
	return Config{Name: "http-test", HTTP: &HTTP{URL: h.URL()}}
}

func sseConfig(h *testserver.HTTPServer) Config {
	return Config{Name: "sse-test", SSE: &HTTP{URL: h.URL()}}
}

func memoryConfig(opts testserver.Options) Config {
	return Config{Name: "memory-test", InMemory: &InMemory{Server: testserver.New(opts)}}
}

// dial dials cfg and closes the session at the end of the test.
func dial(t testing.TB, cfg Config, opts Options) *Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	s, err := Dial(ctx, cfg, opts)
	if err != nil {
		t.Fatalf("Dial(%v): %v", cfg, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

func callCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	t.Cleanup(cancel)
	return ctx
}

func echo(ctx context.Context, s *Session, text string) (string, error) {
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": text}})
	if err != nil {
		return "", err
	}
	return resultText(res), nil
}

func resultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func stats(t testing.TB, s *Session) map[string]int {
	t.Helper()
	res, err := s.CallTool(callCtx(t), &mcp.CallToolParams{Name: "stats"})
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	m, err := testserver.Stats(res)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// chain describes err for the facts: every level's type and the sentinels
// and types errors.Is and errors.As find.
func chain(err error) string {
	if err == nil {
		return "<nil>"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "msg: %s\n", err)
	var walk func(e error, depth int)
	walk = func(e error, depth int) {
		fmt.Fprintf(&b, "%s%s\n", strings.Repeat("  ", depth), reflect.TypeOf(e))
		switch x := e.(type) {
		case interface{ Unwrap() []error }:
			for _, c := range x.Unwrap() {
				walk(c, depth+1)
			}
		case interface{ Unwrap() error }:
			if c := x.Unwrap(); c != nil {
				walk(c, depth+1)
			}
		}
	}
	walk(err, 0)
	var flags []string
	for name, target := range map[string]error{
		"ErrConnectionClosed": mcp.ErrConnectionClosed,
		"ErrSessionMissing":   mcp.ErrSessionMissing,
		"io.EOF":              io.EOF,
		"io.ErrUnexpectedEOF": io.ErrUnexpectedEOF,
		"DeadlineExceeded":    context.DeadlineExceeded,
		"Canceled":            context.Canceled,
		"ErrForcedClose":      ErrForcedClose,
		"ECONNREFUSED":        syscall.ECONNREFUSED,
		"ECONNRESET":          syscall.ECONNRESET,
		"EPIPE":               syscall.EPIPE,
	} {
		if errors.Is(err, target) {
			flags = append(flags, "Is "+name)
		}
	}
	var je *jsonrpc.Error
	if errors.As(err, &je) {
		flags = append(flags, fmt.Sprintf("As *jsonrpc.Error{Code:%d Message:%q}", je.Code, je.Message))
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		flags = append(flags, "As *exec.ExitError "+ee.String())
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		flags = append(flags, "As *url.Error")
	}
	for _, code := range []int64{-32003, -32004, -32005} {
		if errors.Is(err, &jsonrpc.Error{Code: code}) {
			flags = append(flags, fmt.Sprintf("Is jsonrpc code %d", code))
		}
	}
	slices.Sort(flags)
	fmt.Fprintf(&b, "flags: %v\n", flags)
	return b.String()
}
