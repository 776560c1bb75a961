package mcpfsm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// This file fulfils a 2026-07-28 server's input requests (SEP-2322): what the server
// asks of the client during a call (sampling, elicitation, roots) comes inside the
// call's answer, and the client calls again with the answers. The go-sdk's client
// would fulfil them itself, past the receiving middleware that sees the same
// requests on earlier protocol versions, and answer roots/list from one list per SDK
// client, which connections share. Here an input request goes the way the request
// of an earlier version goes: through the Manager's receiving middleware
// (AddReceivingMiddleware: a gateway answers roots/list per call there), then to the
// connection's handlers, under the call's context.

// The go-sdk's bounds on a call's rounds: in all, and of rounds that asked nothing
// (a server shedding load).
const (
	maxInputRounds = 10
	maxShedRounds  = 3
)

// inputRounds is the sending middleware of a connection's SDK client c (made with
// the go-sdk's own fulfilment disabled) that fulfils the input requests of a
// call, a prompt or a read, and sends it again with the answers, round after round.
// A round that asks more than maxServerRequests things fails the call before any is
// answered: each answer is a copy of what the client gives (its roots, say), and a
// server's answer of a few megabytes would otherwise have the client build, on as
// many goroutines, one of gigabytes.
func inputRounds(c *mcp.Client) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			switch method {
			case "tools/call", "prompts/get", "resources/read":
			default:
				return next(ctx, method, req)
			}
			shed := 0
			for round := 1; ; round++ {
				res, err := next(ctx, method, req)
				if err != nil {
					return res, err
				}
				asked, state, ok := inputRequests(res)
				if !ok {
					return res, nil
				}
				if len(asked) == 0 {
					if shed++; shed >= maxShedRounds {
						return nil, &inputError{fmt.Errorf("multi round-trip: the server asked nothing %d times (shedding load)", shed)}
					}
				}
				if round >= maxInputRounds {
					return nil, &inputError{fmt.Errorf("multi round-trip: the server still asks after %d rounds", round)}
				}
				if len(asked) > maxServerRequests {
					return nil, &inputError{fmt.Errorf("multi round-trip: the server asks %d things at once (the client answers at most %d)", len(asked), maxServerRequests)}
				}
				cs, ok := req.GetSession().(*mcp.ClientSession)
				if !ok {
					return res, nil
				}
				answers, err := fulfil(ctx, c, cs, asked)
				if err != nil {
					return nil, err
				}
				if req, err = nextRound(req, cs, answers, state); err != nil {
					return nil, &inputError{err}
				}
			}
		}
	}
}

// inputRequests returns what an answer asks of the client, and ok if it asks (an
// empty map asks nothing this round: the server sheds load).
func inputRequests(res mcp.Result) (mcp.InputRequestMap, string, bool) {
	switch r := res.(type) {
	case *mcp.CallToolResult:
		if r != nil && r.InputRequests != nil {
			return r.InputRequests, r.RequestState, true
		}
	case *mcp.GetPromptResult:
		if r != nil && r.InputRequests != nil {
			return r.InputRequests, r.RequestState, true
		}
	case *mcp.ReadResourceResult:
		if r != nil && r.InputRequests != nil {
			return r.InputRequests, r.RequestState, true
		}
	}
	return nil, "", false
}

// nextRound returns the request of the next round: a copy of req's params (the
// caller's are not changed) with the answers and the state to echo.
func nextRound(req mcp.Request, cs *mcp.ClientSession, answers mcp.InputResponseMap, state string) (mcp.Request, error) {
	var p mcp.Params
	switch q := req.GetParams().(type) {
	case *mcp.CallToolParams:
		cp := *q
		cp.InputResponses, cp.RequestState = answers, state
		p = &cp
	case *mcp.CallToolParamsRaw:
		cp := *q
		cp.InputResponses, cp.RequestState = answers, state
		p = &cp
	case *mcp.GetPromptParams:
		cp := *q
		cp.InputResponses, cp.RequestState = answers, state
		p = &cp
	case *mcp.ReadResourceParams:
		cp := *q
		cp.InputResponses, cp.RequestState = answers, state
		p = &cp
	default:
		return nil, fmt.Errorf("multi round-trip: params of type %T cannot carry answers", q)
	}
	return &mcp.ClientRequest[mcp.Params]{Session: cs, Params: p}, nil
}

// inputError is the error of a call whose server's input requests were not all
// answered (a handler's error, a panic, no handler), or that asked past the bounds:
// the call fails with cause server, whatever the error it wraps says. (A handler
// that gave up at its own deadline says context.DeadlineExceeded, which is no
// timeout of the connection's; on earlier protocol versions the error goes to the
// server, and the connection is not concerned either.)
type inputError struct{ err error }

func (e *inputError) Error() string { return e.err.Error() }
func (e *inputError) Unwrap() error { return e.err }

// fulfil answers a round's input requests at once; the first failure fails the
// call (a request with no answer is not sent back to the server), as the go-sdk's
// client does. The handlers' context ends with the call's, which ends with the
// session the call is on (see callPath), as a request's of the server's does on
// earlier protocol versions: the call then fails as one the session's close cut.
func fulfil(ctx context.Context, c *mcp.Client, cs *mcp.ClientSession, asked mcp.InputRequestMap) (mcp.InputResponseMap, error) {
	call := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	h := inputMiddleware(c)(answerInput)
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		answers = make(mcp.InputResponseMap, len(asked))
		first   error
	)
	for key, ir := range asked {
		wg.Go(func() {
			res, err := askInput(ctx, h, cs, ir)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if first == nil {
					first = fmt.Errorf("multi round-trip: fulfilling input request %q: %w", key, err)
					cancel()
				}
				return
			}
			answers[key] = res
		})
	}
	wg.Wait()
	if first != nil {
		if err := call.Err(); err != nil {
			// The call ended (its caller gave up, or its session's close cut it),
			// not the answering.
			return nil, fmt.Errorf("multi round-trip: the call ended while the client answered the server: %w", err)
		}
		return nil, &inputError{first}
	}
	return answers, nil
}

// askInput runs h on an input request as on the request of its method.
func askInput(ctx context.Context, h mcp.MethodHandler, cs *mcp.ClientSession, ir mcp.InputRequest) (mcp.InputResponse, error) {
	var res mcp.Result
	var err error
	switch p := ir.(type) {
	case *mcp.ListRootsParams:
		res, err = h(ctx, "roots/list", &mcp.ClientRequest[*mcp.ListRootsParams]{Session: cs, Params: p})
	case *mcp.CreateMessageWithToolsParams:
		res, err = h(ctx, "sampling/createMessage", &mcp.ClientRequest[*mcp.CreateMessageWithToolsParams]{Session: cs, Params: p})
	case *mcp.CreateMessageParams:
		res, err = h(ctx, "sampling/createMessage", &mcp.ClientRequest[*mcp.CreateMessageParams]{Session: cs, Params: p})
	case *mcp.ElicitParams:
		res, err = h(ctx, "elicitation/create", &mcp.ClientRequest[*mcp.ElicitParams]{Session: cs, Params: p})
	default:
		return nil, fmt.Errorf("unknown input request type %T", ir)
	}
	if err != nil {
		return nil, err
	}
	if r, ok := res.(mcp.InputResponse); ok && r != nil {
		return r, nil
	}
	return nil, fmt.Errorf("the answer %T is not one a server takes", res)
}

// answerInput is the end of an input request's way: the connection's handlers (see
// answer), or, for roots/list, the connection's roots (none but an empty list if it
// gave none, as the go-sdk's client answers).
func answerInput(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
	switch p := req.GetParams().(type) {
	case *mcp.ListRootsParams:
		var roots []*mcp.Root
		if s := sessionFrom(ctx); s != nil && s.conn != nil {
			roots = s.conn.Roots()
		}
		if roots == nil {
			roots = []*mcp.Root{}
		}
		return &mcp.ListRootsResult{Roots: roots}, nil
	case *mcp.CreateMessageWithToolsParams:
		if s := sessionFrom(ctx); s != nil && s.conn != nil && s.conn.hs.CreateMessage != nil && s.conn.hs.CreateMessageWithTools == nil {
			base, err := withoutTools(p)
			if err != nil {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
			}
			return answer(ctx, func(h *Handlers) func(context.Context, *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
				return h.CreateMessage
			}, base)
		}
		return answer(ctx, func(h *Handlers) func(context.Context, *mcp.CreateMessageWithToolsParams) (*mcp.CreateMessageWithToolsResult, error) {
			return h.CreateMessageWithTools
		}, p)
	case *mcp.CreateMessageParams: // a middleware's own
		return answer(ctx, func(h *Handlers) func(context.Context, *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
			return h.CreateMessage
		}, p)
	case *mcp.ElicitParams:
		if p == nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "elicitation/create without params"}
		}
		switch {
		case p.Mode == "url" && p.RequestedSchema != nil:
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "requestedSchema must not be set for URL elicitation"}
		case p.Mode == "url" && p.URL == "":
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "URL must be set for URL elicitation"}
		case (p.Mode == "" || p.Mode == "form") && p.URL != "":
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "URL must not be set for form elicitation"}
		case p.Mode != "" && p.Mode != "form" && p.Mode != "url":
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unsupported elicitation mode: %q", p.Mode)}
		}
		res, err := answer(ctx, func(h *Handlers) func(context.Context, *mcp.ElicitParams) (*mcp.ElicitResult, error) { return h.Elicit }, p)
		if err != nil {
			return nil, err
		}
		if err := checkElicited(p, res); err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
		}
		return res, nil
	}
	return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "the client does not answer " + method}
}

// withoutTools is p for a handler of sampling without tools (CreateMessage), as the
// go-sdk's client makes it: one content block per message at most.
func withoutTools(p *mcp.CreateMessageWithToolsParams) (*mcp.CreateMessageParams, error) {
	if len(p.Tools) > 0 {
		return nil, errors.New("the server asks to sample with tools; the client's handler (CreateMessage) takes none")
	}
	msgs := make([]*mcp.SamplingMessage, 0, len(p.Messages))
	for _, m := range p.Messages {
		if m == nil {
			return nil, errors.New("a message is null")
		}
		if len(m.Content) > 1 {
			return nil, fmt.Errorf("a message has %d content blocks; the client's handler (CreateMessage) takes one", len(m.Content))
		}
		var content mcp.Content
		if len(m.Content) == 1 {
			content = m.Content[0]
		}
		msgs = append(msgs, &mcp.SamplingMessage{Content: content, Role: m.Role})
	}
	return &mcp.CreateMessageParams{
		Meta: p.Meta, IncludeContext: p.IncludeContext, MaxTokens: p.MaxTokens, Messages: msgs,
		Metadata: p.Metadata, ModelPreferences: p.ModelPreferences, StopSequences: p.StopSequences,
		SystemPrompt: p.SystemPrompt, Temperature: p.Temperature,
	}, nil
}

// checkElicited checks an accepted form's content against the form's schema, and
// fills in the schema's defaults, as the go-sdk's client does for the requests of
// earlier protocol versions. (The go-sdk also refuses forms outside its reading of
// the spec's subset of JSON Schema, some of which the spec allows, such as titled
// multi-select enums: a form is not refused here; the server checks what it asked.)
func checkElicited(p *mcp.ElicitParams, res *mcp.ElicitResult) error {
	if res == nil || res.Action != "accept" || p.RequestedSchema == nil || res.Content == nil {
		return nil
	}
	data, err := json.Marshal(p.RequestedSchema)
	if err != nil {
		return fmt.Errorf("the requested schema: %w", err)
	}
	var schema jsonschema.Schema
	if err := json.Unmarshal(data, &schema); err != nil {
		return fmt.Errorf("the requested schema: %w", err)
	}
	resolved, err := schema.Resolve(nil)
	if err != nil {
		return fmt.Errorf("failed to resolve requested schema: %w", err)
	}
	if err := resolved.Validate(res.Content); err != nil {
		return fmt.Errorf("elicitation result content does not match requested schema: %w", err)
	}
	if err := resolved.ApplyDefaults(&res.Content); err != nil {
		return fmt.Errorf("failed to apply schema defaults to elicitation result: %w", err)
	}
	return nil
}
