package gateway_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/gateway"
	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// rawMRTR is a front client on 2026-07-28 with sampling that sees input-required
// results itself (the go-sdk's client would answer them and retry at once).
func rawMRTR(t *testing.T, g *gateway.Gateway) *mcp.ClientSession {
	t.Helper()
	return front(t, g, &mcp.ClientOptions{
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return nil, errors.New("not asked: the test answers input requests itself")
		},
	}, "2026-07-28")
}

// sampled answers every input request of an input-required result with a model's
// text.
func sampled(reqs mcp.InputRequestMap, answer string) mcp.InputResponseMap {
	out := mcp.InputResponseMap{}
	for key := range reqs {
		out[key] = &mcp.CreateMessageResult{Model: "front-model", Role: "assistant", Content: &mcp.TextContent{Text: answer}}
	}
	return out
}

// TestGateway_RequestStateOfAnotherRequest: a 2026-07-28 front client that sends a
// parked tool call's requestState with another request (a prompt, a resource read,
// another tool) gets an invalid-params error; the gateway does not panic (it did: the
// parked call's result was asserted to the other request's result type, and a
// tools/call's state on another tool got that tool the parked call's result), and the
// parked call is still resumed by its own retry.
func TestGateway_RequestStateOfAnotherRequest(t *testing.T) {
	g := start(t, config(inMemory("llm", testserver.Options{})), gateway.Options{})
	cs := rawMRTR(t, g)
	waitTools(t, cs, has("llm__sample"))
	res, err := cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: "llm__sample", Arguments: map[string]any{"prompt": "p"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.RequestState == "" || len(res.InputRequests) == 0 {
		t.Fatalf("not an input-required result: %q", text(res))
	}
	answers := sampled(res.InputRequests, "the front's answer")
	wrong := map[string]func() error{
		"prompts/get": func() error {
			_, err := cs.GetPrompt(callCtx(t), &mcp.GetPromptParams{Name: "llm__greet", Arguments: map[string]string{"name": "x"},
				RequestState: res.RequestState, InputResponses: answers})
			return err
		},
		"resources/read": func() error {
			_, err := cs.ReadResource(callCtx(t), &mcp.ReadResourceParams{URI: testserver.ResourceA, RequestState: res.RequestState, InputResponses: answers})
			return err
		},
		"another tool": func() error {
			r, err := cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: "llm__echo", Arguments: map[string]any{"text": "e"},
				RequestState: res.RequestState, InputResponses: answers})
			if err == nil {
				return errors.New("answered: " + text(r))
			}
			return err
		},
	}
	for name, f := range wrong {
		err := f()
		var je *jsonrpc.Error
		if !errors.As(err, &je) || je.Code != jsonrpc.CodeInvalidParams || !strings.Contains(je.Message, "requestState is not of this request") {
			t.Errorf("%s with a tool call's requestState: %v, want invalid params", name, err)
		}
	}
	res, err = cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: "llm__sample", Arguments: map[string]any{"prompt": "p"},
		RequestState: res.RequestState, InputResponses: answers})
	if err != nil || res.IsError || !strings.Contains(text(res), "the front's answer") {
		t.Fatalf("the parked call's own retry: %v %q", err, text(res))
	}
}

// TestGateway_ParkedCallGivenUpAnswersItsBackend: a 2026-07-28 front client that
// never retries a parked call (the call given up after parkTimeout) leaves no
// backend request unanswered: a backend on an older protocol whose sampling request
// made the call's input-required result, and that does not cancel that request when
// its call is cancelled, got no answer for as long as its session lived (a goroutine
// of the gateway's and one of the connection's 256 server requests held, and a
// backend waiting on it, as this one does, wedged for good).
func TestGateway_ParkedCallGivenUpAnswersItsBackend(t *testing.T) {
	defer gateway.SetParkTimeout(100 * time.Millisecond)()
	g := start(t, config(rawBackend(t, "raw")), gateway.Options{})
	cs := rawMRTR(t, g)
	waitTools(t, cs, has("raw__sample"))
	for i := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "raw__sample", Arguments: map[string]any{}})
		cancel()
		if err != nil {
			t.Fatalf("call %d (the first given up, never retried): %v", i+1, err)
		}
		if res.RequestState == "" || len(res.InputRequests) == 0 {
			t.Fatalf("call %d: not an input-required result: %q", i+1, text(res))
		}
		time.Sleep(300 * time.Millisecond) // past parkTimeout: given up
	}
}

// TestGateway_ReloadGivesUpParkedCalls: a reload that removes a server gives up the
// 2026-07-28 calls parked there (their retries cannot reach them: the names are
// gone) at once. It did not: the backend's request that parked the call (before
// 2026-07-28, one of its session's) waited for a retry, and the removed server's
// close, and with it the reload, waited teardown_timeout for it.
func TestGateway_ReloadGivesUpParkedCalls(t *testing.T) {
	s := inMemory("llm", testserver.Options{})
	s.Transport.ProtocolVersion = "2025-11-25" // its sampling request is its session's
	s.Policies.TeardownTimeout = 10 * time.Second
	g := start(t, config(s, inMemory("b", testserver.Options{})), gateway.Options{})
	cs := rawMRTR(t, g)
	waitTools(t, cs, has("llm__sample"))
	res, err := cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: "llm__sample", Arguments: map[string]any{"prompt": "p"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.RequestState == "" {
		t.Fatalf("not an input-required result: %q", text(res))
	}
	start := time.Now()
	if _, err := g.Reload(callCtx(t), config(inMemory("b", testserver.Options{}))); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the reload removing a server with a parked call took %v (teardown_timeout 10s)", took)
	}
	_, err = cs.CallTool(callCtx(t), &mcp.CallToolParams{Name: "llm__sample", Arguments: map[string]any{"prompt": "p"},
		RequestState: res.RequestState, InputResponses: sampled(res.InputRequests, "late")})
	var je *jsonrpc.Error
	if !errors.As(err, &je) || je.Code != jsonrpc.CodeInvalidParams {
		t.Errorf("the retry of a call parked at a removed server: %v, want invalid params (an unknown tool, or a requestState not held)", err)
	}
}

// TestGateway_CancelWhileGathering: a 2026-07-28 front call whose client gives up
// while the gateway gathers its backend's requests for one round is not parked: it
// ends, and its backend's request is answered (an error) at once. It was parked,
// its input-required result sent to a client that was gone, and the call held one
// of its backend's parked slots, and the backend's request, for parkTimeout.
func TestGateway_CancelWhileGathering(t *testing.T) {
	defer gateway.SetGatherWait(2 * time.Second)()
	g := start(t, config(inMemory("llm", testserver.Options{})), gateway.Options{})
	cs := rawMRTR(t, g)
	waitTools(t, cs, has("llm__sample"))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "llm__sample", Arguments: map[string]any{"prompt": "p"}}); err == nil {
		t.Fatalf("the call given up while gathering answered: %q", text(res))
	}
	time.Sleep(2500*time.Millisecond - time.Since(start)) // past the gathering
	if n := g.Parked(); n != 0 {
		t.Errorf("%d calls parked after their client gave up while gathering", n)
	}
	// The backend's call has ended: a call to it is answered at once.
	if got := text(call(t, cs, "llm__echo", map[string]any{"text": "after"})); got != "after" {
		t.Errorf("a call after: %q", got)
	}
}
