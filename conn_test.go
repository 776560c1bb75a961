package mcpfsm

import (
	"context"
	"errors"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"strings"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
)

// TestCallNotRetriedReportsFirstFailure: an idempotent call caught by Close is to be
// retried, but there is no next session. It ran once: the error says so (Retried is
// false; it once came back "after one retry"), keeps the first attempt's cause and
// error, and says why there was no retry.
func TestCallNotRetriedReportsFirstFailure(t *testing.T) {
	cfg := transport.Config{Name: "mem", InMemory: &transport.InMemory{Server: testserver.New(testserver.Options{})}}
	c := open(t, cfg, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"ms": 3000}}) // annotated idempotent
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	err := <-done
	var ce *CallError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v, want a *CallError", err)
	}
	if ce.Retried || strings.Contains(err.Error(), "after one retry") {
		t.Errorf("the call ran once, but the error says it was retried: %v", err)
	}
	// The tool is idempotent: running it twice would have been harmless, so the
	// error does not warn that it may have run (ErrMayHaveRun is for calls that
	// could not be retried for that reason).
	if ce.Cause != states.CauseArtifact || errors.Is(err, ErrMayHaveRun) || !errors.Is(err, ErrClosed) ||
		!strings.Contains(err.Error(), "(not retried: ") {
		t.Errorf("want the first attempt's cause (artifact) and why no retry (closed); got cause %s: %v", ce.Cause, err)
	}
}
