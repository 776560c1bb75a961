package transport

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestErrorTextCapped (issue 17, item 6): a server's 15 MB error message (4 MiB
// under the race detector: see hugeError) is printed cut at MaxErrorText bytes; the
// wrapped error keeps it whole.
func TestErrorTextCapped(t *testing.T) {
	huge := strings.Repeat("e", hugeError)
	srv := mcp.NewServer(&mcp.Implementation{Name: "verbose", Version: "1"}, nil)
	srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "tools/call" {
				return nil, &jsonrpc.Error{Code: -32000, Message: huge}
			}
			return next(ctx, method, req)
		}
	})
	s := dial(t, Config{Name: "verbose", InMemory: &InMemory{Server: srv}}, Options{})
	// A minute: the message is encoded and decoded in the call, 0.4 s of CPU under
	// the race detector, which a CPU hog of 20 threads beside the test stretched to
	// 20 s and more; nothing here waits on anything but that work.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "anything"})
	var je *jsonrpc.Error
	if !errors.As(err, &je) || je.Message != huge {
		t.Fatalf("CallTool = %.200v, want the server's whole error in the chain", err)
	}
	text := err.Error()
	t.Logf("%d bytes of text for a %d-byte message: ...%s", len(text), len(huge), text[len(text)-40:])
	if len(text) > MaxErrorText+100 || !strings.HasSuffix(text, " bytes more)") {
		t.Errorf("Error() is %d bytes, want at most about %d, ending in \"bytes more)\"", len(text), MaxErrorText)
	}
	if !strings.HasPrefix(text, `mcp server "verbose": call tool "anything": calling "tools/call": ee`) {
		t.Errorf("Error() = %.100s..., want the start of the cause", text)
	}
}

// TestErrorCapRedactsFirst: a secret that the cut would split is redacted
// whole, never shown in part; the count of bytes left out is right without
// secrets.
func TestErrorCapRedactsFirst(t *testing.T) {
	secret := "envSECRETmarker-" + strings.Repeat("s", 40) // longer than REDACTED
	red := newRedactor(Config{Stdio: &Stdio{Command: "x", Env: map[string]string{"K": secret}}})
	for shift := range 60 {
		msg := strings.Repeat("a", MaxErrorText-30+shift) + secret + strings.Repeat("b", 5000)
		e := &Error{Server: "s", Op: OpCallTool, Err: errors.New(msg), red: red}
		got := e.Error()
		if strings.Contains(got, secret[:8]) {
			t.Fatalf("shift %d: part of the secret shows: ...%s", shift, got[len(got)-120:])
		}
	}
	plain := &Error{Server: "s", Op: OpEnd, Err: errors.New(strings.Repeat("c", 10000))}
	want := `mcp server "s": end: ` + strings.Repeat("c", MaxErrorText) + "… (" + strconv.Itoa(10000-MaxErrorText) + " bytes more)"
	if got := plain.Error(); got != want {
		t.Errorf("Error() = ...%s, want ...%s", got[len(got)-40:], want[len(want)-40:])
	}
	// The cut never splits a rune.
	for shift := range 4 {
		runes := &Error{Server: "s", Op: OpEnd, Err: errors.New(strings.Repeat("a", shift) + strings.Repeat("€", 2000))}
		if got := runes.Error(); !utf8.ValidString(got) {
			t.Errorf("shift %d: Error() is not valid UTF-8: ...%q", shift, got[len(got)-40:])
		}
	}
	short := &Error{Server: "s", Op: OpEnd, Err: errors.New("short")}
	if got := short.Error(); got != `mcp server "s": end: short` {
		t.Errorf("Error() = %q", got)
	}
}
